package task

import (
	"bytes"
	"errors"
	"testing"

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
