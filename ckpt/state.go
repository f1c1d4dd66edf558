package ckpt

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// maxDepth bounds how deeply values nest (pointers, slices, maps, structs),
// on both sides: it stops a pointer cycle when writing and a hostile
// nesting when reading.
const maxDepth = 10000

// blockHeader is the size of a numeric block's header: a msgpack fixext8
// (code, ext type) and its 8 data bytes, the block's length.
const blockHeader = 10

// pathError locates a state codec error in the task's struct.
type pathError struct {
	path string
	err  error
}

func (e *pathError) Error() string { return e.path + ": " + e.err.Error() }
func (e *pathError) Unwrap() error { return e.err }

// at prefixes err's location with seg (".Field" or "[3]").
func at(err error, seg string) error {
	var pe *pathError
	if errors.As(err, &pe) {
		pe.path = seg + pe.path
		return err
	}
	return &pathError{path: seg, err: err}
}

// stateEncoder writes a value in the state encoding: msgpack, with structs
// walked here (field name to value) so that slices and arrays of
// fixed-size numbers anywhere in them become numeric blocks.
type stateEncoder struct {
	enc   *msgpack.Encoder
	w     *secWriter
	depth int
	piece []byte
}

func (e *stateEncoder) value(v reflect.Value, p *plan) error {
	e.depth++
	defer func() { e.depth-- }()
	if e.depth > maxDepth {
		return fmt.Errorf("values nest deeper than %d (a pointer cycle?)", maxDepth)
	}
	switch p.kind {
	case pLeaf:
		if p.custom && !v.CanAddr() {
			c := reflect.New(v.Type()).Elem()
			c.Set(v)
			v = c
		}
		return e.enc.EncodeValue(v)
	case pPtr:
		if v.IsNil() {
			return e.enc.EncodeNil()
		}
		return e.value(v.Elem(), p.elem)
	case pComplex:
		c := v.Complex()
		if err := e.enc.EncodeArrayLen(2); err != nil {
			return err
		}
		if v.Kind() == reflect.Complex64 {
			if err := e.enc.EncodeFloat32(float32(real(c))); err != nil {
				return err
			}
			return e.enc.EncodeFloat32(float32(imag(c)))
		}
		if err := e.enc.EncodeFloat64(real(c)); err != nil {
			return err
		}
		return e.enc.EncodeFloat64(imag(c))
	case pStruct:
		if err := e.enc.EncodeMapLen(len(p.fields)); err != nil {
			return err
		}
		for _, f := range p.fields {
			if err := e.enc.EncodeString(f.name); err != nil {
				return err
			}
			if err := e.value(v.FieldByIndex(f.index), f.plan); err != nil {
				return at(err, "."+f.name)
			}
		}
		return nil
	case pBlock:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return e.enc.EncodeNil()
		}
		return e.block(v, p)
	case pSlice, pArray:
		if p.kind == pSlice && v.IsNil() {
			return e.enc.EncodeNil()
		}
		n := v.Len()
		if err := e.enc.EncodeArrayLen(n); err != nil {
			return err
		}
		for i := range n {
			if err := e.value(v.Index(i), p.elem); err != nil {
				return at(err, "["+strconv.Itoa(i)+"]")
			}
		}
		return nil
	case pMap:
		if v.IsNil() {
			return e.enc.EncodeNil()
		}
		keys := v.MapKeys()
		sortKeys(keys)
		if err := e.enc.EncodeMapLen(len(keys)); err != nil {
			return err
		}
		for _, k := range keys {
			if err := e.enc.EncodeValue(k); err != nil {
				return at(err, fmt.Sprintf("[%v]", k))
			}
			if err := e.value(v.MapIndex(k), p.elem); err != nil {
				return at(err, fmt.Sprintf("[%v]", k))
			}
		}
		return nil
	}
	return fmt.Errorf("plan kind %d", p.kind)
}

// sortKeys orders map keys of ordered kinds, so equal maps encode to equal
// bytes; keys of other kinds keep the map's order.
func sortKeys(keys []reflect.Value) {
	if len(keys) < 2 {
		return
	}
	switch keys[0].Kind() {
	case reflect.String:
		slices.SortFunc(keys, func(a, b reflect.Value) int { return cmp.Compare(a.String(), b.String()) })
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		slices.SortFunc(keys, func(a, b reflect.Value) int { return cmp.Compare(a.Int(), b.Int()) })
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		slices.SortFunc(keys, func(a, b reflect.Value) int { return cmp.Compare(a.Uint(), b.Uint()) })
	case reflect.Float32, reflect.Float64:
		slices.SortFunc(keys, func(a, b reflect.Value) int { return cmp.Compare(a.Float(), b.Float()) })
	}
}

// block writes a numeric block: its header, then the elements as raw
// little-endian bytes, straight from the slice's memory where the host is
// little endian.
func (e *stateEncoder) block(v reflect.Value, p *plan) error {
	if v.Kind() == reflect.Array && !v.CanAddr() {
		c := reflect.New(v.Type()).Elem()
		c.Set(v)
		v = c
	}
	n := v.Len()
	var h [blockHeader]byte
	h[0], h[1] = msgpcode.FixExt8, p.code
	binary.LittleEndian.PutUint64(h[2:], uint64(n)*uint64(p.wsize))
	if _, err := e.w.Write(h[:]); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	ptr := dataPtr(v)
	if p.direct() {
		_, err := e.w.write(memBytes(ptr, n, p.msize), true)
		return err
	}
	if e.piece == nil {
		e.piece = make([]byte, blockPiece)
	}
	per := blockPiece / p.wsize
	for i := 0; i < n; i += per {
		k := min(per, n-i)
		out := e.piece[:k*p.wsize]
		putBlock(p, out, unsafe.Add(ptr, i*p.msize), k)
		if _, err := e.w.Write(out); err != nil {
			return err
		}
	}
	return nil
}

// stateDecoder reads a value in the state encoding into a Go value of the
// plan's type. It allocates no more than its budget (Limits.MaxState) in
// all, and a numeric block whose declared length the stream is not known
// to hold grows as its bytes arrive.
type stateDecoder struct {
	dec      *msgpack.Decoder
	leaf     *msgpack.Decoder // decodes leaves from raw
	raw      []byte
	rawR     bytes.Reader
	r        *secReader
	src      *source
	depth    int
	budget   int64
	prealloc int64
	piece    []byte
}

// scalar reports whether msgpack decodes a value of kind k without
// allocating from a declared length.
func scalar(k reflect.Kind) bool {
	switch k {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.String:
		return true
	}
	return false
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrCorrupt)
}

// charge takes n bytes of allocation from the budget.
func (d *stateDecoder) charge(n int64) error {
	if n > d.budget {
		return corrupt("needs more memory than the state limit allows (%d more bytes)", n-d.budget)
	}
	d.budget -= n
	return nil
}

// msgErr turns a msgpack decoding error into a corruption error, unless
// the stream itself failed.
func (d *stateDecoder) msgErr(err error) error {
	if d.src.err != nil {
		return d.src.err
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return corrupt("the section ends inside a value")
	}
	return corrupt("%v", err)
}

func (d *stateDecoder) value(v reflect.Value, p *plan) error {
	d.depth++
	defer func() { d.depth-- }()
	if d.depth > maxDepth {
		return corrupt("values nest deeper than %d", maxDepth)
	}
	switch p.kind {
	case pLeaf:
		return d.leafValue(v, !p.custom && scalar(v.Kind()))
	case pComplex:
		n, err := d.dec.DecodeArrayLen()
		if err != nil {
			return d.msgErr(err)
		}
		if n != 2 {
			return corrupt("%d numbers for a %v, want 2", n, p.typ)
		}
		re, err := d.dec.DecodeFloat64()
		if err != nil {
			return d.msgErr(err)
		}
		im, err := d.dec.DecodeFloat64()
		if err != nil {
			return d.msgErr(err)
		}
		v.SetComplex(complex(re, im))
		return nil
	case pPtr:
		c, err := d.dec.PeekCode()
		if err != nil {
			return d.msgErr(err)
		}
		if c == msgpcode.Nil {
			_ = d.dec.DecodeNil()
			v.SetZero()
			return nil
		}
		if v.IsNil() {
			if err := d.charge(int64(p.typ.Elem().Size())); err != nil {
				return err
			}
			v.Set(reflect.New(p.typ.Elem()))
		}
		return d.value(v.Elem(), p.elem)
	case pStruct:
		n, err := d.dec.DecodeMapLen()
		if err != nil {
			return d.msgErr(err)
		}
		if n < 0 {
			v.SetZero()
			return nil
		}
		for range n {
			name, err := d.dec.DecodeString()
			if err != nil {
				return d.msgErr(err)
			}
			i, ok := p.byName[name]
			if !ok {
				// A field the type no longer has.
				if err := d.dec.Skip(); err != nil {
					return d.msgErr(err)
				}
				continue
			}
			f := p.fields[i]
			if err := d.value(v.FieldByIndex(f.index), f.plan); err != nil {
				return at(err, "."+name)
			}
		}
		return nil
	case pBlock:
		c, err := d.dec.PeekCode()
		if err != nil {
			return d.msgErr(err)
		}
		switch {
		case c == msgpcode.FixExt8:
			return d.block(v, p)
		case c == msgpcode.Nil && v.Kind() == reflect.Slice:
			_ = d.dec.DecodeNil()
			v.SetZero()
			return nil
		case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
			return d.elements(v, p)
		}
		return corrupt("a %v holds msgpack code %#x, want a numeric block", p.typ, c)
	case pSlice, pArray:
		return d.elements(v, p)
	case pMap:
		n, err := d.dec.DecodeMapLen()
		if err != nil {
			return d.msgErr(err)
		}
		if n < 0 {
			v.SetZero()
			return nil
		}
		kt, et := p.typ.Key(), p.typ.Elem()
		m := reflect.MakeMapWithSize(p.typ, min(n, 1024))
		for range n {
			if err := d.charge(int64(kt.Size() + et.Size())); err != nil {
				return err
			}
			k := reflect.New(kt).Elem()
			if err := d.leafValue(k, p.keyScalar); err != nil {
				return err
			}
			e := reflect.New(et).Elem()
			if err := d.value(e, p.elem); err != nil {
				return at(err, fmt.Sprintf("[%v]", k))
			}
			m.SetMapIndex(k, e)
		}
		v.Set(m)
		return nil
	}
	return fmt.Errorf("plan kind %d", p.kind)
}

// leafValue has msgpack decode v. Unless the value is a plain scalar, which
// msgpack decodes without allocating from a declared length, it is first
// copied as its bytes arrive, then decoded from the copy.
func (d *stateDecoder) leafValue(v reflect.Value, plainScalar bool) error {
	if plainScalar {
		if err := d.dec.DecodeValue(v); err != nil {
			return d.msgErr(err)
		}
		return nil
	}
	raw, err := scanRaw(d.r, d.budget, d.raw)
	d.raw = raw
	if err != nil {
		return d.msgErr(err)
	}
	if err := d.charge(int64(len(raw))); err != nil {
		return err
	}
	d.rawR.Reset(raw)
	d.leaf.Reset(&d.rawR)
	if err := d.leaf.DecodeValue(v); err != nil {
		return corrupt("%v", err)
	}
	return nil
}

// elements reads a msgpack array into a slice or an array. A slice grows
// as elements arrive: its declared length is not trusted.
func (d *stateDecoder) elements(v reflect.Value, p *plan) error {
	n, err := d.dec.DecodeArrayLen()
	if err != nil {
		return d.msgErr(err)
	}
	et := p.typ.Elem()
	ep := p.elem
	if p.kind == pBlock {
		ep = &plan{kind: pLeaf, typ: et}
	}
	if v.Kind() == reflect.Array {
		if n != v.Len() {
			return corrupt("%d elements for a %v", n, p.typ)
		}
		for i := range n {
			if err := d.value(v.Index(i), ep); err != nil {
				return at(err, "["+strconv.Itoa(i)+"]")
			}
		}
		return nil
	}
	if n < 0 {
		v.SetZero()
		return nil
	}
	esz := max(int64(et.Size()), 1)
	c := min(n, int(max(1, (1<<20)/esz)))
	if err := d.charge(int64(c) * esz); err != nil {
		return err
	}
	v.Set(reflect.MakeSlice(p.typ, 0, c))
	for i := range n {
		if i == v.Cap() {
			more := min(n, 2*i) - i
			if err := d.charge(int64(more) * esz); err != nil {
				return err
			}
			v.Grow(more)
		}
		v.SetLen(i + 1)
		if err := d.value(v.Index(i), ep); err != nil {
			return at(err, "["+strconv.Itoa(i)+"]")
		}
	}
	return nil
}

// block reads a numeric block into a slice (made here) or an array.
func (d *stateDecoder) block(v reflect.Value, p *plan) error {
	var h [blockHeader]byte
	if _, err := io.ReadFull(d.r, h[:]); err != nil {
		return d.msgErr(err)
	}
	if h[1] != p.code {
		return corrupt("a block of %s for a %v", codeName(h[1]), p.typ)
	}
	size := binary.LittleEndian.Uint64(h[2:])
	if size%uint64(p.wsize) != 0 {
		return corrupt("a block of %d bytes for %d-byte elements", size, p.wsize)
	}
	if size > uint64(d.budget) {
		return corrupt("a block of %d bytes, more than the state limit allows (%d)", size, d.budget)
	}
	n := int(size / uint64(p.wsize))
	if v.Kind() == reflect.Array {
		if n != v.Len() {
			return corrupt("%d elements for a %v", n, p.typ)
		}
		return d.fill(p, dataPtr(v), n)
	}
	rem := d.src.remaining()
	if rem >= 0 {
		rem += int64(d.r.w - d.r.r) // read from the stream, not yet consumed
	}
	if rem >= 0 && int64(size) > rem {
		return corrupt("a block of %d bytes, the stream holds %d more", size, rem)
	}
	mem := int64(n) * int64(p.msize)
	if err := d.charge(mem); err != nil {
		return err
	}
	if mem <= d.prealloc || rem >= 0 {
		s := reflect.MakeSlice(p.typ, n, n)
		adviseHuge(memBytes(dataPtr(s), n, p.msize))
		v.Set(s)
		return d.fill(p, dataPtr(s), n)
	}
	// The stream may not hold what the block declares: allocate as its
	// bytes arrive, doubling.
	have := 0
	first := max(1, int(d.prealloc)/p.msize)
	s := reflect.MakeSlice(p.typ, first, first)
	for {
		if err := d.fill(p, unsafe.Add(dataPtr(s), have*p.msize), s.Len()-have); err != nil {
			return err
		}
		have = s.Len()
		if have == n {
			break
		}
		next := reflect.MakeSlice(p.typ, min(n, 2*have), min(n, 2*have))
		adviseHuge(memBytes(dataPtr(next), next.Len(), p.msize))
		reflect.Copy(next, s)
		s = next
	}
	v.Set(s)
	return nil
}

// fill reads n elements' wire bytes into memory at ptr.
func (d *stateDecoder) fill(p *plan, ptr unsafe.Pointer, n int) error {
	if n == 0 {
		return nil
	}
	if p.direct() {
		if err := d.r.readBlock(memBytes(ptr, n, p.msize)); err != nil {
			return d.msgErr(err)
		}
		return nil
	}
	if d.piece == nil {
		d.piece = make([]byte, blockPiece)
	}
	per := blockPiece / p.wsize
	for i := 0; i < n; i += per {
		k := min(per, n-i)
		in := d.piece[:k*p.wsize]
		if _, err := io.ReadFull(d.r, in); err != nil {
			return d.msgErr(err)
		}
		if !getBlock(p, unsafe.Add(ptr, i*p.msize), in, k) {
			return corrupt("a %s value does not fit this host's %v", codeName(p.code), p.typ.Elem())
		}
	}
	return nil
}
