package task

import (
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
