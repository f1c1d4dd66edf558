package routing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/dpvm/dpvm/task"
)

// Kind is a frame's type. The values are part of the wire format: append
// only, never renumber.
type Kind uint8

// Frame kinds.
const (
	KindHello   Kind = 1  // msgpack Hello: who is calling
	KindMsgs    Kind = 2  // binary: a batch of envelopes
	KindAcks    Kind = 3  // binary: a batch of cumulative acknowledgements
	KindCall    Kind = 4  // msgpack Call: a control request
	KindReply   Kind = 5  // msgpack Reply: the answer to a Call
	KindEvent   Kind = 6  // msgpack Event: a broadcast (routes, hosts, notices)
	KindRefuse  Kind = 7  // binary: envelopes refused, with where to go instead
	KindPing    Kind = 8  // binary: heartbeat, with a sequence number
	KindPong    Kind = 9  // binary: heartbeat answer
	KindStream  Kind = 10 // msgpack: opens an extra stream (a direct checkpoint transfer)
	KindRetire  Kind = 11 // empty: the sender retired the connection (it lost a tie to another): no call of its follows
	KindSwim    Kind = 12 // binary: a failure detector's probe between hosts (routing/swim's Msg)
	maxKind     Kind = 14
	headerBytes      = 5 // u32 length (kind + body), u8 kind
)

// Frame kinds of routes on demand (routing/route).
const (
	// KindRouteAsk: binary, u64 TIDs (route.AppendAsk): queries for the
	// tasks' routes, to their origin host (to the master for a deleted
	// origin's tasks).
	KindRouteAsk Kind = 13
	// KindRouteAnswer: binary, the Refusal layout (AppendRefusal): each
	// task's route, the answer to a KindRouteAsk.
	KindRouteAnswer Kind = 14
)

var kindNames = [...]string{"", "hello", "msgs", "acks", "call", "reply", "event", "refuse", "ping", "pong", "stream", "retire", "swim", "route-ask", "route-answer"}

func (k Kind) String() string {
	if k >= 1 && k <= maxKind {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// DefaultMaxFrame is the largest frame a daemon accepts unless configured
// otherwise: 64 MiB, which bounds the largest message.
const DefaultMaxFrame = 64 << 20

// Frame errors.
var (
	ErrFrameTooLarge = errors.New("frame too large")
	ErrUnknownKind   = errors.New("unknown frame kind")
	ErrMalformed     = errors.New("malformed frame")
)

// Frame is one unit on the wire: a kind and its body.
type Frame struct {
	Kind Kind
	Body []byte
}

// AppendFrame appends the encoding of a frame of kind k with the given body
// to dst.
func AppendFrame(dst []byte, k Kind, body []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(body)+1))
	dst = append(dst, byte(k))
	return append(dst, body...)
}

// BeginFrame appends a frame header for kind k with a placeholder length and
// returns the offset to pass to EndFrame once the body has been appended.
func BeginFrame(dst []byte, k Kind) ([]byte, int) {
	off := len(dst)
	dst = append(dst, 0, 0, 0, 0, byte(k))
	return dst, off
}

// EndFrame fills in the length of the frame begun at off.
func EndFrame(dst []byte, off int) {
	binary.LittleEndian.PutUint32(dst[off:], uint32(len(dst)-off-4))
}

// Reader reads frames from a byte stream, refusing any larger than Max.
type Reader struct {
	r   io.Reader
	max int
	hdr [headerBytes]byte
	buf []byte
	// budget, when set, accounts the bodies of BudgetFrom bytes or more;
	// held is what the current frame holds of it.
	budget Budget
	held   int
}

// Budget bounds the memory of the frame bodies readers hold, across
// readers (see Reader.SetBudget). Acquire takes n bytes, waiting for room
// if need be, or fails (the reader's Next then fails with its error);
// Release gives them back.
type Budget interface {
	Acquire(n int) error
	Release(n int)
}

// BudgetFrom is the body size from which a Reader with a budget accounts a
// frame: smaller ones (every batch of small messages) are read without,
// and a connection keeps a buffer no larger than this between frames.
const BudgetFrom = 1 << 20

// SetBudget makes the reader account every frame body of BudgetFrom bytes
// or more in b, from before it is allocated until the next call to Next
// (or Free): a large frame waits until b has room for it.
func (fr *Reader) SetBudget(b Budget) { fr.budget = b }

// Free gives back what the current frame holds of the reader's budget,
// and the buffer it was read into. Call it when the stream ends (Next
// does it for the frame before).
func (fr *Reader) Free() {
	if fr.held == 0 {
		return
	}
	fr.budget.Release(fr.held)
	fr.held = 0
	fr.buf = nil
}

// NewReader returns a frame reader on r accepting frames of at most max
// bytes of body (DefaultMaxFrame if max <= 0).
func NewReader(r io.Reader, max int) *Reader {
	if max <= 0 {
		max = DefaultMaxFrame
	}
	return &Reader{r: r, max: max}
}

// Next reads the next frame. The body is valid until the next call to Next
// unless the caller copies it. Errors other than io.EOF are fatal for the
// stream: the caller closes the connection.
func (fr *Reader) Next() (Frame, error) {
	fr.Free()
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, fmt.Errorf("frame header: %w", ErrMalformed)
		}
		return Frame{}, err
	}
	n := int(binary.LittleEndian.Uint32(fr.hdr[:4]))
	k := Kind(fr.hdr[4])
	if n < 1 {
		return Frame{}, fmt.Errorf("frame length %d: %w", n, ErrMalformed)
	}
	if n-1 > fr.max {
		return Frame{}, fmt.Errorf("%v frame of %d bytes, limit %d: %w", k, n-1, fr.max, ErrFrameTooLarge)
	}
	if k < 1 || k > maxKind {
		return Frame{}, fmt.Errorf("%v: %w", k, ErrUnknownKind)
	}
	if fr.budget != nil && n-1 >= BudgetFrom {
		if err := fr.budget.Acquire(n - 1); err != nil {
			return Frame{}, fmt.Errorf("%v frame of %d bytes: %w", k, n-1, err)
		}
		fr.held = n - 1
	}
	if err := fr.readBody(n - 1); err != nil {
		fr.Free()
		return Frame{}, fmt.Errorf("%v frame body: %w: %v", k, ErrMalformed, err)
	}
	return Frame{Kind: k, Body: fr.buf}, nil
}

// growStep is how much of a frame's body the reader allocates before the
// bytes arrive: a header's length is only a claim, so a larger body is
// read into a buffer that at most doubles what has arrived, unless the
// reader's budget holds the body's bytes already.
const growStep = 1 << 20

// readBody reads n bytes of body into fr.buf, growing it as they arrive
// (at once when the budget holds n bytes for it: growing would allocate
// up to twice the body, half of it garbage, outside the budget).
func (fr *Reader) readBody(n int) error {
	if cap(fr.buf) >= n || n <= growStep || fr.held >= n {
		if cap(fr.buf) < n {
			fr.buf = make([]byte, n)
		}
		fr.buf = fr.buf[:n]
		_, err := io.ReadFull(fr.r, fr.buf)
		return err
	}
	buf := fr.buf[:0]
	for len(buf) < n {
		chunk := min(n-len(buf), max(growStep, len(buf)))
		buf = slices.Grow(buf, chunk)
		k, err := io.ReadFull(fr.r, buf[len(buf):len(buf)+chunk])
		buf = buf[:len(buf)+k]
		if err != nil {
			fr.buf = buf[:0]
			return err
		}
	}
	fr.buf = buf
	return nil
}

// Envelope is a message between tasks as it travels between daemons.
type Envelope struct {
	From, To task.TID
	// Seq numbers the messages of the (From, To) pair from 1. Seq 0 marks
	// an unsequenced system message (a notification), delivered as it
	// comes and never acknowledged; only those may have a zero From.
	Seq  uint64
	Tag  int32
	Body task.Payload
}

// envHeader is the fixed size of an envelope's header: from, to, seq (u64
// each), tag (i32), encoding (u8), body length (u32).
const envHeader = 8 + 8 + 8 + 4 + 1 + 4

// EnvelopeSize is the encoded size of e.
func EnvelopeSize(e *Envelope) int { return envHeader + len(e.Body.Data) }

// AppendEnvelope appends e's fixed binary encoding to dst.
func AppendEnvelope(dst []byte, e *Envelope) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.From))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.To))
	dst = binary.LittleEndian.AppendUint64(dst, e.Seq)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(e.Tag))
	dst = append(dst, byte(e.Body.Enc))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(e.Body.Data)))
	return append(dst, e.Body.Data...)
}

// AppendEnvelopeFrameHeader appends the header of a KindMsgs frame holding
// e alone, and e's own header: what precedes e's body on the wire, so that
// the body can be written from where it is, without a copy.
func AppendEnvelopeFrameHeader(dst []byte, e *Envelope) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(1+EnvelopeSize(e)))
	dst = append(dst, byte(KindMsgs))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.From))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.To))
	dst = binary.LittleEndian.AppendUint64(dst, e.Seq)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(e.Tag))
	dst = append(dst, byte(e.Body.Enc))
	return binary.LittleEndian.AppendUint32(dst, uint32(len(e.Body.Data)))
}

// DecodeEnvelopes decodes the body of a KindMsgs or KindRefuse frame: a
// sequence of envelopes filling it exactly. Bodies are copied out of b.
func DecodeEnvelopes(b []byte, fn func(Envelope) error) error {
	return decodeEnvelopes(b, true, fn)
}

// DecodeEnvelopesOwned is DecodeEnvelopes for a b the caller gives away:
// the bodies are slices of b, not copies (a large message is then copied
// once, from the connection into b).
func DecodeEnvelopesOwned(b []byte, fn func(Envelope) error) error {
	return decodeEnvelopes(b, false, fn)
}

func decodeEnvelopes(b []byte, copied bool, fn func(Envelope) error) error {
	for len(b) > 0 {
		if len(b) < envHeader {
			return fmt.Errorf("envelope header of %d bytes: %w", len(b), ErrMalformed)
		}
		e := Envelope{
			From: task.TID(binary.LittleEndian.Uint64(b)),
			To:   task.TID(binary.LittleEndian.Uint64(b[8:])),
			Seq:  binary.LittleEndian.Uint64(b[16:]),
			Tag:  int32(binary.LittleEndian.Uint32(b[24:])),
		}
		e.Body.Enc = task.Encoding(b[28])
		n := binary.LittleEndian.Uint32(b[29:])
		b = b[envHeader:]
		if uint64(n) > uint64(len(b)) {
			return fmt.Errorf("envelope body of %d bytes, %d left: %w", n, len(b), ErrMalformed)
		}
		if !e.Body.Enc.Valid() || e.Tag < 0 || e.To == 0 || e.To == task.AnyTask || (e.From == 0 && e.Seq != 0) {
			return fmt.Errorf("envelope %v→%v seq %d tag %d enc %d: %w", e.From, e.To, e.Seq, e.Tag, e.Body.Enc, ErrMalformed)
		}
		if copied {
			e.Body.Data = append([]byte(nil), b[:n]...)
		} else {
			e.Body.Data = b[:n:n]
		}
		b = b[n:]
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// ReadFrameOwned reads one frame from r into a buffer of its own, which
// the caller keeps (Reader.Next reuses its buffer instead): for frames
// whose bodies are handed on without a copy. A frame longer than max
// bytes of body is refused before anything is allocated for it.
func ReadFrameOwned(r io.Reader, max int) (Frame, error) {
	f, _, err := ReadFrameOwnedBudget(r, max, nil)
	return f, err
}

// ReadFrameOwnedBudget is ReadFrameOwned accounting a body of BudgetFrom
// bytes or more in b (when not nil), from before it is allocated: it
// returns how many bytes it took, which the caller releases when it has
// handled the frame (on an error it has taken nothing).
func ReadFrameOwnedBudget(r io.Reader, max int, b Budget) (Frame, int, error) {
	var hdr [headerBytes]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, 0, fmt.Errorf("frame header: %w", ErrMalformed)
		}
		return Frame{}, 0, err
	}
	n := int(binary.LittleEndian.Uint32(hdr[:4]))
	k := Kind(hdr[4])
	switch {
	case n < 1:
		return Frame{}, 0, fmt.Errorf("frame length %d: %w", n, ErrMalformed)
	case n-1 > max:
		return Frame{}, 0, fmt.Errorf("%v frame of %d bytes, limit %d: %w", k, n-1, max, ErrFrameTooLarge)
	case k < 1 || k > maxKind:
		return Frame{}, 0, fmt.Errorf("%v: %w", k, ErrUnknownKind)
	}
	held := 0
	if b != nil && n-1 >= BudgetFrom {
		if err := b.Acquire(n - 1); err != nil {
			return Frame{}, 0, fmt.Errorf("%v frame of %d bytes: %w", k, n-1, err)
		}
		held = n - 1
	}
	body := make([]byte, n-1)
	if _, err := io.ReadFull(r, body); err != nil {
		if held > 0 {
			b.Release(held)
		}
		return Frame{}, 0, fmt.Errorf("%v frame body: %w: %v", k, ErrMalformed, err)
	}
	return Frame{Kind: k, Body: body}, held, nil
}

// Pair names a (sender, receiver) pair of tasks.
type Pair struct{ From, To task.TID }

// Ack acknowledges every message of the pair (From, To) up to and including
// Seq: the receiving daemon has taken them into the receiver's mailbox.
type Ack struct {
	From, To task.TID
	Seq      uint64
}

const ackSize = 24

// AppendAck appends a's binary encoding to dst.
func AppendAck(dst []byte, a Ack) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(a.From))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(a.To))
	return binary.LittleEndian.AppendUint64(dst, a.Seq)
}

// DecodeAcks decodes the body of a KindAcks frame.
func DecodeAcks(b []byte, fn func(Ack)) error {
	if len(b)%ackSize != 0 {
		return fmt.Errorf("acks frame of %d bytes: %w", len(b), ErrMalformed)
	}
	for ; len(b) > 0; b = b[ackSize:] {
		fn(Ack{
			From: task.TID(binary.LittleEndian.Uint64(b)),
			To:   task.TID(binary.LittleEndian.Uint64(b[8:])),
			Seq:  binary.LittleEndian.Uint64(b[16:]),
		})
	}
	return nil
}
