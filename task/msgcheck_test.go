package task

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

func TestCheckMsgpack(t *testing.T) {
	type inner struct {
		A []float64
		M map[string]any
		B []byte
		S string
	}
	good := []any{nil, true, 1, -1, 1 << 40, 3.5, float32(2), "s", string(make([]byte, 300)), make([]byte, 70000),
		[]int{1, 2, 3}, map[string]int{"a": 1}, inner{A: []float64{1, 2}, M: map[string]any{"x": []any{1, "y"}}, B: []byte{1}, S: "z"},
		make([]int8, 20), msgpack.RawMessage{0xd4, 1, 2}}
	for _, v := range good {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckMsgpack(b); err != nil {
			t.Errorf("%T %v: %v", v, b, err)
		}
		// Every strict prefix is truncated.
		for n := range len(b) {
			if err := CheckMsgpack(b[:n]); !errors.Is(err, ErrMsgpackBounds) {
				t.Errorf("%T cut to %d of %d bytes: %v", v, n, len(b), err)
				break
			}
		}
	}
	bad := [][]byte{
		{0xdd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xe3, 0xe4}, // array of 4G elements in 8 bytes
		{0xdf, 0x7f, 0xff, 0xff, 0xff},                   // map of 2G entries
		{0xdb, 0xff, 0xff, 0xff, 0xff, 'a'},              // string of 4 GB
		{0xc6, 0, 0, 1, 0, 1, 2},                         // binary of 256 bytes in 2
		{0x92, 0xdc, 0xff, 0xff},                         // nested
		{0xc1},                                           // never used
		{0xc9, 0xff, 0xff, 0xff, 0xff, 1},                // ext of 4 GB
	}
	for _, b := range bad {
		if err := CheckMsgpack(b); !errors.Is(err, ErrMsgpackBounds) {
			t.Errorf("% x: %v", b, err)
		}
	}
}

// nestedArrays is n one-element arrays around nil.
func nestedArrays(n int) []byte {
	return append(bytes.Repeat([]byte{0x91}, n), 0xc0)
}

func TestCheckMsgpackLimits(t *testing.T) {
	lim := MsgpackLimits{MaxDepth: 8, MaxItems: 4}
	ok := [][]byte{nestedArrays(8), {0x94, 1, 2, 3, 4}, {0x82, 1, 2, 3, 4}, {0xc0, 0xff}}
	for _, b := range ok {
		if err := CheckMsgpackLimits(b, lim); err != nil {
			t.Errorf("% x: %v", b, err)
		}
	}
	bad := [][]byte{
		nestedArrays(9),
		nestedArrays(1 << 20),
		{0x95, 1, 2, 3, 4, 5},    // five items, at most four
		{0x83, 1, 2, 3, 4, 5, 6}, // three entries: six items
		append(bytes.Repeat([]byte{0x81, 0xa1, 'k'}, 9), 0xc0),                                   // maps
		append([]byte{0x93, 0xc4, 3, 1, 2, 3, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0}, nestedArrays(8)...), // deep after skipped items
	}
	for _, b := range bad {
		if err := CheckMsgpackLimits(b, lim); !errors.Is(err, ErrMsgpackBounds) {
			t.Errorf("% x: %v", b[:min(len(b), 16)], err)
		}
	}
	if err := CheckMsgpack(nestedArrays(MaxMsgpackDepth)); err != nil {
		t.Errorf("%d levels by default: %v", MaxMsgpackDepth, err)
	}
	if err := CheckMsgpack(nestedArrays(MaxMsgpackDepth + 1)); !errors.Is(err, ErrMsgpackBounds) {
		t.Errorf("%d levels by default: %v", MaxMsgpackDepth+1, err)
	}
}

// TestCheckMsgpackDeepSiblings checks the counts of levels deeper than
// those the walker keeps in its frame: each level of [[…[nil], 1]…, 1]
// has an item left after its nested array, so every count must come back
// intact for the value to end where its bytes do.
func TestCheckMsgpackDeepSiblings(t *testing.T) {
	for _, n := range []int{15, 16, 17, 40, MaxMsgpackDepth} {
		b := []byte{0xc0}
		for range n {
			b = append(append([]byte{0x92}, b...), 0x01)
		}
		if err := CheckMsgpack(b); err != nil {
			t.Errorf("%d levels of pairs: %v", n, err)
		}
		var v any
		if err := msgpack.Unmarshal(b, &v); err != nil || depthOf(v) != n {
			t.Fatalf("%d levels of pairs decode to depth %d: %v", n, depthOf(v), err)
		}
		if err := CheckMsgpack(b[:len(b)-1]); !errors.Is(err, ErrMsgpackBounds) {
			t.Errorf("%d levels of pairs, last item cut: %v", n, err)
		}
		if err := CheckMsgpackLimits(b, MsgpackLimits{MaxDepth: n - 1}); !errors.Is(err, ErrMsgpackBounds) {
			t.Errorf("%d levels of pairs under a limit of %d: %v", n, n-1, err)
		}
	}
}

// depthOf is how deeply a decoded value's arrays and maps nest.
func depthOf(v any) int {
	d := 0
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			d = max(d, depthOf(e))
		}
		return d + 1
	case map[string]any:
		for _, e := range v {
			d = max(d, depthOf(e))
		}
		return d + 1
	case map[any]any:
		for k, e := range v {
			d = max(d, depthOf(k), depthOf(e))
		}
		return d + 1
	}
	return 0
}

// TestAmbiguousExtensionRefused: msgpack's decoder reads an extension as
// the map its payload begins with when it decodes into a Go map, so a
// payload the walk took as opaque bytes would reach the decoder unchecked.
// Each case below is refused; without the refusal the first decodes a
// header of a million elements (16 MB) from inside the payload.
func TestAmbiguousExtensionRefused(t *testing.T) {
	cases := map[string][]byte{
		"array inside":   {0xc7, 7, 0x30, 0x81, 0xa0, 0xdd, 0x00, 0x10, 0x00, 0x00},
		"fixext8":        {0xd7, 0x30, 0x8f, 0xa2, 0xe5, 0xb7, 0xdd, 0xc9, 0xae, 0x30},
		"nil then more":  {0x92, 0xd4, 0x01, 0xc0, 0xdd, 0xff, 0xff, 0xff, 0xff},
		"map16":          {0xd5, 0x02, 0xde, 0x00},
		"empty then map": {0x92, 0xc7, 0, 0x05, 0x80},
		// A timestamp msgpack never writes (12 bytes, nanoseconds past a
		// second) is not rewritten.
		"timestamp 12": {0xc7, 12, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
	}
	for name, b := range cases {
		if err := CheckMsgpack(b); !errors.Is(err, ErrMsgpackAmbiguous) || !errors.Is(err, ErrMsgpackBounds) {
			t.Errorf("%s: check: %v", name, err)
		}
		var m map[string]any
		if err := UnmarshalMsgpack(b, &m); !errors.Is(err, ErrMsgpackAmbiguous) {
			t.Errorf("%s: decode into a map: %v (%v)", name, err, m)
		}
	}
}

// TestTimestampsRewritten: times whose 4- or 8-byte form begins like a map
// (about 7% of nanosecond fractions, and seconds from 2038 to 2046) are
// rewritten, not refused, and decode to the times sent, into their own
// types and into any; other times pass as they are.
func TestTimestampsRewritten(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 7))
	type stamped struct {
		At   time.Time
		Seen []time.Time
		By   map[string]time.Time
	}
	ambiguous := 0
	for i := range 2000 {
		sec := rng.Int64N(1 << 34)
		if i%4 == 0 { // 2038 to 2046: the 4-byte form begins with 0x80 to 0x8f
			sec = 1<<31 + rng.Int64N(1<<28)
		}
		nsec := rng.Int64N(1e9)
		if i%4 == 0 {
			nsec = 0
		}
		at := time.Unix(sec, nsec)
		v := stamped{At: at, Seen: []time.Time{at, at.Add(time.Nanosecond)}, By: map[string]time.Time{"a": at}}
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		safe, err := SafeMsgpack(b, MsgpackLimits{})
		if err != nil {
			t.Fatalf("%v: %v", at, err)
		}
		if CheckMsgpack(b) != nil {
			ambiguous++
			if bytes.Equal(safe, b) {
				t.Fatalf("%v: refused, yet not rewritten", at)
			}
		} else if !bytes.Equal(safe, b) {
			t.Fatalf("%v: rewritten though accepted", at)
		}
		var got stamped
		if err := UnmarshalMsgpack(b, &got); err != nil {
			t.Fatalf("%v: %v", at, err)
		}
		if !got.At.Equal(at) || !got.Seen[0].Equal(at) || !got.Seen[1].Equal(at.Add(time.Nanosecond)) || !got.By["a"].Equal(at) {
			t.Fatalf("%v: decoded %+v", at, got)
		}
		var loose any
		if err := UnmarshalMsgpack(b, &loose); err != nil {
			t.Fatalf("%v into any: %v", at, err)
		}
		if tm, ok := loose.(map[string]any)["At"].(time.Time); !ok || !tm.Equal(at) {
			t.Fatalf("%v into any: %v", at, loose)
		}
		// A rewritten timestamp where a map is expected is an error, not
		// a map.
		tb, err := msgpack.Marshal(at)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := UnmarshalMsgpack(tb, &m); err == nil {
			t.Fatalf("%v: a timestamp decoded as the map %v", at, m)
		}
	}
	if ambiguous < 100 {
		t.Fatalf("only %d of 2000 encodings needed a rewrite: the test misses its case", ambiguous)
	}
}

// FuzzCheckMsgpack: the walk never panics, and what it passes the decoder
// decodes without error into a value nested no deeper than the limit.
func FuzzCheckMsgpack(f *testing.F) {
	f.Add(nestedArrays(3))
	f.Add(nestedArrays(9))
	f.Add([]byte{0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0x91, 0xc0})
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0})
	lim := MsgpackLimits{MaxDepth: 8, MaxItems: 64}
	f.Fuzz(func(t *testing.T, b []byte) {
		if CheckMsgpackLimits(b, lim) != nil {
			return
		}
		// Maps as targets too: the decoder reads an extension as a map
		// there (see TestAmbiguousExtensionRefused).
		var (
			m  map[string]any
			mm map[int][]map[string]any
		)
		_ = msgpack.Unmarshal(b, &m)
		_ = msgpack.Unmarshal(b, &mm)
		var v any
		if err := msgpack.Unmarshal(b, &v); err != nil {
			// The walk checks framing, not what the decoder makes of
			// the bytes (an ext type it has no decoder for).
			return
		}
		if d := depthOf(v); d > lim.MaxDepth {
			t.Fatalf("passed a value nested %d deep, limit %d", d, lim.MaxDepth)
		}
	})
}
