package ckpt

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

// numbers has a slice of every fixed-size number kind.
type numbers struct {
	F64  []float64
	F32  []float32
	I64  []int64
	I32  []int32
	I    []int
	U64  []uint64
	U32  []uint32
	C128 []complex128
	B    []byte
	I8   []int8
	I16  []int16
	U16  []uint16
	U    []uint
	C64  []complex64
	Arr  [5]float64
	Real []celsius
	Iter int
	Z    complex128
	Z64  complex64
}

type celsius float64

func (*numbers) Run(*task.Ctx) error { return nil }

type inner struct {
	Name string
	Vals []float64
	Grid [][]int32
}

// Base is embedded in nested: its fields are inlined.
type Base struct {
	Step int
	Hist []float64
}

type list struct {
	V    int
	Next *list
}

// nested exercises everything besides numeric slices.
type nested struct {
	Base
	Blocks   []inner
	ByName   map[string]inner
	ByID     map[task.TID][]float64
	Ptr      *inner
	NilPtr   *inner
	Matrix   [][]float64
	Strings  []string
	Peers    []task.TID
	Host     task.HostID
	When     time.Time
	Skip     chan int `msgpack:"-"`
	Renamed  int      `msgpack:"r"`
	private  int
	Any      any
	Empty    []float64
	Nil      []float64
	NoBlocks []inner
	Arrays   [3][2]float64
	Inners   [2]inner
	List     *list
	Flags    map[int]bool
	Nums     numbers
}

func (*nested) Run(*task.Ctx) error { return nil }

// empty has no fields at all.
type empty struct{}

func (*empty) Run(*task.Ctx) error { return nil }

// big holds one large slice (benchmarks and big round trips).
type big struct {
	Iter int
	Data []float64
}

func (*big) Run(*task.Ctx) error { return nil }

// cyclic can point at itself.
type cyclic struct {
	Self *cyclic
}

func (*cyclic) Run(*task.Ctx) error { return nil }

// withChan has a field no checkpoint can hold.
type withChan struct {
	C chan int
}

func (*withChan) Run(*task.Ctx) error { return nil }

// unregistered is never registered.
type unregistered struct{ X int }

func (*unregistered) Run(*task.Ctx) error { return nil }

func init() {
	task.Register("ckpt-test.numbers", (*numbers)(nil))
	task.Register("ckpt-test.nested", (*nested)(nil))
	task.Register("ckpt-test.empty", (*empty)(nil))
	task.Register("ckpt-test.big", (*big)(nil))
	task.Register("ckpt-test.cyclic", (*cyclic)(nil))
	task.Register("ckpt-test.withChan", (*withChan)(nil))
}

func randNumbers(r *rand.Rand, n int) *numbers {
	s := &numbers{Iter: r.IntN(1000), Z: complex(r.Float64(), -1), Z64: complex(float32(r.Float64()), 2)}
	for i := 0; i < n; i++ {
		s.F64 = append(s.F64, r.NormFloat64())
		s.F32 = append(s.F32, float32(r.NormFloat64()))
		s.I64 = append(s.I64, int64(r.Uint64()))
		s.I32 = append(s.I32, int32(r.Uint32()))
		s.I = append(s.I, int(r.Uint64()))
		s.U64 = append(s.U64, r.Uint64())
		s.U32 = append(s.U32, r.Uint32())
		s.C128 = append(s.C128, complex(r.NormFloat64(), r.NormFloat64()))
		s.B = append(s.B, byte(r.Uint32()))
		s.I8 = append(s.I8, int8(r.Uint32()))
		s.I16 = append(s.I16, int16(r.Uint32()))
		s.U16 = append(s.U16, uint16(r.Uint32()))
		s.U = append(s.U, uint(r.Uint64()))
		s.C64 = append(s.C64, complex(float32(r.NormFloat64()), float32(r.NormFloat64())))
		s.Real = append(s.Real, celsius(r.Float64()))
	}
	for i := range s.Arr {
		s.Arr[i] = r.Float64()
	}
	return s
}

func sampleNested(r *rand.Rand) *nested {
	t1, t2 := task.NewTID(1, 7), task.NewTID(2, 9)
	return &nested{
		Base: Base{Step: 42, Hist: []float64{1, 2, 3}},
		Blocks: []inner{
			{Name: "a", Vals: []float64{r.Float64(), r.Float64()}, Grid: [][]int32{{1, 2}, {3}}},
			{Name: "b", Vals: nil, Grid: [][]int32{}},
		},
		ByName:  map[string]inner{"x": {Name: "x", Vals: []float64{-1}}, "y": {Name: "y"}, "z": {}},
		ByID:    map[task.TID][]float64{t1: {1.5}, t2: {}},
		Ptr:     &inner{Name: "ptr", Vals: []float64{9}},
		Matrix:  [][]float64{{1, 2}, nil, {}},
		Strings: []string{"", "héllo", "world"},
		Peers:   []task.TID{t1, t2},
		Host:    3,
		When:    time.Unix(1700000000, 123456789),
		Renamed: 7,
		Any:     "anything",
		Empty:   []float64{},
		Arrays:  [3][2]float64{{1, 2}, {3, 4}, {5, 6}},
		Inners:  [2]inner{{Name: "i0"}, {Name: "i1", Vals: []float64{2}}},
		List:    &list{V: 1, Next: &list{V: 2, Next: &list{V: 3}}},
		Flags:   map[int]bool{3: true, 1: false, 2: true},
		Nums:    *randNumbers(r, 5),
	}
}

func sampleMeta() *Meta {
	me, peer := task.NewTID(1, 5), task.NewTID(2, 6)
	return &Meta{
		TID: me, Parent: task.NewTID(1, 1), Job: 12, Epoch: 4,
		Mailbox: []routing.Envelope{
			{From: peer, To: me, Seq: 3, Tag: 1, Body: task.Payload{Enc: task.EncMsgpack, Data: []byte{0x93, 1, 2, 3}}},
			{From: 0, To: me, Seq: 0, Tag: 99, Body: task.Payload{Enc: task.EncFloat64s, Data: make([]byte, 16)}},
		},
		InSeq:       map[task.TID]uint64{peer: 4, task.NewTID(3, 1): 1},
		Early:       []routing.Envelope{{From: peer, To: me, Seq: 6, Tag: 2, Body: task.Payload{Enc: task.EncBytes, Data: []byte("early")}}},
		OutSeq:      map[task.TID]uint64{peer: 10},
		Groups:      []Membership{{Group: "workers", Inst: 2}},
		Watchers:    []Watcher{{Who: task.NewTID(1, 1), Tag: 77}},
		HostWatches: []HostWatch{{Kind: task.HostDelete, Host: 2, Tag: 5}},
		Created:     time.Unix(1700000000, 42).UTC(),
	}
}

func encode(t testing.TB, meta *Meta, state task.Task) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := Write(&buf, testKey, meta, state)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("Write returned %d, wrote %d bytes", n, buf.Len())
	}
	return buf.Bytes()
}

// region is a span of a checkpoint's bytes and what it holds.
type region struct {
	start, end int
	what       string // "header", "keyid", "kind", "chunk", "content", "end", "trailer", "mac"
}

// layout parses a well-formed checkpoint's framing.
func layout(t testing.TB, b []byte) []region {
	t.Helper()
	rs := []region{{0, headerSize, "header"}, {headerSize, headerSize + KeyIDSize, "keyid"}}
	off := headerSize + KeyIDSize
	for range 2 {
		rs = append(rs, region{off, off + 1, "kind"})
		off++
		for {
			n := int(binary.LittleEndian.Uint32(b[off:]))
			if n == 0 {
				rs = append(rs, region{off, off + 4, "end"})
				off += 4
				break
			}
			rs = append(rs, region{off, off + 4, "chunk"}, region{off + 4, off + 4 + n, "content"})
			off += 4 + n
		}
	}
	rs = append(rs, region{off, off + 9, "trailer"}, region{off + 9, off + 9 + macSize, "mac"})
	if off+9+macSize != len(b) {
		t.Fatalf("layout: %d bytes parsed of %d", off+9+macSize, len(b))
	}
	return rs
}

// craft builds an authentic checkpoint from a meta and raw state section
// content, for inputs Write would never produce.
func craft(t testing.TB, key []byte, wm *wireMeta, state []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	s := newSink(&buf, newHasher(newMAC(key)))
	defer s.mac.stop()
	var h [headerSize]byte
	copy(h[:], magic)
	binary.LittleEndian.PutUint16(h[8:], Format)
	must(t, s.write(h[:]))
	must(t, s.write(make([]byte, KeyIDSize)))
	sw, err := newSecWriter(s, secMeta)
	must(t, err)
	b, err := msgpackMarshal(wm)
	must(t, err)
	_, err = sw.Write(b)
	must(t, err)
	must(t, sw.close())
	sw, err = newSecWriter(s, secState)
	must(t, err)
	_, err = sw.Write(state)
	must(t, err)
	must(t, sw.close())
	var tr [9]byte
	tr[0] = trailerTag
	binary.LittleEndian.PutUint64(tr[1:], uint64(s.n))
	must(t, s.write(tr[:]))
	must(t, s.writeUnauthenticated(s.mac.sum()))
	return buf.Bytes()
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// hideLen hides a reader's length, as a network stream would.
type hideLen struct {
	r interface{ Read([]byte) (int, error) }
}

func (h hideLen) Read(p []byte) (int, error) { return h.r.Read(p) }

// contents concatenates the sections' contents, without their framing.
func contents(t testing.TB, b []byte) []byte {
	var out []byte
	for _, rg := range layout(t, b) {
		if rg.what == "content" {
			out = append(out, b[rg.start:rg.end]...)
		}
	}
	return out
}
