package ckpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/dpvm/dpvm/task"
)

func msgpackMarshal(v any) ([]byte, error) { return msgpack.Marshal(v) }

func roundTrip(t *testing.T, meta *Meta, state task.Task) (*Meta, task.Task) {
	t.Helper()
	b := encode(t, meta, state)
	m, got, err := Read(bytes.NewReader(b), testKey)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if !reflect.DeepEqual(got, state) {
		t.Fatalf("restored state differs:\n got %+v\nwant %+v", got, state)
	}
	return m, got
}

func TestRoundTripNumbers(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, n := range []int{0, 1, 7, 1000} {
		roundTrip(t, sampleMeta(), randNumbers(r, n))
	}
}

// TestPortable runs the byte-order-independent path of numeric blocks (the
// one big-endian hosts take) and checks it writes the same bytes and reads
// them back the same.
func TestPortable(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	state := randNumbers(r, 20000) // more than one conversion piece
	native := encode(t, sampleMeta(), state)
	nativeLE = false
	defer func() { nativeLE = true }()
	portable := encode(t, sampleMeta(), state)
	if !bytes.Equal(contents(t, native), contents(t, portable)) {
		t.Fatal("the portable path writes different section contents")
	}
	_, got, err := Read(bytes.NewReader(native), testKey)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, state) {
		t.Fatal("the portable path reads a different state")
	}
}

func TestRoundTripNested(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	m, _ := roundTrip(t, sampleMeta(), sampleNested(r))
	if m.Type != "ckpt-test.nested" {
		t.Fatalf("meta type %q", m.Type)
	}
}

// TestUnexportedNotCarried checks that a checkpoint carries exported fields
// only: an unexported field restores as its zero value.
func TestUnexportedNotCarried(t *testing.T) {
	st := sampleNested(rand.New(rand.NewPCG(3, 3)))
	st.private = 5
	_, got, err := Read(bytes.NewReader(encode(t, sampleMeta(), st)), testKey)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	n := got.(*nested)
	if n.private != 0 {
		t.Fatalf("unexported field restored as %d, want 0", n.private)
	}
	st.private = 0
	if !reflect.DeepEqual(n, st) {
		t.Fatalf("restored state differs beyond the unexported field:\n got %+v\nwant %+v", n, st)
	}
}

func TestRoundTripEmpty(t *testing.T) {
	roundTrip(t, &Meta{TID: task.NewTID(1, 1)}, &empty{})
	roundTrip(t, &Meta{TID: task.NewTID(1, 1)}, &numbers{})
	roundTrip(t, &Meta{TID: task.NewTID(1, 1)}, &nested{})
	roundTrip(t, &Meta{TID: task.NewTID(1, 1)}, &numbers{F64: []float64{}, B: []byte{}, C128: []complex128{}})
}

func TestRoundTripBig(t *testing.T) {
	s := &big{Iter: 3, Data: make([]float64, 8<<20)} // 64 MiB
	raw := func(b *big) []byte { return memBytes(unsafe.Pointer(&b.Data[0]), len(b.Data), 8) }
	rand.NewChaCha8([32]byte{4}).Read(raw(s))
	var buf bytes.Buffer
	buf.Grow(8*len(s.Data) + 4096)
	if _, err := Write(&buf, testKey, sampleMeta(), s); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if want := 8 * len(s.Data); len(b) < want || len(b) > want+4096 {
		t.Fatalf("checkpoint of %d bytes for %d bytes of state", len(b), want)
	}
	// From a reader whose length is unknown, the slice grows from
	// Limits.Prealloc as the bytes arrive.
	for _, lim := range []Limits{{}} {
		_, got, err := ReadLimits(hideLen{bytes.NewReader(b)}, testKey, lim)
		if err != nil {
			t.Fatal(err)
		}
		if g := got.(*big); g.Iter != s.Iter || len(g.Data) != len(s.Data) || !bytes.Equal(raw(g), raw(s)) {
			t.Fatalf("limits %+v: restored state differs", lim)
		}
	}
}

func TestMetaRoundTrip(t *testing.T) {
	want := sampleMeta()
	m, _ := roundTrip(t, want, &empty{})
	want.Type = "ckpt-test.empty"
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("meta differs:\n got %+v\nwant %+v", m, want)
	}
	// Siblings, in their order.
	want = sampleMeta()
	want.Siblings = []task.TID{task.NewTID(3, 4), want.TID, task.NewTID(2, 6)}
	m, _ = roundTrip(t, want, &empty{})
	want.Type = "ckpt-test.empty"
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("meta with siblings differs:\n got %+v\nwant %+v", m, want)
	}
	// Nil and empty collections and a zero creation time survive as such.
	bare := &Meta{TID: task.NewTID(2, 2), InSeq: map[task.TID]uint64{}, Groups: []Membership{}}
	m, _ = roundTrip(t, bare, &empty{})
	bare.Type = "ckpt-test.empty"
	if !reflect.DeepEqual(m, bare) {
		t.Fatalf("meta differs:\n got %+v\nwant %+v", m, bare)
	}
}

func TestDeterministic(t *testing.T) {
	a := encode(t, sampleMeta(), sampleNested(rand.New(rand.NewPCG(5, 5))))
	for range 5 {
		b := encode(t, sampleMeta(), sampleNested(rand.New(rand.NewPCG(5, 5))))
		if !bytes.Equal(a, b) {
			t.Fatal("equal checkpoints encode to different bytes")
		}
	}
}

// TestReadsExactly: Read leaves whatever follows the checkpoint in the
// stream, whatever the reader's chunking.
func TestReadsExactly(t *testing.T) {
	b := encode(t, sampleMeta(), sampleNested(rand.New(rand.NewPCG(6, 6))))
	tail := []byte("next message")
	stream := append(append([]byte(nil), b...), tail...)
	readers := map[string]func(io.Reader) io.Reader{
		"plain":    func(r io.Reader) io.Reader { return r },
		"hidden":   func(r io.Reader) io.Reader { return hideLen{r} },
		"one-byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
	}
	for name, wrap := range readers {
		br := bytes.NewReader(stream)
		if _, _, err := Read(wrap(br), testKey); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rest, _ := io.ReadAll(br)
		if !bytes.Equal(rest, tail) {
			t.Fatalf("%s: %q left after the checkpoint, want %q", name, rest, tail)
		}
	}
}

func TestTruncated(t *testing.T) {
	b := encode(t, sampleMeta(), sampleNested(rand.New(rand.NewPCG(7, 7))))
	// Every boundary of the framing, then every prefix.
	var cuts []int
	for _, rg := range layout(t, b) {
		cuts = append(cuts, rg.start, rg.end-1)
	}
	for n := 0; n < len(b); n++ {
		cuts = append(cuts, n)
	}
	for _, n := range cuts {
		m, st, err := Read(bytes.NewReader(b[:n]), testKey)
		if !errors.Is(err, ErrTruncated) || m != nil || st != nil {
			t.Fatalf("cut at %d of %d: %v (meta %v, task %v), want ErrTruncated", n, len(b), err, m, st)
		}
	}
	// Random cuts in a big checkpoint, from a stream of unknown length.
	s := &big{Data: make([]float64, 1<<20)}
	big := encode(t, sampleMeta(), s)
	r := rand.New(rand.NewPCG(8, 8))
	for range 20 {
		n := r.IntN(len(big))
		if _, _, err := Read(hideLen{bytes.NewReader(big[:n])}, testKey); !errors.Is(err, ErrTruncated) {
			t.Fatalf("cut at %d of %d: %v, want ErrTruncated", n, len(big), err)
		}
	}
	_, _, err := Read(bytes.NewReader(b[:len(b)/2]), testKey)
	if !strings.Contains(err.Error(), "offset") {
		t.Fatalf("error does not say where: %v", err)
	}
}

// TestBitFlips flips one bit at a time: every flip is refused; where the
// framing survives (the contents of the sections, the trailer, the MAC) it
// is refused as tampering.
func TestBitFlips(t *testing.T) {
	b := encode(t, sampleMeta(), sampleNested(rand.New(rand.NewPCG(9, 9))))
	regions := layout(t, b)
	what := func(off int) string {
		for _, rg := range regions {
			if off >= rg.start && off < rg.end {
				return rg.what
			}
		}
		return "?"
	}
	r := rand.New(rand.NewPCG(10, 10))
	mut := make([]byte, len(b))
	tampered := 0
	check := func(off, bit int) {
		copy(mut, b)
		mut[off] ^= 1 << bit
		m, st, err := Read(bytes.NewReader(mut), testKey)
		if err == nil || m != nil || st != nil {
			t.Fatalf("flip of bit %d at %d (%s) accepted", bit, off, what(off))
		}
		if !errors.Is(err, ErrTampered) && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrVersion) {
			t.Fatalf("flip at %d (%s): %v is none of the sentinels", off, what(off), err)
		}
		switch what(off) {
		case "content", "trailer", "mac", "keyid":
			if !errors.Is(err, ErrTampered) {
				t.Fatalf("flip of bit %d at %d (%s): %v, want ErrTampered", bit, off, what(off), err)
			}
		case "header":
			// A flip of the flags to AuthChannel's is refused as carrying
			// no MAC; any other is found before the MAC.
			if errors.Is(err, ErrTampered) && !errors.Is(err, errNoMAC) {
				t.Fatalf("flip at %d (header): %v: a header flip is found before the MAC", off, err)
			}
		}
		if errors.Is(err, ErrTampered) {
			tampered++
		}
	}
	for off := range b {
		check(off, r.IntN(8))
	}
	for range 2000 {
		check(r.IntN(len(b)), r.IntN(8))
	}
	t.Logf("%d flips refused, %d as tampering", len(b)+2000, tampered)
}

func TestWrongKeyMagicVersion(t *testing.T) {
	b := encode(t, sampleMeta(), randNumbers(rand.New(rand.NewPCG(11, 11)), 10))
	if _, _, err := Read(bytes.NewReader(b), []byte("another key")); !errors.Is(err, ErrTampered) {
		t.Fatalf("wrong key: %v", err)
	}
	bad := bytes.Clone(b)
	copy(bad, "NOTCKPT!")
	if _, _, err := Read(bytes.NewReader(bad), testKey); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "not a dpvm checkpoint") {
		t.Fatalf("wrong magic: %v", err)
	}
	bad = bytes.Clone(b)
	binary.LittleEndian.PutUint16(bad[8:], Format+1)
	if _, _, err := Read(bytes.NewReader(bad), testKey); !errors.Is(err, ErrVersion) {
		t.Fatalf("newer version: %v", err)
	}
	binary.LittleEndian.PutUint16(bad[8:], 0)
	if _, _, err := Read(bytes.NewReader(bad), testKey); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("version 0: %v", err)
	}
	bad = bytes.Clone(b)
	bad[10] = 1
	if _, _, err := Read(bytes.NewReader(bad), testKey); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("unknown flag: %v", err)
	}
	if _, _, err := Read(bytes.NewReader(b), nil); err == nil {
		t.Fatal("empty key accepted")
	}
}

func TestUnknownType(t *testing.T) {
	wm := toWire(sampleMeta())
	wm.Type = "no-such-type"
	b := craft(t, testKey, wm, []byte{0x80})
	_, _, err := Read(bytes.NewReader(b), testKey)
	if !errors.Is(err, task.ErrUnknownType) || !strings.Contains(err.Error(), "no-such-type") {
		t.Fatalf("unknown type: %v", err)
	}
	// Under the wrong key, the same bytes are refused as tampered: the MAC
	// is checked before the type is reported.
	if _, _, err := Read(bytes.NewReader(b), []byte("other")); !errors.Is(err, ErrTampered) {
		t.Fatalf("unknown type, wrong key: %v", err)
	}
}

// block builds a numeric block header.
func block(code byte, size uint64) []byte {
	h := []byte{msgpcode.FixExt8, code, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint64(h[2:], size)
	return h
}

// stateMap encodes a one-field struct whose value is raw.
func stateMap(field string, raw []byte) []byte {
	b, _ := msgpack.Marshal(field)
	return append(append([]byte{0x81}, b...), raw...)
}

// TestCrafted feeds authentic checkpoints that Write never produces: the
// decoder must refuse them with ErrCorrupt and allocate no more than the
// stream supplies.
func TestCrafted(t *testing.T) {
	wm := toWire(sampleMeta())
	wm.Type = "ckpt-test.big"
	cases := []struct {
		name  string
		state []byte
		want  string
	}{
		{"absurd block", stateMap("Data", block(codeFloat64, 1<<60)), "limit"},
		{"block beyond the stream", stateMap("Data", block(codeFloat64, 1<<30)), "ends inside"},
		{"wrong element kind", stateMap("Data", append(block(codeFloat32, 8), make([]byte, 8)...)), "float32"},
		{"ragged block", stateMap("Data", append(block(codeFloat64, 7), make([]byte, 7)...)), "8-byte"},
		{"not a block", stateMap("Data", []byte{0xa1, 'x'}), "numeric block"},
		{"trailing bytes", append(stateMap("Iter", []byte{1}), 0xc0), "after the state"},
		{"not a map", []byte{0x01}, "unexpected code"},
		{"empty section", nil, "ends inside"},
		{"huge array", stateMap("Data", []byte{msgpcode.Array32, 0xff, 0xff, 0xff, 0xff, 0x01}), "ends inside"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := craft(t, testKey, wm, c.state)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, st, err := ReadLimits(hideLen{bytes.NewReader(b)}, testKey, Limits{MaxState: 1 << 40, Prealloc: 1 << 20})
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrCorrupt) || st != nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want ErrCorrupt saying %q", err, c.want)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
				t.Fatalf("allocated %d bytes for a %d-byte checkpoint", alloc, len(b))
			}
		})
	}
	// A binary value in an interface field declaring 4 GiB.
	wn := toWire(sampleMeta())
	wn.Type = "ckpt-test.nested"
	for _, raw := range [][]byte{
		{msgpcode.Bin32, 0xff, 0xff, 0xff, 0xff, 1},
		{msgpcode.Str32, 0xff, 0xff, 0xff, 0xff, 'a'},
		{msgpcode.Ext32, 0xff, 0xff, 0xff, 0xff, 1},
		bytes.Repeat([]byte{0x91}, maxDepth+10),
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _, err := Read(bytes.NewReader(craft(t, testKey, wn, stateMap("Any", raw))), testKey)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("hostile leaf %x: %v", raw[:6], err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
			t.Fatalf("hostile leaf %x: allocated %d bytes", raw[:6], alloc)
		}
	}
	// A state over the limit.
	b := encode(t, sampleMeta(), &big{Data: make([]float64, 1000)})
	if _, _, err := ReadLimits(bytes.NewReader(b), testKey, Limits{MaxState: 4000}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("state over the limit: %v", err)
	}
	if _, _, err := ReadLimits(bytes.NewReader(b), testKey, Limits{MaxMeta: 10}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "meta") {
		t.Fatalf("meta over the limit: %v", err)
	}
	// A chunk longer than the format allows.
	bad := bytes.Clone(b)
	binary.LittleEndian.PutUint32(bad[headerSize+KeyIDSize+1:], maxChunk+1)
	if _, _, err := Read(bytes.NewReader(bad), testKey); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "chunk") {
		t.Fatalf("oversized chunk: %v", err)
	}
	// A meta without a TID.
	wm = toWire(sampleMeta())
	wm.Type, wm.TID = "ckpt-test.big", 0
	if _, _, err := Read(bytes.NewReader(craft(t, testKey, wm, []byte{0x80})), testKey); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "TID") {
		t.Fatalf("zero TID: %v", err)
	}
	// Siblings that leave the task out, or name the zero TID.
	for _, sibs := range [][]uint64{{7, 8}, {uint64(sampleMeta().TID), 0}} {
		wm = toWire(sampleMeta())
		wm.Type, wm.Siblings = "ckpt-test.big", sibs
		if _, _, err := Read(bytes.NewReader(craft(t, testKey, wm, []byte{0x80})), testKey); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "sibling") {
			t.Fatalf("siblings %v: %v", sibs, err)
		}
	}
	// Unknown fields are skipped, missing ones stay zero: a state written by
	// a build whose type had other fields.
	wm.TID = 1
	wm.Siblings = nil
	st := append([]byte{0x82}, append(mp("Gone"), append(mp([]string{"x"}), append(mp("Iter"), mp(5)...)...)...)...)
	_, got, err := Read(bytes.NewReader(craft(t, testKey, wm, st)), testKey)
	if err != nil || !reflect.DeepEqual(got, &big{Iter: 5}) {
		t.Fatalf("evolved type: %v, %+v", err, got)
	}
	// A numeric slice written as a plain msgpack array is accepted.
	st = stateMap("Data", mp([]float64{1, 2.5}))
	_, got, err = Read(bytes.NewReader(craft(t, testKey, wm, st)), testKey)
	if err != nil || !reflect.DeepEqual(got, &big{Data: []float64{1, 2.5}}) {
		t.Fatalf("array for a numeric slice: %v, %+v", err, got)
	}
}

func mp(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestWriteErrors(t *testing.T) {
	var buf bytes.Buffer
	m := sampleMeta()
	cases := []struct {
		name  string
		key   []byte
		meta  *Meta
		state task.Task
		want  string
	}{
		{"unregistered", testKey, m, &unregistered{}, "unknown task type"},
		{"type mismatch", testKey, &Meta{TID: 1, Type: "ckpt-test.big"}, &empty{}, "ckpt-test.empty"},
		{"zero TID", testKey, &Meta{}, &empty{}, "zero TID"},
		{"no key", nil, m, &empty{}, "key"},
		{"nil meta", testKey, nil, &empty{}, "nil"},
		{"nil state", testKey, m, (*empty)(nil), "nil"},
		{"chan field", testKey, m, &withChan{}, "cannot be checkpointed"},
		{"cycle", testKey, m, func() task.Task { c := &cyclic{}; c.Self = c; return c }(), "deeper"},
	}
	for _, c := range cases {
		if _, err := Write(&buf, c.key, c.meta, c.state); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	if _, err := Write(&buf, testKey, m, &unregistered{}); !errors.Is(err, task.ErrUnknownType) {
		t.Errorf("unregistered: %v does not wrap ErrUnknownType", err)
	}
	// A failing writer: the error comes back, with the offset.
	fw := &failWriter{left: 1000, err: errors.New("disk full")}
	_, err := Write(fw, testKey, m, &big{Data: make([]float64, 1000)})
	if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "offset") {
		t.Fatalf("failing writer: %v", err)
	}
}

// failWriter accepts left bytes, then fails with err.
type failWriter struct {
	w    io.Writer
	left int
	err  error
}

func (f *failWriter) Write(p []byte) (int, error) {
	if len(p) > f.left {
		n := f.left
		f.left = 0
		if f.w != nil && n > 0 {
			f.w.Write(p[:n])
		}
		return n, f.err
	}
	f.left -= len(p)
	if f.w != nil {
		return f.w.Write(p)
	}
	return len(p), nil
}

func TestNewBytes(t *testing.T) {
	for _, n := range []int{0, 100, 8 << 20} {
		b := NewBytes(n)
		if len(b) != n || bytes.Count(b, []byte{0}) != n {
			t.Fatalf("NewBytes(%d): %d bytes, not all zero", n, len(b))
		}
	}
}
