package hostlist

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// MaxString bounds a name, an address or a reason on the wire: a decoder
// refuses a longer one, an encoder cuts a reason to it. The master admits
// no host whose name or address is longer (CheckEntry).
const MaxString = 1024

// The least bytes an encoded entry and delta take: what a count is
// checked against before anything is allocated for it.
const (
	minEntry = 1 + 1 + 1 + 1 + 8 + 1 + 1 // id, name, addr, cores, speed, mem, flags
	minDelta = 1 + 1 + 1 + 1             // seq, op, id, reason (a removal)
)

// CheckEntry says whether e can go on the wire: its name and address no
// longer than MaxString.
func CheckEntry(e Entry) error {
	if len(e.Name) > MaxString || len(e.Addr) > MaxString {
		return fmt.Errorf("host %v: a name of %d bytes and an address of %d (at most %d each)", e.ID, len(e.Name), len(e.Addr), MaxString)
	}
	return nil
}

// AppendDeltas appends the encoding of ds, in order, to dst.
func AppendDeltas(dst []byte, ds []Delta) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ds)))
	for _, d := range ds {
		dst = binary.AppendUvarint(dst, d.Seq)
		dst = append(dst, byte(d.Op))
		if d.Op == OpRemove {
			dst = binary.AppendUvarint(dst, uint64(d.Entry.ID))
			r := d.Reason
			if len(r) > MaxString {
				r = r[:MaxString]
			}
			dst = appendString(dst, r)
			continue
		}
		dst = appendEntry(dst, d.Entry)
	}
	return dst
}

// AppendSnapshot appends the encoding of the whole list of version v to
// dst.
func AppendSnapshot(dst []byte, v uint64, entries []Entry) []byte {
	dst = binary.AppendUvarint(dst, v)
	dst = binary.AppendUvarint(dst, uint64(len(entries)))
	for _, e := range entries {
		dst = appendEntry(dst, e)
	}
	return dst
}

func appendEntry(dst []byte, e Entry) []byte {
	dst = binary.AppendUvarint(dst, uint64(e.ID))
	dst = appendString(dst, e.Name)
	dst = appendString(dst, e.Addr)
	dst = binary.AppendUvarint(dst, uint64(max(e.Cores, 0)))
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(e.Speed))
	dst = binary.AppendVarint(dst, e.MemMiB)
	var flags byte
	if e.Master {
		flags |= 1
	}
	return append(dst, flags)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// DecodeDeltas decodes what AppendDeltas encoded. Anything else is
// refused with routing.ErrMalformed; the count is checked against the
// bytes given before the deltas are allocated.
func DecodeDeltas(b []byte) ([]Delta, error) {
	r := reader{b: b}
	n := r.count(minDelta)
	var out []Delta
	if r.err == nil {
		out = make([]Delta, 0, n)
	}
	for i := 0; i < n && r.err == nil; i++ {
		d := Delta{Seq: r.uvarint(), Op: Op(r.byte())}
		switch d.Op {
		case OpAdd:
			d.Entry = r.entry()
		case OpRemove:
			d.Entry.ID = r.id()
			d.Reason = r.string()
		default:
			r.fail(fmt.Sprintf("op %d", d.Op))
		}
		if d.Seq == 0 {
			r.fail("version 0")
		}
		out = append(out, d)
	}
	if err := r.done(); err != nil {
		return nil, fmt.Errorf("host list deltas: %w", err)
	}
	return out, nil
}

// DecodeSnapshot decodes what AppendSnapshot encoded, bounded as
// DecodeDeltas is.
func DecodeSnapshot(b []byte) (uint64, []Entry, error) {
	r := reader{b: b}
	v := r.uvarint()
	n := r.count(minEntry)
	var out []Entry
	if r.err == nil {
		out = make([]Entry, 0, n)
	}
	for i := 0; i < n && r.err == nil; i++ {
		out = append(out, r.entry())
	}
	if err := r.done(); err != nil {
		return 0, nil, fmt.Errorf("host list: %w", err)
	}
	return v, out, nil
}

// reader decodes, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(why string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", routing.ErrMalformed, why)
	}
	r.b = nil
}

func (r *reader) done() error {
	if r.err == nil && len(r.b) > 0 {
		r.fail(fmt.Sprintf("%d bytes past the end", len(r.b)))
	}
	return r.err
}

func (r *reader) uvarint() uint64 { return readVarint(r, binary.Uvarint) }

func (r *reader) varint() int64 { return readVarint(r, binary.Varint) }

// readVarint reads one varint by decode (binary.Uvarint or binary.Varint).
func readVarint[T uint64 | int64](r *reader, decode func([]byte) (T, int)) T {
	if r.err != nil {
		return 0
	}
	v, n := decode(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 1 {
		r.fail("short")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// count reads a count of items of at least min bytes each, refused when
// the bytes left cannot hold them.
func (r *reader) count(min int) int {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)/min) {
		r.fail(fmt.Sprintf("%d items in %d bytes", n, len(r.b)))
		return 0
	}
	return int(n)
}

func (r *reader) id() task.HostID {
	v := r.uvarint()
	if v > math.MaxUint32 {
		r.fail("host ID out of range")
		return 0
	}
	return task.HostID(v)
}

func (r *reader) string() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > MaxString || n > uint64(len(r.b)) {
		r.fail(fmt.Sprintf("a string of %d bytes (%d left, at most %d)", n, len(r.b), MaxString))
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) entry() Entry {
	e := Entry{ID: r.id(), Name: r.string(), Addr: r.string()}
	c := r.uvarint()
	if c > math.MaxInt32 {
		r.fail("cores out of range")
	}
	e.Cores = int(c)
	if r.err == nil && len(r.b) < 8 {
		r.fail("short")
	}
	if r.err == nil {
		e.Speed = math.Float64frombits(binary.LittleEndian.Uint64(r.b))
		r.b = r.b[8:]
	}
	e.MemMiB = r.varint()
	flags := r.byte()
	if flags&^1 != 0 {
		r.fail(fmt.Sprintf("flags %#x", flags))
	}
	e.Master = flags&1 != 0
	return e
}
