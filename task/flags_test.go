package task

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// flagTask is a program's root whose flags are its tagged fields.
type flagTask struct {
	N     int           `flag:"n,points" min:"1"`
	Big   int64         `flag:"big,a large count"`
	U     uint          `flag:"u,unsigned" min:"2"`
	U64   uint64        `flag:"u64,unsigned, 64 bits"`
	Tol   float64       `flag:"tol,threshold" min:"0"`
	Name  string        `flag:"name,a name"`
	On    bool          `flag:"on,switch"`
	Every time.Duration `flag:"every,period"`
	State int           // no flag: state only
}

func (*flagTask) Run(*Ctx) error { return nil }

// Validate refuses a name longer than N.
func (f *flagTask) Validate() error {
	if len(f.Name) > f.N {
		return errors.New("name longer than -n")
	}
	return nil
}

// TestProgramFromProto: a Program given by Proto has a flag for each
// tagged field, Proto's values as defaults; the root is a fresh copy with
// the flags applied, refused below a min tag, by Validate, or with
// positional arguments; RegisterProgram registers the type when it is
// not yet.
func TestProgramFromProto(t *testing.T) {
	proto := &flagTask{N: 3, U: 2, Tol: 0.5, Name: "ab", Every: time.Second, State: 7}
	RegisterProgram(Program{Name: "task.test.flags", Summary: "flags from tags", Proto: proto})
	p, ok := LookupProgram("task.test.flags")
	if !ok || p.Setup == nil {
		t.Fatal("program not registered with a Setup")
	}
	if name, err := TypeName(proto); err != nil || name != "task.test.flags" {
		t.Errorf("TypeName = %q, %v; want the program's name", name, err)
	}
	root, err := p.Task()
	if err != nil {
		t.Fatal(err)
	}
	if got := *root.(*flagTask); got != *proto {
		t.Errorf("defaults: %+v, want %+v", got, *proto)
	}
	if root.(*flagTask) == proto {
		t.Error("the root is Proto itself, not a copy")
	}
	root, err = p.Task("-n", "9", "-big", "12345678901", "-u", "4", "-u64", "5", "-tol", "1e-6", "-name", "xyz", "-on", "-every", "2ms")
	if err != nil {
		t.Fatal(err)
	}
	want := flagTask{N: 9, Big: 12345678901, U: 4, U64: 5, Tol: 1e-6, Name: "xyz", On: true, Every: 2 * time.Millisecond, State: 7}
	if got := *root.(*flagTask); got != want {
		t.Errorf("flags: %+v, want %+v", got, want)
	}
	if proto.N != 3 || proto.Name != "ab" {
		t.Errorf("parsing changed Proto: %+v", *proto)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "0"}, "-n must be at least 1, got 0"},
		{[]string{"-u", "1", "-tol", "-1"}, "-u must be at least 2, got 1"},
		{[]string{"-tol", "-1"}, "-tol must be at least 0, got -1"},
		{[]string{"-name", "abcd"}, "name longer than -n"},
		{[]string{"extra"}, `unexpected arguments ["extra"]`},
		{[]string{"-state", "1"}, "flag provided but not defined: -state"},
	} {
		if _, err := p.Task(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Task(%q) = %v, want an error saying %q", c.args, err, c.want)
		}
	}
}

type badFlagType struct {
	C []int `flag:"c,a list"`
}

func (*badFlagType) Run(*Ctx) error { return nil }

type badFlagMin struct {
	S string `flag:"s,text" min:"1"`
}

func (*badFlagMin) Run(*Ctx) error { return nil }

type badFlagBound struct {
	N int `flag:"n,count" min:"one"`
}

func (*badFlagBound) Run(*Ctx) error { return nil }

type badFlagDuration struct {
	D time.Duration `flag:"d,period" min:"1"`
}

func (*badFlagDuration) Run(*Ctx) error { return nil }

type badFlagName struct {
	N int `flag:",no name"`
}

func (*badFlagName) Run(*Ctx) error { return nil }

// TestProgramProtoRefused: RegisterProgram panics on a Proto whose tags
// it cannot honour, and on a Program with both or neither of Proto and
// Setup, and registers nothing: a flag of a type it cannot set, a min
// tag on a string or a Duration or with a bound that is not a number, a
// tag without a name.
func TestProgramProtoRefused(t *testing.T) {
	for name, p := range map[string]Program{
		"task.test.badtype":  {Proto: &badFlagType{}},
		"task.test.badmin":   {Proto: &badFlagMin{}},
		"task.test.badname":  {Proto: &badFlagName{}},
		"task.test.badbound": {Proto: &badFlagBound{}},
		"task.test.baddur":   {Proto: &badFlagDuration{}},
		"task.test.neither":  {},
		"task.test.both":     {Proto: &flagTask{}, Setup: protoSetup(&flagTask{})},
	} {
		p.Name = name
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: RegisterProgram did not panic", name)
				}
			}()
			RegisterProgram(p)
		}()
		if _, ok := LookupProgram(name); ok {
			t.Errorf("%s: registered", name)
		}
	}
}
