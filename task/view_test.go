package task

import (
	"errors"
	"math"
	"slices"
	"testing"
	"unsafe"
)

// TestPayloadFloat64sComplex128s checks the views of a payload as float64s
// and complex128s: the values sent, from aligned bytes (the bytes
// themselves on a little-endian host) and unaligned ones, and an error for
// another encoding or a length that is not a whole number of elements.
func TestPayloadFloat64sComplex128s(t *testing.T) {
	fs := []float64{0, 1, -1, math.Inf(1), math.SmallestNonzeroFloat64, 1e300}
	p, err := Encode(fs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Float64s()
	if err != nil || !slices.Equal(got, fs) {
		t.Fatalf("aligned: %v, %v", got, err)
	}
	if littleEndian && &got[0] != (*float64)(unsafe.Pointer(&p.Data[0])) {
		t.Error("aligned: a copy, not the payload's bytes")
	}
	odd := make([]byte, len(p.Data)+1)
	copy(odd[1:], p.Data)
	got, err = Payload{Enc: EncFloat64s, Data: odd[1:]}.Float64s()
	if err != nil || !slices.Equal(got, fs) {
		t.Fatalf("unaligned: %v, %v", got, err)
	}

	cs := []complex128{complex(1, -2), complex(math.Pi, 0), 0}
	pc, err := Encode(cs)
	if err != nil {
		t.Fatal(err)
	}
	gc, err := pc.Complex128s()
	if err != nil || !slices.Equal(gc, cs) {
		t.Fatalf("complex: %v, %v", gc, err)
	}
	if littleEndian && &gc[0] != (*complex128)(unsafe.Pointer(&pc.Data[0])) {
		t.Error("complex: a copy, not the payload's bytes")
	}
	if got, err := (Payload{Enc: EncFloat64s}).Float64s(); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v, %v", got, err)
	}
	for _, bad := range []Payload{pc, {Enc: EncFloat64s, Data: p.Data[:5]}} {
		if _, err := bad.Float64s(); !errors.Is(err, ErrDecode) {
			t.Errorf("%v payload of %d bytes as float64s: %v, want ErrDecode", bad.Enc, len(bad.Data), err)
		}
	}
	if _, err := p.Complex128s(); !errors.Is(err, ErrDecode) {
		t.Errorf("float64s as complex128s: %v, want ErrDecode", err)
	}
}
