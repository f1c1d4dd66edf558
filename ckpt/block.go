package ckpt

import (
	"encoding/binary"
	"reflect"
	"unsafe"
)

// nativeLE is true where memory holds numbers as the wire does (little
// endian), so a numeric block is the slice's memory itself. Tests clear it
// to exercise the portable path.
var nativeLE = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// blockPiece is how many bytes the portable path converts at a time.
const blockPiece = 64 << 10

// memBytes views n elements of memory size msize at ptr as bytes.
func memBytes(ptr unsafe.Pointer, n, msize int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(ptr), n*msize)
}

// NewBytes returns n zeroed bytes allocated the way a restore allocates a
// numeric block of that size (from 4 MiB up, huge pages are advised before
// the first touch). Benchmarks that compare a restore with reading the same
// bytes use it so that both pay the same for fresh memory.
func NewBytes(n int) []byte {
	b := make([]byte, n)
	adviseHuge(b)
	return b
}

// direct reports whether a block of this plan is its memory, byte for byte.
func (p *plan) direct() bool { return nativeLE && p.msize == p.wsize }

// putBlock converts n elements at ptr into wire bytes in out
// (len(out) == n*wsize), for hosts where memory is not wire order.
func putBlock(p *plan, out []byte, ptr unsafe.Pointer, n int) {
	switch {
	case p.msize == 1:
		copy(out, memBytes(ptr, n, 1))
	case p.msize == 2:
		for i, v := range unsafe.Slice((*uint16)(ptr), n) {
			binary.LittleEndian.PutUint16(out[2*i:], v)
		}
	case p.code == codeComplex64:
		for i, v := range unsafe.Slice((*uint32)(ptr), 2*n) {
			binary.LittleEndian.PutUint32(out[4*i:], v)
		}
	case p.code == codeComplex128:
		for i, v := range unsafe.Slice((*uint64)(ptr), 2*n) {
			binary.LittleEndian.PutUint64(out[8*i:], v)
		}
	case p.msize == 4 && p.wsize == 8: // int or uint on a 32-bit host
		if p.code == codeInt {
			for i, v := range unsafe.Slice((*int32)(ptr), n) {
				binary.LittleEndian.PutUint64(out[8*i:], uint64(int64(v)))
			}
		} else {
			for i, v := range unsafe.Slice((*uint32)(ptr), n) {
				binary.LittleEndian.PutUint64(out[8*i:], uint64(v))
			}
		}
	case p.msize == 4:
		for i, v := range unsafe.Slice((*uint32)(ptr), n) {
			binary.LittleEndian.PutUint32(out[4*i:], v)
		}
	default:
		for i, v := range unsafe.Slice((*uint64)(ptr), n) {
			binary.LittleEndian.PutUint64(out[8*i:], v)
		}
	}
}

// getBlock converts wire bytes in in (len(in) == n*wsize) into n elements
// at ptr. It reports false when a value does not fit the memory type (an
// int of a 64-bit host read on a 32-bit one).
func getBlock(p *plan, ptr unsafe.Pointer, in []byte, n int) bool {
	switch {
	case p.msize == 1:
		copy(memBytes(ptr, n, 1), in)
	case p.msize == 2:
		s := unsafe.Slice((*uint16)(ptr), n)
		for i := range s {
			s[i] = binary.LittleEndian.Uint16(in[2*i:])
		}
	case p.code == codeComplex64:
		s := unsafe.Slice((*uint32)(ptr), 2*n)
		for i := range s {
			s[i] = binary.LittleEndian.Uint32(in[4*i:])
		}
	case p.code == codeComplex128:
		s := unsafe.Slice((*uint64)(ptr), 2*n)
		for i := range s {
			s[i] = binary.LittleEndian.Uint64(in[8*i:])
		}
	case p.msize == 4 && p.wsize == 8:
		if p.code == codeInt {
			s := unsafe.Slice((*int32)(ptr), n)
			for i := range s {
				v := int64(binary.LittleEndian.Uint64(in[8*i:]))
				if v != int64(int32(v)) {
					return false
				}
				s[i] = int32(v)
			}
		} else {
			s := unsafe.Slice((*uint32)(ptr), n)
			for i := range s {
				v := binary.LittleEndian.Uint64(in[8*i:])
				if v != uint64(uint32(v)) {
					return false
				}
				s[i] = uint32(v)
			}
		}
	case p.msize == 4:
		s := unsafe.Slice((*uint32)(ptr), n)
		for i := range s {
			s[i] = binary.LittleEndian.Uint32(in[4*i:])
		}
	default:
		s := unsafe.Slice((*uint64)(ptr), n)
		for i := range s {
			s[i] = binary.LittleEndian.Uint64(in[8*i:])
		}
	}
	return true
}

// uintptrOf is the address of b's first byte.
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// dataPtr is the address of the first element of a slice or of an
// addressable array.
func dataPtr(v reflect.Value) unsafe.Pointer {
	if v.Kind() == reflect.Slice {
		return v.UnsafePointer()
	}
	return v.Addr().UnsafePointer()
}
