package task

import (
	"fmt"
	"unsafe"
)

// Float64s returns the float64s of a payload sent as []float64, as Int32s
// does for int32s: where the bytes have the slice's memory layout (a
// little-endian host, 8-byte aligned) the slice is those bytes, not a
// copy; elsewhere they are decoded into a new slice. For a payload sent
// with the InPlace send option to a task of the same daemon the bytes are the
// sender's memory: the receiver reads them until it tells the sender, by
// a later message, that it is done, and must not write to them.
func (p Payload) Float64s() ([]float64, error) {
	return viewRaw[float64](p, EncFloat64s)
}

// Complex128s is Float64s for a payload sent as []complex128.
func (p Payload) Complex128s() ([]complex128, error) {
	return viewRaw[complex128](p, EncComplex128s)
}

// viewRaw views p's bytes as a []T where the layout allows (a
// little-endian host, the bytes aligned for T), else decodes them into a
// new slice.
func viewRaw[T int32 | float64 | complex128](p Payload, enc Encoding) ([]T, error) {
	es := enc.elemSize()
	if p.Enc != enc || len(p.Data)%es != 0 {
		return nil, fmt.Errorf("%v payload of %d bytes, want %v: %w", p.Enc, len(p.Data), enc, ErrDecode)
	}
	if len(p.Data) == 0 {
		return nil, nil
	}
	var zero T
	if littleEndian && uintptr(unsafe.Pointer(&p.Data[0]))%unsafe.Alignof(zero) == 0 {
		return unsafe.Slice((*T)(unsafe.Pointer(&p.Data[0])), len(p.Data)/es), nil
	}
	var s []T
	if err := decodeRaw(p, &s); err != nil {
		return nil, err
	}
	return s, nil
}

// viewOf returns p's elements as a []T sharing p's bytes when p carries
// T's raw encoding and the layout allows (a little-endian host, the bytes
// aligned for T); ok is false otherwise, and the caller decodes instead.
// The collectives read what they receive through it without a copy.
func viewOf[T any](p Payload) (s []T, ok bool) {
	var zero T
	es := p.Enc.elemSize()
	if !littleEndian || es == 0 || p.Enc != rawEncodingOf[T]() || int(unsafe.Sizeof(zero)) != es || len(p.Data)%es != 0 {
		return nil, false
	}
	if len(p.Data) == 0 {
		return []T{}, true
	}
	if uintptr(unsafe.Pointer(&p.Data[0]))%unsafe.Alignof(zero) != 0 {
		return nil, false
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&p.Data[0])), len(p.Data)/es), true
}

// rawEncodingOf is the encoding Encode gives a []T, for the numeric types
// it carries raw; EncMsgpack for the others.
func rawEncodingOf[T any]() Encoding {
	var zero T
	switch any(zero).(type) {
	case byte:
		return EncBytes
	case float64:
		return EncFloat64s
	case float32:
		return EncFloat32s
	case int64:
		return EncInt64s
	case int32:
		return EncInt32s
	case int:
		return EncInts
	case uint64:
		return EncUint64s
	case uint32:
		return EncUint32s
	case complex128:
		return EncComplex128s
	}
	return EncMsgpack
}
