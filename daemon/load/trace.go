package load

import (
	"fmt"
	"math"
	"os"
	"time"

	"github.com/dpvm/dpvm/sched/sim"
)

// MaxSpeedup bounds TraceConfig.Speedup.
const MaxSpeedup = 1e6

// TraceConfig says which host of a trace a daemon replays and how the
// trace's time maps onto the daemon's clock.
type TraceConfig struct {
	// Host is the trace host this daemon plays.
	Host string
	// Start is the daemon-clock instant at which the replay is at Offset.
	Start time.Time
	// Speedup is trace seconds per daemon-clock second (0 means 1): 60
	// replays an hour of trace in a minute.
	Speedup float64
	// Offset is the trace time (from its step 0) at Start.
	Offset time.Duration
	// Loop replays the trace again from step 0 after its last step;
	// otherwise the last step's figures stay.
	Loop bool
}

// Trace is an emulated host: it replays one host of a trace file in the
// simulator's format (sim.ReadTrace) against the daemon's clock, the
// trace-driven method of Schnor and Gehrke's study. Its figures are the
// host's situation without the parallel application, so the daemon adds its
// own tasks (Sample.Tasks) as usual; all of the trace's load counts as
// emulated. Trace is immutable and safe for concurrent use.
type Trace struct {
	t    *sim.Trace
	host int
	c    TraceConfig
}

// NewTrace replays host c.Host of t. The error wraps ErrUnknownHost when
// the trace has no such host, ErrInvalid for a bad speed-up or offset, and
// sim.ErrBadTrace for an inconsistent trace.
func NewTrace(t *sim.Trace, c TraceConfig) (*Trace, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: trace: no trace", ErrInvalid)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if c.Speedup == 0 {
		c.Speedup = 1
	}
	if !(c.Speedup > 0 && c.Speedup <= MaxSpeedup) {
		return nil, fmt.Errorf("%w: trace: speed-up %g (0 < x ≤ %g)", ErrInvalid, c.Speedup, float64(MaxSpeedup))
	}
	if c.Offset < 0 {
		return nil, fmt.Errorf("%w: trace: offset %v is negative", ErrInvalid, c.Offset)
	}
	for i, h := range t.Hosts {
		if h.Name == c.Host {
			return &Trace{t: t, host: i, c: c}, nil
		}
	}
	return nil, fmt.Errorf("%w: %q (the trace has %d hosts, e.g. %q)", ErrUnknownHost, c.Host, len(t.Hosts), t.Hosts[0].Name)
}

// OpenTrace reads a trace file and replays host c.Host of it.
func OpenTrace(path string, c TraceConfig) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	defer f.Close()
	t, err := sim.ReadTrace(f)
	if err != nil {
		return nil, fmt.Errorf("load: %s: %w", path, err)
	}
	return NewTrace(t, c)
}

// Host is the replayed host as the trace declares it: its α and the
// number of interactive users it tolerates, which a daemon replaying it
// reports in place of its own.
func (r *Trace) Host() sim.TraceHost { return r.t.Hosts[r.host] }

// Step returns the trace step in force at now and whether the trace has
// ended (without Loop, the last step then stays in force). Before Start the
// replay is at Offset.
func (r *Trace) Step(now time.Time) (step int, ended bool) {
	el := now.Sub(r.c.Start)
	if el < 0 {
		el = 0
	}
	at := el.Seconds()*r.c.Speedup + r.c.Offset.Seconds()
	f := math.Floor(at / r.t.Step)
	n := r.t.Steps()
	if r.c.Loop {
		return int(math.Mod(f, float64(n))), false
	}
	if f >= float64(n-1) {
		return n - 1, f >= float64(n)
	}
	return int(f), false
}

// Sample returns the replayed host's figures at now, labelled emulated.
func (r *Trace) Sample(now time.Time) (Sample, error) {
	i, ended := r.Step(now)
	x := r.t.Samples[i][r.host]
	src := fmt.Sprintf("trace %s step %d/%d", r.t.Hosts[r.host].Name, i, r.t.Steps())
	if ended {
		src += " (ended)"
	}
	return Sample{
		Time:         now,
		External:     float64(x.Load),
		EmulatedLoad: float64(x.Load),
		MemFreeMiB:   float64(x.MemFree),
		Users:        int(x.Users),
		Source:       src,
		Emulated:     true,
	}, nil
}
