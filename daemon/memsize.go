package daemon

import (
	"reflect"
	"unsafe"
)

// stateBytes estimates the memory a task's state holds: the struct itself
// and what its slices, strings, maps and pointers reach. It is what the
// load monitor reports as the task's memory use (the scheduler's memory
// rule), since tasks share one process and the kernel cannot tell them
// apart.
//
// Slices and arrays of pointer-free elements count in one step, whatever
// their length; other slices, arrays and maps are walked for their first
// sampleElems elements and the rest extrapolated, so the cost stays small
// for any state. Memory reached twice through pointers counts once.
func stateBytes(v any) int64 {
	if v == nil {
		return 0
	}
	s := sizer{seen: map[uintptr]bool{}}
	rv := reflect.ValueOf(v)
	return int64(rv.Type().Size()) + s.reach(rv)
}

// sampleElems is how many elements of a composite a size walk visits.
const sampleElems = 64

type sizer struct {
	seen map[uintptr]bool
}

// reach is the memory v refers to beyond its own bytes.
func (s *sizer) reach(v reflect.Value) int64 {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() || s.seen[v.Pointer()] {
			return 0
		}
		s.seen[v.Pointer()] = true
		return int64(v.Type().Elem().Size()) + s.reach(v.Elem())
	case reflect.Interface:
		if v.IsNil() {
			return 0
		}
		e := v.Elem()
		return int64(e.Type().Size()) + s.reach(e)
	case reflect.String:
		return int64(v.Len())
	case reflect.Struct:
		var n int64
		for i := range v.NumField() {
			n += s.reach(v.Field(i))
		}
		return n
	case reflect.Slice:
		if v.IsNil() || v.Cap() == 0 {
			return 0
		}
		p := uintptr(v.UnsafePointer())
		if s.seen[p] {
			return 0
		}
		s.seen[p] = true
		elem := v.Type().Elem()
		return int64(v.Cap())*int64(elem.Size()) + s.elems(v, v.Len())
	case reflect.Array:
		return s.elems(v, v.Len())
	case reflect.Map:
		if v.IsNil() || v.Len() == 0 {
			return 0
		}
		kt, vt := v.Type().Key(), v.Type().Elem()
		// An entry's key and value, and about a slot's overhead.
		n := int64(v.Len()) * int64(kt.Size()+vt.Size()+unsafe.Sizeof(uintptr(0)))
		if !pointerFree(kt) || !pointerFree(vt) {
			var sampled, reached int64
			it := v.MapRange()
			for it.Next() && sampled < sampleElems {
				reached += s.reach(it.Key()) + s.reach(it.Value())
				sampled++
			}
			n += reached * int64(v.Len()) / sampled
		}
		return n
	}
	return 0
}

// elems is what the first n elements of a slice or array reach, sampled.
func (s *sizer) elems(v reflect.Value, n int) int64 {
	if n == 0 || pointerFree(v.Type().Elem()) {
		return 0
	}
	k := min(n, sampleElems)
	var reached int64
	for i := range k {
		reached += s.reach(v.Index(i))
	}
	return reached * int64(n) / int64(k)
}

// pointerFree says whether values of t hold no pointers (nothing more to
// reach).
func pointerFree(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return true
	case reflect.Array:
		return pointerFree(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if !pointerFree(t.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return false
}
