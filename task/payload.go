package task

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"sync"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// Encoding says how a message body is encoded. The values are part of the
// wire format: append only, never renumber.
type Encoding uint8

// Encodings. Msgpack is the general case; the others are fast paths that
// carry a slice's elements as raw little-endian bytes, without encoding them
// one by one.
const (
	EncMsgpack     Encoding = 0
	EncBytes       Encoding = 1 // []byte
	EncFloat64s    Encoding = 2 // []float64
	EncFloat32s    Encoding = 3 // []float32
	EncInt64s      Encoding = 4 // []int64
	EncInt32s      Encoding = 5 // []int32
	EncInts        Encoding = 6 // []int, carried as int64
	EncUint64s     Encoding = 7 // []uint64
	EncUint32s     Encoding = 8 // []uint32
	EncComplex128s Encoding = 9 // []complex128
	numEncodings   Encoding = 10
)

var encNames = [...]string{"msgpack", "bytes", "[]float64", "[]float32", "[]int64", "[]int32", "[]int", "[]uint64", "[]uint32", "[]complex128"}

func (e Encoding) String() string {
	if e < numEncodings {
		return encNames[e]
	}
	return fmt.Sprintf("encoding(%d)", uint8(e))
}

// Valid reports whether e is a known encoding.
func (e Encoding) Valid() bool { return e < numEncodings }

// elemSize is the size in bytes of one element of a raw slice encoding.
func (e Encoding) elemSize() int {
	switch e {
	case EncBytes:
		return 1
	case EncFloat32s, EncInt32s, EncUint32s:
		return 4
	case EncFloat64s, EncInt64s, EncInts, EncUint64s:
		return 8
	case EncComplex128s:
		return 16
	}
	return 0
}

// Payload is an encoded message body. Its Data belongs to the payload: the
// encoder copies the caller's value, so senders may reuse their values
// (except with the InPlace option of Ctx.Send, whose payload is the value's memory).
type Payload struct {
	Enc  Encoding
	Data []byte
}

// Len is the size of the encoded body in bytes.
func (p Payload) Len() int { return len(p.Data) }

// littleEndian is true on hosts whose memory layout matches the wire's, so
// numeric slices are copied as bytes.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

var encPool = sync.Pool{New: func() any {
	var b bytes.Buffer
	enc := msgpack.NewEncoder(&b)
	enc.UseCompactInts(true)
	return &pooledEncoder{buf: &b, enc: enc}
}}

// cloneBytes is bytes.Clone (nil stays nil) by one allocation of exactly
// len(b) bytes, without append's growth path.
func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	c := make([]byte, len(b))
	copy(c, b)
	return c
}

type pooledEncoder struct {
	buf *bytes.Buffer
	enc *msgpack.Encoder
}

// Encode encodes v into a payload. Slices of bytes and of fixed-size numbers
// take a fast path (their memory copied as little-endian bytes); every other
// value is encoded with msgpack.
func Encode(v any) (Payload, error) { return encode(v, false) }

// inPlace is Encode without the copy where the value's memory is already
// the wire's form: a []byte, or a slice of fixed-size numbers on a
// little-endian host whose elements have the wire's size. The payload's
// bytes are then the value's memory (see InPlace).
func inPlace(v any) (Payload, error) { return encode(v, true) }

// encode is Encode, or inPlace when lend is set.
func encode(v any, lend bool) (Payload, error) {
	switch x := v.(type) {
	case []byte:
		if lend {
			return Payload{EncBytes, x}, nil
		}
		return Payload{EncBytes, cloneBytes(x)}, nil
	case []float64:
		return numbers(EncFloat64s, x, lend), nil
	case []float32:
		return numbers(EncFloat32s, x, lend), nil
	case []int64:
		return numbers(EncInt64s, x, lend), nil
	case []int32:
		return numbers(EncInt32s, x, lend), nil
	case []int:
		return numbers(EncInts, x, lend), nil
	case []uint64:
		return numbers(EncUint64s, x, lend), nil
	case []uint32:
		return numbers(EncUint32s, x, lend), nil
	case []complex128:
		return numbers(EncComplex128s, x, lend), nil
	case Payload:
		return Payload{x.Enc, cloneBytes(x.Data)}, nil
	}
	pe := encPool.Get().(*pooledEncoder)
	defer encPool.Put(pe)
	pe.buf.Reset()
	if err := pe.enc.Encode(v); err != nil {
		return Payload{}, fmt.Errorf("encode %T: %w: %v", v, ErrEncode, err)
	}
	return Payload{EncMsgpack, bytes.Clone(pe.buf.Bytes())}, nil
}

// sliceOf returns the slice v points to when v is a pointer to a slice
// that Encode carries raw, and v itself otherwise: a value passed by
// pointer (Comm.Bcast's) then travels as fast as the slice would.
func sliceOf(v any) any {
	switch x := v.(type) {
	case *[]byte:
		return *x
	case *[]float64:
		return *x
	case *[]float32:
		return *x
	case *[]int64:
		return *x
	case *[]int32:
		return *x
	case *[]int:
		return *x
	case *[]uint64:
		return *x
	case *[]uint32:
		return *x
	case *[]complex128:
		return *x
	}
	return v
}

// numbers is s's payload: its memory itself where lend is set and that
// is the wire's form (viewPayload), else a copy (rawPayload).
func numbers[T fixedNumber](enc Encoding, s []T, lend bool) Payload {
	if lend {
		return viewPayload(enc, s)
	}
	return rawPayload(enc, s)
}

// viewPayload is a payload whose bytes are s's memory where that is the
// wire's form, else rawPayload's copy.
func viewPayload[T fixedNumber](enc Encoding, s []T) Payload {
	var zero T
	if !littleEndian || len(s) == 0 || int(unsafe.Sizeof(zero)) != enc.elemSize() {
		return rawPayload(enc, s)
	}
	return Payload{enc, unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*enc.elemSize())}
}

type fixedNumber interface {
	~float64 | ~float32 | ~int64 | ~int32 | ~int | ~uint64 | ~uint32 | ~complex128
}

func rawPayload[T fixedNumber](enc Encoding, s []T) Payload {
	out := make([]byte, len(s)*enc.elemSize())
	putRaw(out, s)
	return Payload{enc, out}
}

// putRaw writes s into out as little-endian elements; len(out) is
// len(s)*wire element size.
func putRaw[T fixedNumber](out []byte, s []T) {
	if len(s) == 0 {
		return
	}
	var zero T
	if littleEndian && unsafe.Sizeof(zero)*uintptr(len(s)) == uintptr(len(out)) {
		copy(out, unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(out)))
		return
	}
	for i, x := range s {
		switch v := any(x).(type) {
		case float64:
			binary.LittleEndian.PutUint64(out[8*i:], math.Float64bits(v))
		case float32:
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		case int64:
			binary.LittleEndian.PutUint64(out[8*i:], uint64(v))
		case int32:
			binary.LittleEndian.PutUint32(out[4*i:], uint32(v))
		case int:
			binary.LittleEndian.PutUint64(out[8*i:], uint64(int64(v)))
		case uint64:
			binary.LittleEndian.PutUint64(out[8*i:], v)
		case uint32:
			binary.LittleEndian.PutUint32(out[4*i:], v)
		case complex128:
			binary.LittleEndian.PutUint64(out[16*i:], math.Float64bits(real(v)))
			binary.LittleEndian.PutUint64(out[16*i+8:], math.Float64bits(imag(v)))
		}
	}
}

// getRaw fills s from little-endian elements in in; len(in) is
// len(s)*wire element size.
func getRaw[T fixedNumber](s []T, in []byte) {
	if len(s) == 0 {
		return
	}
	var zero T
	if littleEndian && unsafe.Sizeof(zero)*uintptr(len(s)) == uintptr(len(in)) {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(in)), in)
		return
	}
	for i := range s {
		var v any
		switch any(zero).(type) {
		case float64:
			v = math.Float64frombits(binary.LittleEndian.Uint64(in[8*i:]))
		case float32:
			v = math.Float32frombits(binary.LittleEndian.Uint32(in[4*i:]))
		case int64:
			v = int64(binary.LittleEndian.Uint64(in[8*i:]))
		case int32:
			v = int32(binary.LittleEndian.Uint32(in[4*i:]))
		case int:
			v = int(int64(binary.LittleEndian.Uint64(in[8*i:])))
		case uint64:
			v = binary.LittleEndian.Uint64(in[8*i:])
		case uint32:
			v = binary.LittleEndian.Uint32(in[4*i:])
		case complex128:
			v = complex(math.Float64frombits(binary.LittleEndian.Uint64(in[16*i:])),
				math.Float64frombits(binary.LittleEndian.Uint64(in[16*i+8:])))
		}
		s[i] = v.(T)
	}
}

// decodeRaw decodes a raw slice payload into *[]T, reusing the slice's
// capacity when it suffices.
func decodeRaw[T fixedNumber](p Payload, dst *[]T) error {
	es := p.Enc.elemSize()
	if len(p.Data)%es != 0 {
		return fmt.Errorf("decode %v: %d bytes is not a whole number of elements: %w", p.Enc, len(p.Data), ErrDecode)
	}
	n := len(p.Data) / es
	s := *dst
	if cap(s) >= n {
		s = s[:n]
	} else {
		s = make([]T, n)
	}
	getRaw(s, p.Data)
	*dst = s
	return nil
}

// Int32s returns the int32s of a payload sent as []int32. Where its bytes
// have the slice's memory layout (a little-endian host, 4-byte aligned, as
// a received payload is) the slice is those bytes, not a copy: a payload's
// bytes are its receiver's, so the slice may be kept and changed.
// Elsewhere they are decoded into a new slice.
func (p Payload) Int32s() ([]int32, error) {
	return viewRaw[int32](p, EncInt32s)
}

// Decode decodes the payload into v, which must be a non-nil pointer. A
// payload sent as a numeric slice decodes into a pointer to a slice of the
// same element type, reusing the slice's capacity; a []byte payload decodes
// into *[]byte (the bytes are handed over, not copied) or *string; a msgpack
// payload decodes into anything msgpack can decode it into.
func (p Payload) Decode(v any) error {
	if !p.Enc.Valid() {
		return fmt.Errorf("decode: %v: %w", p.Enc, ErrDecode)
	}
	if p.Enc == EncMsgpack {
		if err := UnmarshalMsgpack(p.Data, v); err != nil {
			return fmt.Errorf("decode into %T: %w: %v", v, ErrDecode, err)
		}
		return nil
	}
	var err error
	switch d := v.(type) {
	case *[]byte:
		if p.Enc == EncBytes {
			*d = p.Data
			return nil
		}
	case *string:
		if p.Enc == EncBytes {
			*d = string(p.Data)
			return nil
		}
	case *[]float64:
		if p.Enc == EncFloat64s {
			return decodeRaw(p, d)
		}
	case *[]float32:
		if p.Enc == EncFloat32s {
			return decodeRaw(p, d)
		}
	case *[]int64:
		if p.Enc == EncInt64s {
			return decodeRaw(p, d)
		}
	case *[]int32:
		if p.Enc == EncInt32s {
			return decodeRaw(p, d)
		}
	case *[]int:
		if p.Enc == EncInts {
			return decodeRaw(p, d)
		}
	case *[]uint64:
		if p.Enc == EncUint64s {
			return decodeRaw(p, d)
		}
	case *[]uint32:
		if p.Enc == EncUint32s {
			return decodeRaw(p, d)
		}
	case *[]complex128:
		if p.Enc == EncComplex128s {
			return decodeRaw(p, d)
		}
	case *any:
		*d, err = p.value()
		return err
	}
	if v == nil || reflect.TypeOf(v).Kind() != reflect.Pointer {
		return fmt.Errorf("decode %v into %T: need a non-nil pointer: %w", p.Enc, v, ErrDecode)
	}
	return fmt.Errorf("decode %v into %T: %w", p.Enc, v, ErrDecode)
}

// value decodes a raw slice payload into a fresh slice of its type.
func (p Payload) value() (any, error) {
	var err error
	switch p.Enc {
	case EncBytes:
		return p.Data, nil
	case EncFloat64s:
		var s []float64
		err = decodeRaw(p, &s)
		return s, err
	case EncFloat32s:
		var s []float32
		err = decodeRaw(p, &s)
		return s, err
	case EncInt64s:
		var s []int64
		err = decodeRaw(p, &s)
		return s, err
	case EncInt32s:
		var s []int32
		err = decodeRaw(p, &s)
		return s, err
	case EncInts:
		var s []int
		err = decodeRaw(p, &s)
		return s, err
	case EncUint64s:
		var s []uint64
		err = decodeRaw(p, &s)
		return s, err
	case EncUint32s:
		var s []uint32
		err = decodeRaw(p, &s)
		return s, err
	case EncComplex128s:
		var s []complex128
		err = decodeRaw(p, &s)
		return s, err
	}
	return nil, fmt.Errorf("decode %v: %w", p.Enc, ErrDecode)
}
