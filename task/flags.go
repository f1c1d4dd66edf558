package task

import (
	"errors"
	"flag"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Validator is implemented by a program's root task that checks its
// fields once its flags have set them (Program.Proto): Validate returns an
// error that says which values are wrong.
type Validator interface {
	Validate() error
}

// protoSetup is the Setup of a program given by its Proto: each parse
// starts from a copy of proto, its tagged fields as flags.
func protoSetup(proto Task) func(fs *flag.FlagSet) func([]string) (Task, error) {
	typ := reflect.TypeOf(proto).Elem()
	return func(fs *flag.FlagSet) func([]string) (Task, error) {
		t := reflect.New(typ)
		t.Elem().Set(reflect.ValueOf(proto).Elem())
		check, err := defineFlags(fs, t.Elem())
		if err != nil {
			panic(err) // RegisterProgram checked the tags
		}
		return func(args []string) (Task, error) {
			if len(args) > 0 {
				return nil, fmt.Errorf("unexpected arguments %q", args)
			}
			if err := check(); err != nil {
				return nil, err
			}
			root := t.Interface().(Task)
			if v, ok := root.(Validator); ok {
				if err := v.Validate(); err != nil {
					return nil, err
				}
			}
			return root, nil
		}
	}
}

// defineFlags defines on fs a flag for each field of the struct v tagged
// `flag:"name,usage"`, whose default is the field's value and which sets
// the field. The fields may be bool, int, int64, uint, uint64, float64,
// string or time.Duration. A numeric field tagged `min:"x"` too must be
// at least x: check, called after fs is parsed, says which is not.
func defineFlags(fs *flag.FlagSet, v reflect.Value) (check func() error, err error) {
	var checks []func() error
	for i := range v.NumField() {
		f := v.Type().Field(i)
		tag, ok := f.Tag.Lookup("flag")
		if !ok {
			continue
		}
		name, usage, _ := strings.Cut(tag, ",")
		if name == "" || !f.IsExported() {
			return nil, fmt.Errorf("field %s: flag tag %q: need an exported field and a name", f.Name, tag)
		}
		switch p := v.Field(i).Addr().Interface().(type) {
		case *bool:
			fs.BoolVar(p, name, *p, usage)
		case *int:
			fs.IntVar(p, name, *p, usage)
		case *int64:
			fs.Int64Var(p, name, *p, usage)
		case *uint:
			fs.UintVar(p, name, *p, usage)
		case *uint64:
			fs.Uint64Var(p, name, *p, usage)
		case *float64:
			fs.Float64Var(p, name, *p, usage)
		case *string:
			fs.StringVar(p, name, *p, usage)
		case *time.Duration:
			fs.DurationVar(p, name, *p, usage)
		default:
			return nil, fmt.Errorf("field %s: a flag cannot set a %v", f.Name, f.Type)
		}
		if m, ok := f.Tag.Lookup("min"); ok {
			c, err := minCheck(name, v.Field(i), m)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", f.Name, err)
			}
			checks = append(checks, c)
		}
	}
	return func() error {
		var errs []error
		for _, c := range checks {
			errs = append(errs, c())
		}
		return errors.Join(errs...)
	}, nil
}

// minCheck returns the check that the numeric field fv, set by flag
// name, is at least min.
func minCheck(name string, fv reflect.Value, min string) (func() error, error) {
	switch {
	case fv.CanInt() && fv.Type() != reflect.TypeFor[time.Duration]():
		return atLeast(name, min, func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }, fv.Int)
	case fv.CanUint():
		return atLeast(name, min, func(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }, fv.Uint)
	case fv.CanFloat():
		return atLeast(name, min, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }, fv.Float)
	}
	return nil, fmt.Errorf("min tag on a %v", fv.Type())
}

// atLeast is minCheck for one kind of number: min parsed by parse, the
// field's value read by get.
func atLeast[T int64 | uint64 | float64](name, min string, parse func(string) (T, error), get func() T) (func() error, error) {
	lo, err := parse(min)
	if err != nil {
		return nil, fmt.Errorf("min tag %q: %w", min, err)
	}
	return func() error {
		if x := get(); x < lo {
			return fmt.Errorf("-%s must be at least %s, got %v", name, min, x)
		}
		return nil
	}, nil
}
