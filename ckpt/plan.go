package ckpt

import (
	"encoding"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// planKind says how the state codec treats a Go type.
type planKind uint8

const (
	pLeaf    planKind = iota // encoded by msgpack itself
	pBlock                   // slice or array of fixed-size numbers: a numeric block
	pStruct                  // map of field name to value
	pSlice                   // array of elements
	pArray                   // array of exactly Len elements
	pMap                     // map of msgpack key to value
	pPtr                     // nil or the pointee
	pComplex                 // a complex number: [real, imaginary]
)

// plan is the codec's compiled view of a type. Plans of recursive types
// point at themselves.
type plan struct {
	kind   planKind
	typ    reflect.Type
	custom bool  // the type encodes itself (see custom)
	elem   *plan // pSlice, pArray, pMap (the value), pPtr

	// pBlock
	code  byte // element code on the wire
	wsize int  // element size on the wire
	msize int  // element size in memory

	// pMap: whether keys are plain scalars (see scalar)
	keyScalar bool

	// pStruct
	fields []field
	byName map[string]int
}

type field struct {
	name  string
	index []int
	plan  *plan
}

// Element codes of numeric blocks: the msgpack ext type of a block's
// header. Part of the format: append only, never renumber.
const (
	codeUint8      = 1
	codeInt8       = 2
	codeUint16     = 3
	codeInt16      = 4
	codeUint32     = 5
	codeInt32      = 6
	codeFloat32    = 7
	codeUint64     = 8
	codeInt64      = 9
	codeFloat64    = 10
	codeInt        = 11 // int, as int64
	codeUint       = 12 // uint, as uint64
	codeComplex64  = 13
	codeComplex128 = 14
)

var blockKinds = map[reflect.Kind]struct {
	code  byte
	wsize int
}{
	reflect.Uint8: {codeUint8, 1}, reflect.Int8: {codeInt8, 1},
	reflect.Uint16: {codeUint16, 2}, reflect.Int16: {codeInt16, 2},
	reflect.Uint32: {codeUint32, 4}, reflect.Int32: {codeInt32, 4}, reflect.Float32: {codeFloat32, 4},
	reflect.Uint64: {codeUint64, 8}, reflect.Int64: {codeInt64, 8}, reflect.Float64: {codeFloat64, 8},
	reflect.Int: {codeInt, 8}, reflect.Uint: {codeUint, 8},
	reflect.Complex64: {codeComplex64, 8}, reflect.Complex128: {codeComplex128, 16},
}

var codeNames = [...]string{"", "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "uint64", "int64", "float64", "int", "uint", "complex64", "complex128"}

func codeName(c byte) string {
	if int(c) < len(codeNames) && c > 0 {
		return codeNames[c]
	}
	return fmt.Sprintf("code %d", c)
}

var plans = struct {
	sync.Mutex
	m map[reflect.Type]*plan
}{m: map[reflect.Type]*plan{}}

// planFor returns the plan of t, building and caching it.
func planFor(t reflect.Type) (*plan, error) {
	plans.Lock()
	defer plans.Unlock()
	if p, ok := plans.m[t]; ok {
		return p, nil
	}
	building := map[reflect.Type]*plan{}
	p, err := buildPlan(t, building, t.String())
	if err != nil {
		return nil, err
	}
	for k, v := range building {
		plans.m[k] = v
	}
	return p, nil
}

var (
	customEncoderType   = reflect.TypeFor[msgpack.CustomEncoder]()
	customDecoderType   = reflect.TypeFor[msgpack.CustomDecoder]()
	marshalerType       = reflect.TypeFor[msgpack.Marshaler]()
	unmarshalerType     = reflect.TypeFor[msgpack.Unmarshaler]()
	binaryMarshalerType = reflect.TypeFor[encoding.BinaryMarshaler]()
	binaryUnmarshalType = reflect.TypeFor[encoding.BinaryUnmarshaler]()
	textMarshalerType   = reflect.TypeFor[encoding.TextMarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// custom reports whether values of t define their own encoding (msgpack or
// encoding interfaces, or a msgpack extension registered for the type), in
// which case msgpack encodes them as it would anywhere else.
func custom(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	for _, it := range []reflect.Type{customEncoderType, marshalerType, binaryMarshalerType, textMarshalerType} {
		if t.Implements(it) || pt.Implements(it) {
			return true
		}
	}
	for _, it := range []reflect.Type{customDecoderType, unmarshalerType, binaryUnmarshalType, textUnmarshalerType} {
		if pt.Implements(it) {
			return true
		}
	}
	if t.Name() == "" {
		return false
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Slice, reflect.Array, reflect.Map:
		// A type registered with msgpack.RegisterExt encodes as an
		// extension: leave it to msgpack.
		b, err := msgpack.Marshal(reflect.New(t).Interface())
		if err != nil {
			return false
		}
		return len(b) > 0 && (msgpcode.IsExt(b[0]))
	}
	return false
}

func buildPlan(t reflect.Type, building map[reflect.Type]*plan, path string) (*plan, error) {
	if p, ok := building[t]; ok {
		return p, nil
	}
	if p, ok := plans.m[t]; ok {
		return p, nil
	}
	p := &plan{typ: t}
	building[t] = p
	if custom(t) {
		p.kind, p.custom = pLeaf, true
		return p, nil
	}
	var err error
	switch t.Kind() {
	case reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return nil, fmt.Errorf("%s: a %v cannot be checkpointed (tag the field `msgpack:\"-\"` to leave it out)", path, t)
	case reflect.Slice, reflect.Array:
		e := t.Elem()
		if bk, ok := blockKinds[e.Kind()]; ok && !custom(e) {
			p.kind, p.code, p.wsize, p.msize = pBlock, bk.code, bk.wsize, int(e.Size())
			return p, nil
		}
		p.kind = pSlice
		if t.Kind() == reflect.Array {
			p.kind = pArray
		}
		p.elem, err = buildPlan(e, building, path+"[]")
	case reflect.Map:
		if k := t.Key().Kind(); k == reflect.Chan || k == reflect.Func || k == reflect.UnsafePointer {
			return nil, fmt.Errorf("%s: map key %v cannot be checkpointed", path, t.Key())
		}
		p.kind = pMap
		p.keyScalar = scalar(t.Key().Kind()) && !custom(t.Key())
		p.elem, err = buildPlan(t.Elem(), building, path+"[key]")
	case reflect.Complex64, reflect.Complex128:
		p.kind = pComplex
	case reflect.Pointer:
		p.kind = pPtr
		p.elem, err = buildPlan(t.Elem(), building, "*"+path)
	case reflect.Struct:
		p.kind = pStruct
		err = collectFields(p, t, nil, building, path)
	default:
		p.kind = pLeaf
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// collectFields lists the struct's fields as msgpack names them: exported
// fields under their Go name or the name in their `msgpack` tag, fields
// tagged "-" left out, and the fields of embedded structs (without a tag
// name) inlined, an outer field shadowing an inner one of the same name.
func collectFields(p *plan, t reflect.Type, prefix []int, building map[reflect.Type]*plan, path string) error {
	if p.byName == nil {
		p.byName = map[string]int{}
	}
	type pending struct {
		sf    reflect.StructField
		index []int
	}
	var embedded []pending
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("msgpack")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		index := append(append([]int(nil), prefix...), i)
		if sf.Anonymous && name == "" && sf.Type.Kind() == reflect.Struct && !custom(sf.Type) {
			embedded = append(embedded, pending{sf, index})
			continue
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if _, dup := p.byName[name]; dup {
			continue
		}
		fp, err := buildPlan(sf.Type, building, path+"."+sf.Name)
		if err != nil {
			return err
		}
		p.byName[name] = len(p.fields)
		p.fields = append(p.fields, field{name: name, index: index, plan: fp})
	}
	for _, e := range embedded {
		if err := collectFields(p, e.sf.Type, e.index, building, path+"."+e.sf.Name); err != nil {
			return err
		}
	}
	return nil
}
