package replica

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/raft/v3/raftpb"
)

// WireVersion is the first byte of every encoded message: the format of
// what follows (1: raftpb.Message in protobuf). Append only.
const WireVersion = 1

// EncodeMessage appends m's wire form to b: WireVersion, then m in
// raft's protobuf encoding. The transport frames it (it carries no
// length of its own).
func EncodeMessage(b []byte, m *pb.Message) ([]byte, error) {
	b = append(b, WireVersion)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, m)
	if err != nil {
		return nil, fmt.Errorf("replica: encode %v: %w", m.GetType(), err)
	}
	return b, nil
}

// DecodeMessage decodes one message from b, refusing b longer than max
// before decoding anything (so what it allocates is bounded by max), an
// unknown WireVersion, bytes protobuf cannot read, and a message replicas
// do not send each other: a local type (a proposal included: followers
// refuse proposals, they do not forward them), storage responses, or no
// sender or receiver. Errors wrap ErrTooLarge or ErrBadMessage.
func DecodeMessage(b []byte, max int) (*pb.Message, error) {
	switch {
	case len(b) > max:
		return nil, fmt.Errorf("%w: message of %d bytes, over %d", ErrTooLarge, len(b), max)
	case len(b) == 0:
		return nil, fmt.Errorf("%w: empty", ErrBadMessage)
	case b[0] != WireVersion:
		return nil, fmt.Errorf("%w: wire version %d, not %d", ErrBadMessage, b[0], WireVersion)
	}
	m := new(pb.Message)
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b[1:], m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	switch {
	case !peerType(m.GetType()):
		return nil, fmt.Errorf("%w: type %v is not sent between replicas", ErrBadMessage, m.GetType())
	case m.GetFrom() == 0 || m.GetTo() == 0:
		return nil, fmt.Errorf("%w: %v from %d to %d", ErrBadMessage, m.GetType(), m.GetFrom(), m.GetTo())
	case len(m.GetResponses()) > 0:
		return nil, fmt.Errorf("%w: %v carries storage responses", ErrBadMessage, m.GetType())
	}
	return m, nil
}
