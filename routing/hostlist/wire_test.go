package hostlist

import (
	"errors"
	"reflect"
	"testing"

	"github.com/dpvm/dpvm/routing"
)

// TestWireRoundTrip: deltas and a whole list decode as they were encoded;
// a reason past MaxString is cut to it.
func TestWireRoundTrip(t *testing.T) {
	long := string(make([]byte, MaxString+5))
	ds := []Delta{
		{Seq: 1, Op: OpAdd, Entry: Entry{ID: 7, Name: "h7", Addr: "10.0.0.7:7946", Cores: 16, Speed: 1.5, MemMiB: -1, Master: true}},
		{Seq: 300, Op: OpRemove, Entry: Entry{ID: 1 << 31}, Reason: "silent"},
		{Seq: 301, Op: OpRemove, Entry: Entry{ID: 2}, Reason: long},
	}
	got, err := DecodeDeltas(AppendDeltas(nil, ds))
	if err != nil {
		t.Fatal(err)
	}
	ds[2].Reason = long[:MaxString]
	if !reflect.DeepEqual(got, ds) {
		t.Errorf("deltas %+v, want %+v", got, ds)
	}
	es := []Entry{ds[0].Entry, {ID: 9, Name: "h9", Addr: "h9:1"}}
	v, ges, err := DecodeSnapshot(AppendSnapshot(nil, 42, es))
	if err != nil || v != 42 || !reflect.DeepEqual(ges, es) {
		t.Errorf("list: %d %+v %v", v, ges, err)
	}
	// One entry of a simulated host: the size the scale model counts.
	if n := len(AppendSnapshot(nil, 1, es[1:])) - 2; n > 30 {
		t.Errorf("an entry takes %d bytes", n)
	}
}

// TestWireRefused: what is not an encoding is refused as malformed,
// before a count is allocated.
func TestWireRefused(t *testing.T) {
	big := []byte{0xff, 0xff, 0xff, 0xff, 0x0f} // a count of 2^32-1 in no bytes
	for name, b := range map[string][]byte{
		"huge count":   big,
		"empty":        {},
		"trailing":     append(AppendDeltas(nil, nil), 0),
		"bad op":       {1, 1, 9, 1, 0},
		"version 0":    {1, 0, 2, 1, 0},
		"long string":  {1, 1, 2, 1, 0xff, 0x7f},
		"id past u32":  {1, 1, 2, 0x80, 0x80, 0x80, 0x80, 0x10, 0},
		"short reason": {1, 1, 2, 1, 5, 'a'},
	} {
		if _, err := DecodeDeltas(b); !errors.Is(err, routing.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	if _, _, err := DecodeSnapshot(append([]byte{1}, big...)); !errors.Is(err, routing.ErrMalformed) {
		t.Errorf("a list of 2^32-1 entries in no bytes: %v", err)
	}
	if CheckEntry(Entry{Addr: string(make([]byte, MaxString+1))}) == nil {
		t.Error("an address past MaxString passed CheckEntry")
	}
}

// FuzzDecodeDeltas: any bytes decode or are refused as malformed; what
// decodes holds no more deltas than the bytes can encode, and encodes
// back to what decodes the same.
func FuzzDecodeDeltas(f *testing.F) {
	f.Add(AppendDeltas(nil, []Delta{{Seq: 1, Op: OpAdd, Entry: Entry{ID: 3, Name: "h3", Addr: "h3:1"}}, {Seq: 2, Op: OpRemove, Entry: Entry{ID: 3}, Reason: "x"}}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		ds, err := DecodeDeltas(b)
		if err != nil {
			if !errors.Is(err, routing.ErrMalformed) {
				t.Fatalf("refused without ErrMalformed: %v", err)
			}
			return
		}
		if len(ds) > len(b)/minDelta {
			t.Fatalf("%d deltas from %d bytes", len(ds), len(b))
		}
		again, err := DecodeDeltas(AppendDeltas(nil, ds))
		if err != nil || !sameDeltas(again, ds) {
			t.Fatalf("re-encoded: %+v %v, want %+v", again, err, ds)
		}
	})
}

// FuzzDecodeSnapshot is FuzzDecodeDeltas for a whole list.
func FuzzDecodeSnapshot(f *testing.F) {
	f.Add(AppendSnapshot(nil, 5, []Entry{{ID: 1, Name: "h1", Addr: "h1:1", Cores: 1, Speed: 1}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, es, err := DecodeSnapshot(b)
		if err != nil {
			if !errors.Is(err, routing.ErrMalformed) {
				t.Fatalf("refused without ErrMalformed: %v", err)
			}
			return
		}
		if len(es) > len(b)/minEntry {
			t.Fatalf("%d entries from %d bytes", len(es), len(b))
		}
		v2, again, err := DecodeSnapshot(AppendSnapshot(nil, v, es))
		if err != nil || v2 != v || len(again) != len(es) {
			t.Fatalf("re-encoded: %d %d %v, want %d %d", v2, len(again), err, v, len(es))
		}
	})
}

// sameDeltas compares deltas, a NaN speed equal to itself.
func sameDeltas(a, b []Delta) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Entry.Speed != y.Entry.Speed && x.Entry.Speed == x.Entry.Speed {
			return false
		}
		x.Entry.Speed, y.Entry.Speed = 0, 0
		if x != y {
			return false
		}
	}
	return true
}
