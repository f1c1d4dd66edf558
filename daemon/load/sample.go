package load

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/dpvm/dpvm/sched"
)

// ErrMalformed is returned (wrapped, with the file and the offending line or
// record) for /proc or utmp contents that cannot be parsed.
var ErrMalformed = errors.New("load: malformed input")

// ErrInvalid is returned (wrapped, naming the field) for an out-of-range
// parameter: an overlay, a trace configuration, a declared speed, a sample
// received from a daemon.
var ErrInvalid = errors.New("load: invalid parameter")

// ErrUnknownHost is returned by NewTrace when the trace has no host of the
// requested name.
var ErrUnknownHost = errors.New("load: host not in trace")

// Bounds accepted by Sample.Validate and the overlay: far above any real
// host, small enough that sums and products stay exact and finite.
const (
	MaxLoad    = 1e6
	MaxMemMiB  = 1 << 40 // 1 EiB
	MaxUsers   = 1 << 16
	MaxTasks   = 1 << 24
	maxTaskMem = 1 << 20 // task memory entries per sample
)

// TaskMem is the memory one task of the daemon uses, in MiB.
type TaskMem struct {
	TID string  `json:"tid" msgpack:"t"`
	MiB float64 `json:"mem_mib" msgpack:"m"`
}

// MiB converts a size in bytes to MiB: the daemon's estimate of a task's
// memory use is the size of its last checkpointed state (what a migration
// has to move and the destination has to hold).
func MiB(bytes int64) float64 { return float64(bytes) / (1 << 20) }

// Sample is one host's situation at one instant, as a daemon reports it to
// the master's scheduler.
//
// The host's load in Dynamic-SED's sense (runnable processes, the parallel
// ones included) is Load() = Tasks + External. A Source fills External,
// MemFreeMiB, Users and the labels; the daemon fills Tasks and TaskMem,
// which only it knows.
type Sample struct {
	// Time is when the sample was taken (the now given to Source.Sample).
	Time time.Time `json:"time" msgpack:"t"`
	// Tasks is the number of this daemon's tasks that are runnable (not
	// blocked in a receive). Filled by the daemon.
	Tasks int `json:"tasks" msgpack:"n"`
	// External is the number of other runnable processes on the host
	// (every runnable thread not belonging to the daemon's process, for
	// Proc), smoothed; it may be fractional.
	External float64 `json:"external" msgpack:"x"`
	// EmulatedLoad is the part of External that is emulated (replayed from
	// a trace or injected) rather than real processes: a daemon that
	// emulates slowness can throttle its tasks by it (EmulatedFactor).
	EmulatedLoad float64 `json:"emulated_load,omitempty" msgpack:"el,omitempty"`
	// LoadAvg1 is the kernel's one-minute load average, for display and
	// cross-checking (Proc only; 0 otherwise).
	LoadAvg1 float64 `json:"loadavg1,omitempty" msgpack:"la,omitempty"`
	// CPUs is the number of processors the kernel lists (Proc only; 0
	// otherwise). Load is not divided by it: Dynamic-SED's model is a
	// workstation with one processor.
	CPUs int `json:"cpus,omitempty" msgpack:"c,omitempty"`
	// MemFreeMiB is the memory available to new work, in MiB.
	MemFreeMiB float64 `json:"mem_free_mib" msgpack:"m"`
	// Users is the number of interactive users logged in.
	Users int `json:"users" msgpack:"u"`
	// TaskMem is each task's memory use. Filled by the daemon.
	TaskMem []TaskMem `json:"task_mem,omitempty" msgpack:"tm,omitempty"`
	// Source says where the figures come from: "proc", "static", "trace
	// HOST step I/N", with "+injected" appended while an overlay is active.
	Source string `json:"source" msgpack:"s"`
	// Emulated is true when any figure is emulated (trace, static,
	// injection) rather than measured.
	Emulated bool `json:"emulated" msgpack:"e"`
}

// Load is the host's runnable load as Dynamic-SED counts it: the daemon's
// runnable tasks plus the other runnable processes.
func (s Sample) Load() float64 { return float64(s.Tasks) + s.External }

// Validate reports a sample the master should not feed to the scheduler:
// a negative or non-finite figure, or one beyond the package's bounds. The
// master calls it on samples received from daemons. Errors wrap ErrInvalid.
func (s Sample) Validate() error {
	bad := func(f string, a ...any) error {
		return fmt.Errorf("%w: sample: "+f, append([]any{ErrInvalid}, a...)...)
	}
	switch {
	case s.Tasks < 0 || s.Tasks > MaxTasks:
		return bad("tasks %d out of range 0..%d", s.Tasks, MaxTasks)
	case !inRange(s.External, MaxLoad):
		return bad("external load %g out of range 0..%g", s.External, float64(MaxLoad))
	case !inRange(s.EmulatedLoad, s.External):
		return bad("emulated load %g out of range 0..external %g", s.EmulatedLoad, s.External)
	case !inRange(s.LoadAvg1, MaxLoad):
		return bad("load average %g out of range 0..%g", s.LoadAvg1, float64(MaxLoad))
	case s.CPUs < 0 || s.CPUs > MaxTasks:
		return bad("cpus %d out of range", s.CPUs)
	case !inRange(s.MemFreeMiB, MaxMemMiB):
		return bad("free memory %g MiB out of range 0..%g", s.MemFreeMiB, float64(MaxMemMiB))
	case s.Users < 0 || s.Users > MaxUsers:
		return bad("users %d out of range 0..%d", s.Users, MaxUsers)
	case len(s.TaskMem) > maxTaskMem:
		return bad("%d task memory entries (at most %d)", len(s.TaskMem), maxTaskMem)
	}
	for _, m := range s.TaskMem {
		if m.TID == "" || !inRange(m.MiB, MaxMemMiB) {
			return bad("task %q memory %g MiB (need a tid and 0..%g)", m.TID, m.MiB, float64(MaxMemMiB))
		}
	}
	return nil
}

// SchedHost converts the sample into the scheduler's view of the host.
// alpha is the host's speed factor (Calibrate, ResolveSpeed or a trace's);
// maxUsers and slowdown are the host's configured tolerance of interactive
// users and slow-down threshold (0 = none).
func (s Sample) SchedHost(name string, alpha float64, maxUsers int, slowdown float64) sched.Host {
	return sched.Host{
		Name:     name,
		Alpha:    alpha,
		Load:     s.Load(),
		MemFree:  s.MemFreeMiB,
		Users:    s.Users,
		MaxUsers: maxUsers,
		Slowdown: slowdown,
	}
}

func inRange(x, hi float64) bool { return x >= 0 && x <= hi && !math.IsNaN(x) }

// Source yields samples of one host's situation. Implementations are safe
// for concurrent use.
type Source interface {
	Sample(now time.Time) (Sample, error)
}

// Static is an emulated host whose figures never change: a base for
// Injected when several daemons share one machine (each would otherwise see
// the others' tasks as external load through Proc). Its load counts as
// emulated.
type Static struct {
	External   float64
	MemFreeMiB float64
	Users      int
}

// Sample returns the fixed figures, labelled "static" and emulated.
func (s Static) Sample(now time.Time) (Sample, error) {
	out := Sample{Time: now, External: s.External, EmulatedLoad: s.External, MemFreeMiB: s.MemFreeMiB, Users: s.Users, Source: "static", Emulated: true}
	if err := out.Validate(); err != nil {
		return Sample{}, fmt.Errorf("load: static source: %w", err)
	}
	return out, nil
}
