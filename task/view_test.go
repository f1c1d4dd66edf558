package task

import (
	"errors"
	"math"
	"slices"
	"testing"
	"unsafe"
)

// TestPayloadViews checks the views of a payload as int32s, float64s and
// complex128s: the values sent, from aligned bytes (the bytes themselves
// on a little-endian host) and unaligned ones, nothing from no bytes, and
// an error for another encoding or a length that is not a whole number of
// elements.
func TestPayloadViews(t *testing.T) {
	checkView(t, []int32{0, 1, -1, 1 << 30, -(1 << 31), 12345}, Payload.Int32s)
	checkView(t, []float64{0, 1, -1, math.Inf(1), math.SmallestNonzeroFloat64, 1e300}, Payload.Float64s)
	checkView(t, []complex128{complex(1, -2), complex(math.Pi, 0), 0}, Payload.Complex128s)
}

func checkView[T int32 | float64 | complex128](t *testing.T, vals []T, view func(Payload) ([]T, error)) {
	t.Helper()
	p, err := Encode(vals)
	if err != nil {
		t.Fatal(err)
	}
	got, err := view(p)
	if err != nil || !slices.Equal(got, vals) {
		t.Fatalf("%v aligned: %v, %v", p.Enc, got, err)
	}
	if littleEndian && &got[0] != (*T)(unsafe.Pointer(&p.Data[0])) {
		t.Errorf("%v aligned: a copy, not the payload's bytes", p.Enc)
	}
	odd := make([]byte, len(p.Data)+1)
	copy(odd[1:], p.Data)
	got, err = view(Payload{Enc: p.Enc, Data: odd[1:]})
	if err != nil || !slices.Equal(got, vals) {
		t.Fatalf("%v unaligned: %v, %v", p.Enc, got, err)
	}
	if got, err := view(Payload{Enc: p.Enc}); err != nil || len(got) != 0 {
		t.Fatalf("%v empty: %v, %v", p.Enc, got, err)
	}
	other, err := Encode([]byte{1, 2, 3, 4, 5, 6, 7, 8})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Payload{other, {Enc: p.Enc, Data: p.Data[:len(p.Data)-1]}} {
		if _, err := view(bad); !errors.Is(err, ErrDecode) {
			t.Errorf("%v payload of %d bytes viewed as %v: %v, want ErrDecode", bad.Enc, len(bad.Data), p.Enc, err)
		}
	}
}
