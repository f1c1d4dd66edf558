package task

import (
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
)

type regState struct {
	N    int
	Name string
}

func (*regState) Run(*Ctx) error { return nil }

type regOther struct{}

func (*regOther) Run(*Ctx) error { return nil }

func TestRegistry(t *testing.T) {
	Register("task.test.reg", &regState{})
	name, err := TypeName(&regState{})
	if err != nil || name != "task.test.reg" {
		t.Fatalf("TypeName = %q, %v", name, err)
	}
	if !slices.Contains(Types(), "task.test.reg") {
		t.Fatalf("Types() = %v lacks the registered type", Types())
	}
	typ, state, err := EncodeState(&regState{N: 3, Name: "x"})
	if err != nil || typ != "task.test.reg" {
		t.Fatalf("EncodeState = %q, %v", typ, err)
	}
	v, err := New(typ, state)
	if err != nil {
		t.Fatal(err)
	}
	if got := v.(*regState); got.N != 3 || got.Name != "x" {
		t.Fatalf("New restored %+v", got)
	}
	if _, err := New("task.test.nope", nil); !errors.Is(err, ErrUnknownType) {
		t.Errorf("New(unknown) = %v, want ErrUnknownType", err)
	}
	if _, err := TypeName(&regOther{}); !errors.Is(err, ErrUnknownType) {
		t.Errorf("TypeName(unregistered) = %v, want ErrUnknownType", err)
	}
	if _, err := New(typ, []byte{0xc1}); !errors.Is(err, ErrDecode) {
		t.Errorf("New with corrupt state = %v, want ErrDecode", err)
	}
	mustPanic(t, "duplicate name", func() { Register("task.test.reg", &regOther{}) })
	mustPanic(t, "duplicate type", func() { Register("task.test.reg2", &regState{}) })
	mustPanic(t, "not a pointer", func() { Register("task.test.val", nonPtr{}) })
}

type nonPtr struct{}

func (nonPtr) Run(*Ctx) error { return nil }

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: no panic", what)
		}
	}()
	f()
}

func TestPrograms(t *testing.T) {
	RegisterProgram(Program{Name: "task-test-prog", Summary: "s", Setup: func(fs *flag.FlagSet) func([]string) (Task, error) {
		n := fs.Int("n", 1, "")
		return func([]string) (Task, error) { return &regState{N: *n}, nil }
	}})
	p, ok := LookupProgram("task-test-prog")
	if !ok {
		t.Fatal("program not found")
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	build := p.Setup(fs)
	if err := fs.Parse([]string{"-n", "5"}); err != nil {
		t.Fatal(err)
	}
	root, err := build(fs.Args())
	if err != nil || root.(*regState).N != 5 {
		t.Fatalf("built %+v, %v", root, err)
	}
	// Program.Task: the program's flags as a spawned task's argv.
	if root, err := p.Task("-n", "7"); err != nil || root.(*regState).N != 7 {
		t.Fatalf("Task(-n 7) = %+v, %v", root, err)
	}
	if _, err := p.Task("-nope"); err == nil || !strings.Contains(err.Error(), "task-test-prog") {
		t.Errorf("Task with an unknown flag: %v", err)
	}
	if !slices.ContainsFunc(Programs(), func(p Program) bool { return p.Name == "task-test-prog" }) {
		t.Error("Programs() lacks the program")
	}
	mustPanic(t, "duplicate program", func() { RegisterProgram(p) })
	mustPanic(t, "no setup", func() { RegisterProgram(Program{Name: "x"}) })
}
