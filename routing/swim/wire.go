package swim

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dpvm/dpvm/task"
)

// Wire sizes (see the package documentation).
const (
	headerLen = 22
	updateLen = 13
	// MaxMsgLen is the longest encoded Msg.
	MaxMsgLen = headerLen + MaxGossip*updateLen
)

// ErrMsg: bytes that are not a Msg.
var ErrMsg = errors.New("swim: malformed message")

// AppendMsg appends m's encoding to dst. It refuses a message with more
// than MaxGossip updates.
func AppendMsg(dst []byte, m Msg) ([]byte, error) {
	if len(m.Gossip) > MaxGossip {
		return dst, fmt.Errorf("%w: %d updates, at most %d", ErrMsg, len(m.Gossip), MaxGossip)
	}
	dst = append(dst, byte(m.Kind))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(m.From))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(m.To))
	dst = binary.LittleEndian.AppendUint32(dst, m.Inc)
	dst = binary.LittleEndian.AppendUint32(dst, m.Seq)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(m.Target))
	dst = append(dst, byte(len(m.Gossip)))
	for _, u := range m.Gossip {
		dst = append(dst, byte(u.State))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(u.Host))
		dst = binary.LittleEndian.AppendUint32(dst, u.Inc)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(u.From))
	}
	return dst, nil
}

// ParseMsg decodes one Msg, the whole of b. The update count is checked
// against maxGossip (at most MaxGossip) and the length before anything is
// allocated; kinds and states outside the protocol are refused.
func ParseMsg(b []byte, maxGossip int) (Msg, error) {
	maxGossip = min(max(maxGossip, 0), MaxGossip)
	if len(b) < headerLen {
		return Msg{}, fmt.Errorf("%w: %d bytes, less than a header", ErrMsg, len(b))
	}
	m := Msg{
		Kind:   MsgKind(b[0]),
		From:   task.HostID(binary.LittleEndian.Uint32(b[1:])),
		To:     task.HostID(binary.LittleEndian.Uint32(b[5:])),
		Inc:    binary.LittleEndian.Uint32(b[9:]),
		Seq:    binary.LittleEndian.Uint32(b[13:]),
		Target: task.HostID(binary.LittleEndian.Uint32(b[17:])),
	}
	if m.Kind < Ping || m.Kind > Nack {
		return Msg{}, fmt.Errorf("%w: kind %d", ErrMsg, b[0])
	}
	n := int(b[21])
	if n > maxGossip {
		return Msg{}, fmt.Errorf("%w: %d updates, at most %d", ErrMsg, n, maxGossip)
	}
	if len(b) != headerLen+n*updateLen {
		return Msg{}, fmt.Errorf("%w: %d bytes for %d updates", ErrMsg, len(b), n)
	}
	if n > 0 {
		m.Gossip = make([]Update, n)
	}
	for i := range m.Gossip {
		p := b[headerLen+i*updateLen:]
		u := Update{State: State(p[0]), Host: task.HostID(binary.LittleEndian.Uint32(p[1:])),
			Inc: binary.LittleEndian.Uint32(p[5:]), From: task.HostID(binary.LittleEndian.Uint32(p[9:]))}
		if u.State < Alive || u.State > Dead {
			return Msg{}, fmt.Errorf("%w: update %d: state %d", ErrMsg, i, p[0])
		}
		m.Gossip[i] = u
	}
	return m, nil
}
