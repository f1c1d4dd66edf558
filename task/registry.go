package task

import (
	"flag"
	"fmt"
	"io"
	"reflect"
	"sort"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// Task is the code of a task type. The value implementing it is a pointer to
// a struct whose exported fields are the task's state.
//
// Run is called once when the task starts and again, on the restored state,
// after each migration; it must read where it is from its own fields. It
// returns nil on success, ErrSuspended unchanged when SafePoint returned it,
// or an error (which makes the task exit with status 1, or the status of an
// ExitError).
type Task interface {
	Run(c *Ctx) error
}

var registry = struct {
	sync.RWMutex
	byName map[string]reflect.Type
	byType map[reflect.Type]string
}{byName: map[string]reflect.Type{}, byType: map[reflect.Type]string{}}

// Register makes a task type known under name, so any daemon running this
// binary can start, restore and receive tasks of that type. proto is a
// pointer to a struct (its value is ignored). Register is meant for init
// functions; it panics on a duplicate name or type, or on a proto that is not
// a pointer to a struct.
func Register(name string, proto Task) {
	t := reflect.TypeOf(proto)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("task.Register(%q): %T is not a pointer to a struct", name, proto))
	}
	if name == "" {
		panic("task.Register: empty name")
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.byName[name]; dup {
		panic(fmt.Sprintf("task.Register: duplicate task type name %q", name))
	}
	if old, dup := registry.byType[t]; dup {
		panic(fmt.Sprintf("task.Register(%q): %v is already registered as %q", name, t, old))
	}
	registry.byName[name] = t
	registry.byType[t] = name
}

// TypeName returns the registered name of t's type.
func TypeName(t Task) (string, error) {
	registry.RLock()
	name, ok := registry.byType[reflect.TypeOf(t)]
	registry.RUnlock()
	if !ok {
		return "", fmt.Errorf("type %T: %w (call task.Register in an init function)", t, ErrUnknownType)
	}
	return name, nil
}

// Types lists the registered task type names, sorted.
func Types() []string {
	registry.RLock()
	defer registry.RUnlock()
	names := make([]string, 0, len(registry.byName))
	for n := range registry.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New returns a task of the named type with its state decoded from state (a
// msgpack encoding of the struct, as EncodeState produces). Empty state gives
// the zero value.
func New(typeName string, state []byte) (Task, error) {
	registry.RLock()
	t, ok := registry.byName[typeName]
	registry.RUnlock()
	if !ok {
		return nil, fmt.Errorf("task type %q: %w", typeName, ErrUnknownType)
	}
	v := reflect.New(t.Elem()).Interface().(Task)
	if len(state) > 0 {
		if err := UnmarshalMsgpack(state, v); err != nil {
			return nil, fmt.Errorf("task type %q: decode state: %w: %v", typeName, ErrDecode, err)
		}
	}
	return v, nil
}

// EncodeState returns the registered type name of t and its state encoded
// with msgpack.
func EncodeState(t Task) (typeName string, state []byte, err error) {
	typeName, err = TypeName(t)
	if err != nil {
		return "", nil, err
	}
	state, err = msgpack.Marshal(t)
	if err != nil {
		return "", nil, fmt.Errorf("task type %q: encode state: %w: %v", typeName, ErrEncode, err)
	}
	return typeName, state, nil
}

// Program is a parallel program that `dpvm run` can start by name: it
// defines its command-line flags and builds the root task from them,
// either from Proto's tagged fields or by Setup.
type Program struct {
	// Name is what users type after `dpvm run`.
	Name string
	// Summary is a one-line description for listings.
	Summary string
	// Proto is the root task with its flags' defaults, a pointer to a
	// struct. Each field tagged `flag:"name,usage"` (bool, int, int64,
	// uint, uint64, float64, string or time.Duration) is a flag that sets
	// it, its value in Proto the default; a numeric one tagged `min:"x"`
	// too must be at least x. The root task is a copy of Proto with its
	// flags applied, checked by its Validate method if it has one
	// (Validator). Positional arguments are refused. RegisterProgram
	// makes Setup from it, and registers Proto's type under Name if it is
	// not registered yet.
	Proto Task
	// Setup defines the program's flags on fs and returns a function that,
	// called after fs has been parsed (with the positional arguments that
	// remain), builds the root task. It reports bad values as errors. Set
	// either Proto or Setup.
	Setup func(fs *flag.FlagSet) func(args []string) (Task, error)
}

// Task builds the program's root task from its command-line arguments, as
// `dpvm run NAME args...` does. It is pvm_spawn's argv for a task that
// starts a program: c.Spawn(proto, n) with the task it returns starts n
// copies of the program's root, each with the fields its flags set.
func (p Program) Task(args ...string) (Task, error) {
	fs := flag.NewFlagSet(p.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	build := p.Setup(fs)
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("program %s: %w", p.Name, err)
	}
	t, err := build(fs.Args())
	if err != nil {
		return nil, fmt.Errorf("program %s: %w", p.Name, err)
	}
	return t, nil
}

var programs = struct {
	sync.RWMutex
	m map[string]Program
}{m: map[string]Program{}}

// RegisterProgram makes p known to `dpvm run`. It panics on a duplicate
// name, a Program without Name or with both or neither of Proto and Setup,
// or a Proto that is not a pointer to a struct or whose flag tags are
// wrong.
func RegisterProgram(p Program) {
	if p.Name == "" || (p.Setup == nil) == (p.Proto == nil) {
		panic("task.RegisterProgram: Name and one of Proto and Setup are required")
	}
	if p.Proto != nil {
		v := reflect.ValueOf(p.Proto)
		if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
			panic(fmt.Sprintf("task.RegisterProgram(%q): Proto %T is not a pointer to a struct", p.Name, p.Proto))
		}
		if _, err := defineFlags(flag.NewFlagSet(p.Name, flag.ContinueOnError), reflect.New(v.Type().Elem()).Elem()); err != nil {
			panic(fmt.Sprintf("task.RegisterProgram(%q): %v", p.Name, err))
		}
		if _, err := TypeName(p.Proto); err != nil {
			Register(p.Name, p.Proto)
		}
		p.Setup = protoSetup(p.Proto)
	}
	programs.Lock()
	defer programs.Unlock()
	if _, dup := programs.m[p.Name]; dup {
		panic(fmt.Sprintf("task.RegisterProgram: duplicate program %q", p.Name))
	}
	programs.m[p.Name] = p
}

// LookupProgram returns the program registered under name.
func LookupProgram(name string) (Program, bool) {
	programs.RLock()
	defer programs.RUnlock()
	p, ok := programs.m[name]
	return p, ok
}

// Programs lists the registered programs, sorted by name.
func Programs() []Program {
	programs.RLock()
	defer programs.RUnlock()
	out := make([]Program, 0, len(programs.m))
	for _, p := range programs.m {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
