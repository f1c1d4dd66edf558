package task

import (
	"context"
	"reflect"
	"testing"
	"unsafe"
)

// sendRecorder is an endpoint that records the payloads sent to it by
// Send. The methods it does not implement are the embedded nil
// Endpoint's: calling one panics.
type sendRecorder struct {
	Endpoint
	sent []Payload
	how  []string
}

func (r *sendRecorder) Context() context.Context { return context.Background() }

func (r *sendRecorder) Send(_ context.Context, _ TID, _ int, p Payload) error {
	r.sent, r.how = append(r.sent, p), append(r.how, "send")
	return nil
}

// inPlaceRecorder is a sendRecorder that implements InPlaceSender.
type inPlaceRecorder struct{ sendRecorder }

func (r *inPlaceRecorder) SendInPlace(_ context.Context, _ TID, _ int, p Payload) error {
	r.sent, r.how = append(r.sent, p), append(r.how, "in place")
	return nil
}

// sameMemory reports whether p's bytes are the memory of slice s.
func sameMemory(p Payload, s any) bool {
	v := reflect.ValueOf(s)
	if v.Kind() != reflect.Slice || v.Len() == 0 || len(p.Data) == 0 {
		return false
	}
	return unsafe.Pointer(&p.Data[0]) == v.UnsafePointer() && uintptr(len(p.Data)) == uintptr(v.Len())*v.Type().Elem().Size()
}

// TestSendInPlace: through an endpoint that can, Send with InPlace hands over a
// []byte or numeric slice's memory (on a little-endian host, where that is
// the wire's form; []int where int has the wire's 8 bytes), and the body
// decodes to the values sent; other values, and empty slices, are encoded
// as Send encodes them. Through an endpoint that cannot, it is Send, which
// copies.
func TestSendInPlace(t *testing.T) {
	values := []any{
		[]byte("bytes"),
		[]float64{1.5, -2},
		[]float32{3.25},
		[]int64{-1, 1 << 40},
		[]int32{7, -7, 1 << 30},
		[]int{-3, 1 << 33},
		[]uint64{1 << 63},
		[]uint32{1 << 31},
		[]complex128{complex(1, -1)},
		point{X: 1, Name: "p"},
		[]int32{},
	}
	rec := &inPlaceRecorder{}
	c := NewCtx(rec, nil)
	for _, v := range values {
		if err := c.Send(NewTID(1, 2), 3, v, InPlace()); err != nil {
			t.Fatalf("%T: %v", v, err)
		}
	}
	for i, v := range values {
		p := rec.sent[i]
		if rec.how[i] != "in place" {
			t.Errorf("%T went by %s", v, rec.how[i])
		}
		want, err := Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		if p.Enc != want.Enc || string(p.Data) != string(want.Data) {
			t.Errorf("%T: %v payload %x, want Send's %v %x", v, p.Enc, p.Data, want.Enc, want.Data)
		}
		kind := reflect.TypeOf(v).Kind()
		elem := uintptr(0)
		if kind == reflect.Slice {
			elem = reflect.TypeOf(v).Elem().Size()
		}
		view := littleEndian && kind == reflect.Slice && reflect.ValueOf(v).Len() > 0 &&
			(p.Enc == EncBytes || elem == uintptr(p.Enc.elemSize()))
		if got := sameMemory(p, v); got != view {
			t.Errorf("%T: the body is the slice's memory: %v, want %v", v, got, view)
		}
	}

	plain := &sendRecorder{}
	c = NewCtx(plain, nil)
	s := []int32{1, 2, 3}
	if err := c.Send(NewTID(1, 2), 3, s, InPlace()); err != nil {
		t.Fatal(err)
	}
	if plain.how[0] != "send" || sameMemory(plain.sent[0], s) {
		t.Errorf("without InPlaceSender: sent by %s, the slice's memory: %v; want a copy by Send", plain.how[0], sameMemory(plain.sent[0], s))
	}
	if err := c.Send(NewTID(1, 2), -1, s, InPlace()); err == nil {
		t.Error("a bad tag was accepted")
	}
}
