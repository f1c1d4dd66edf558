package task

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

type point struct {
	X, Y float64
	Name string
	Tags []int
}

func roundTrip[T any](t *testing.T, in T, wantEnc Encoding) {
	t.Helper()
	p, err := Encode(in)
	if err != nil {
		t.Fatalf("Encode(%T): %v", in, err)
	}
	if p.Enc != wantEnc {
		t.Fatalf("Encode(%T) encoding = %v, want %v", in, p.Enc, wantEnc)
	}
	var out T
	if err := p.Decode(&out); err != nil {
		t.Fatalf("Decode(%T): %v", in, err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip of %T: got %v, want %v", in, out, in)
	}
}

func TestPayloadRoundTrips(t *testing.T) {
	roundTrip(t, []byte("hello"), EncBytes)
	roundTrip(t, []float64{1.5, -2, math.Inf(1), math.SmallestNonzeroFloat64}, EncFloat64s)
	roundTrip(t, []float32{1.5, -2}, EncFloat32s)
	roundTrip(t, []int64{math.MinInt64, 0, math.MaxInt64}, EncInt64s)
	roundTrip(t, []int32{math.MinInt32, 7}, EncInt32s)
	roundTrip(t, []int{-1, 1 << 40}, EncInts)
	roundTrip(t, []uint64{math.MaxUint64}, EncUint64s)
	roundTrip(t, []uint32{math.MaxUint32, 3}, EncUint32s)
	roundTrip(t, []complex128{complex(1, -2), complex(math.Pi, 0)}, EncComplex128s)
	roundTrip(t, point{X: 1, Y: 2, Name: "p", Tags: []int{3}}, EncMsgpack)
	roundTrip(t, "a string", EncMsgpack)
	roundTrip(t, 42, EncMsgpack)
	roundTrip(t, map[string]int{"a": 1}, EncMsgpack)
	roundTrip(t, NewTID(2, 3), EncMsgpack)
}

func TestPayloadSenderMayReuse(t *testing.T) {
	in := []float64{1, 2, 3}
	p, _ := Encode(in)
	in[0] = 99
	b := []byte{1, 2}
	pb, _ := Encode(b)
	b[0] = 99
	var out []float64
	var outb []byte
	if err := p.Decode(&out); err != nil || out[0] != 1 {
		t.Fatalf("payload changed with the sender's slice: %v %v", out, err)
	}
	if err := pb.Decode(&outb); err != nil || outb[0] != 1 {
		t.Fatalf("payload changed with the sender's bytes: %v %v", outb, err)
	}
}

func TestDecodeReusesCapacity(t *testing.T) {
	p, _ := Encode([]float64{1, 2})
	buf := make([]float64, 0, 16)
	if err := p.Decode(&buf); err != nil {
		t.Fatal(err)
	}
	if cap(buf) != 16 || len(buf) != 2 || buf[1] != 2 {
		t.Fatalf("decode did not reuse the buffer: len %d cap %d %v", len(buf), cap(buf), buf)
	}
}

func TestDecodeMismatch(t *testing.T) {
	p, _ := Encode([]float64{1})
	var ints []int64
	if err := p.Decode(&ints); !errors.Is(err, ErrDecode) {
		t.Errorf("float64s into *[]int64: %v, want ErrDecode", err)
	}
	var f []float64
	if err := p.Decode(f); !errors.Is(err, ErrDecode) {
		t.Errorf("decode into non-pointer: %v, want ErrDecode", err)
	}
	var anyv any
	if err := p.Decode(&anyv); err != nil || !reflect.DeepEqual(anyv, []float64{1}) {
		t.Errorf("decode into *any = %v, %v", anyv, err)
	}
	bad := Payload{Enc: EncFloat64s, Data: []byte{1, 2, 3}}
	if err := bad.Decode(&f); !errors.Is(err, ErrDecode) {
		t.Errorf("truncated float64s: %v, want ErrDecode", err)
	}
	if err := (Payload{Enc: 200}).Decode(&f); !errors.Is(err, ErrDecode) {
		t.Errorf("unknown encoding: %v, want ErrDecode", err)
	}
	var pt point
	if err := (Payload{Enc: EncMsgpack, Data: []byte{0xc1}}).Decode(&pt); !errors.Is(err, ErrDecode) {
		t.Errorf("malformed msgpack: %v, want ErrDecode", err)
	}
}

func TestEncodeError(t *testing.T) {
	if _, err := Encode(make(chan int)); !errors.Is(err, ErrEncode) {
		t.Errorf("Encode(chan) = %v, want ErrEncode", err)
	}
}

// FuzzPayloadDecode feeds arbitrary bytes of every encoding to Decode into
// several targets: it must return an error or a value, never panic.
func FuzzPayloadDecode(f *testing.F) {
	f.Add(uint8(EncMsgpack), []byte{0x93, 1, 2, 3})
	f.Add(uint8(EncFloat64s), []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f})
	f.Add(uint8(EncBytes), []byte("abc"))
	f.Add(uint8(EncComplex128s), make([]byte, 17))
	f.Fuzz(func(t *testing.T, enc uint8, data []byte) {
		p := Payload{Enc: Encoding(enc), Data: data}
		var (
			a  any
			fs []float64
			is []int32
			c  []complex128
			pt point
			s  string
			m  map[string]any
		)
		for _, v := range []any{&a, &fs, &is, &c, &pt, &s, &m} {
			_ = p.Decode(v)
		}
	})
}

func BenchmarkEncodeFloat64s(b *testing.B) {
	s := make([]float64, 1<<17) // 1 MiB
	b.SetBytes(int64(len(s) * 8))
	for b.Loop() {
		if _, err := Encode(s); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeFloat64s(b *testing.B) {
	p, _ := Encode(make([]float64, 1<<17))
	var out []float64
	b.SetBytes(int64(len(p.Data)))
	for b.Loop() {
		if err := p.Decode(&out); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeSmallStruct(b *testing.B) {
	v := point{X: 1, Y: 2, Name: "p"}
	for b.Loop() {
		if _, err := Encode(v); err != nil {
			b.Fatal(err)
		}
	}
}
