package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/load"
	"github.com/dpvm/dpvm/examples/npb"
)

// DynamicPVM's Table 3 today (`dpvm bench npb-load`): each NPB kernel runs
// on an embedded virtual machine of several daemons talking QUIC over
// loopback, whose hosts emulate their load. Part-way through the run an
// interactive user arrives on a host that holds a worker and brings
// background load, so that host's tasks really run (1 + load) times
// slower (emulation: they are paused for the time they compute). The kernel
// runs once with migration disabled and once with the Dynamic-SED
// scheduler for each checkpoint mode. Pairs of runs on the idle machine,
// without and with the scheduler, give the runtime's overhead when nothing
// migrates: the pairs alternate their order (ABBA: off-on, on-off, …), and
// the overhead is the median of the per-pair ratios, with its spread, in
// wall time and in the process's CPU time (user+sys), the latter far less
// sensitive to the other tenants of a shared machine.

// ErrNotVerified: a kernel's run did not verify.
var ErrNotVerified = errors.New("bench: kernel did not verify")

// NPBLoadOptions configures the experiment. The zero value asks for the
// defaults.
type NPBLoadOptions struct {
	Kernels []string // NPB kernels (default ep, cg, mg, ft, is)
	Class   string   // problem class (default A)
	Hosts   int      // daemons (default 4)
	// NP is the number of worker tasks (default Hosts/2, so that there are
	// hosts without a worker to move to, as the paper's lightly loaded
	// workstations).
	NP     int
	Period time.Duration // δT (default 50 ms; see DefaultNPBPeriod)
	// At is when the user arrives: once rank 0 has done this fraction of
	// its iterations (default 0.2; a tiny fraction such as 1e-9: at its
	// first progress report).
	At    float64
	Users int     // interactive users arriving (default 1)
	Load  float64 // the background load they bring (default 2: 3× slower)
	// SchedLoad, when set, is the load they bring in the runs with the
	// scheduler instead. Far above Load (say 1000) it keeps the busy
	// host's worker from finishing before the scheduler has moved it,
	// however slow the machine: for tests and demonstrations of the
	// moves; the speedups then compare unlike runs.
	SchedLoad float64
	// Host is where they arrive (default: the host of a worker other than
	// the master's, chosen when they arrive).
	Host string
	// Vias are the checkpoint modes of the runs with Dynamic-SED (default
	// direct and indirect).
	Vias []daemon.Via
	// NoIdle skips the runs on the idle machine (the overhead).
	NoIdle bool
	// OnlyIdle makes only the runs on the idle machine (no user arrives).
	OnlyIdle bool
	// Rounds is how many times each run with the user arriving is made,
	// in alternating order (default 1); the table gives medians and
	// ranges. One untimed run of each kernel precedes all the runs, so
	// that no timed run is the first to touch the kernel's memory.
	Rounds int
	// IdleRounds is how many pairs of idle runs (scheduler off, Dynamic-SED
	// on) are made per kernel, in ABBA order (default 6).
	IdleRounds int
	// Target is the overhead the idle pairs are held to (default 0.02:
	// at most 2%).
	Target float64
	// Probe is the length of each idle spell measuring the scheduler's own
	// cost (default 5 s: CPU times come in 10 ms ticks, so a spell resolves
	// 0.2% of a core), ProbeRounds how many pairs of spells (default 3);
	// NoProbe skips it. It comes with the idle runs.
	Probe       time.Duration
	ProbeRounds int
	NoProbe     bool
	// Progress, when set, is told of every run as it ends.
	Progress func(NPBRun)
}

// DefaultNPBPeriod is the experiment's default δT. The paper's 3 minutes,
// with c²max = 4, let a user's arrival be confirmed over 9 to 12 minutes of
// jobs that ran for hours; class A kernels run here for 0.5 to 3 s, so δT
// must be short for the selection to come while there is something left to
// gain (with 200 ms, MG's worker was selected with one of its four
// iterations left). A check that finds nothing changed and every process
// idle lists nothing (sched.Idle), so a short δT costs next to nothing
// when nothing migrates; the overhead runs measure it.
const DefaultNPBPeriod = 50 * time.Millisecond

// DefaultProbe is the default length of an idle spell measuring the
// scheduler's own cost.
const DefaultProbe = 5 * time.Second

// DefaultIdleRounds is how many pairs of idle runs a kernel gets by
// default: enough for a median and quartiles of the per-pair ratios, few
// enough that the five class A kernels take minutes.
const DefaultIdleRounds = 6

func (o NPBLoadOptions) withDefaults() (NPBLoadOptions, error) {
	bad := func(format string, a ...any) (NPBLoadOptions, error) {
		return o, fmt.Errorf("%w: npb-load: %s", ErrOptions, fmt.Sprintf(format, a...))
	}
	if len(o.Kernels) == 0 {
		o.Kernels = slices.Clone(npb.Kernels)
	}
	var ks []string
	for _, k := range o.Kernels {
		n, err := npb.NormKernel(k)
		if err != nil {
			return bad("%v", err)
		}
		ks = append(ks, n)
	}
	o.Kernels = ks
	if o.Class == "" {
		o.Class = "A"
	}
	c, err := npb.NormClass(o.Class)
	if err != nil {
		return bad("%v", err)
	}
	o.Class = c
	if o.Hosts == 0 {
		o.Hosts = 4
	}
	if o.Hosts < 2 || o.Hosts > 64 {
		return bad("%d hosts: need 2..64 (migration needs somewhere to go)", o.Hosts)
	}
	if o.NP == 0 {
		o.NP = max(o.Hosts/2, 1)
	}
	if o.NP < 1 || o.NP > 256 {
		return bad("np %d is outside 1..256", o.NP)
	}
	if o.At < 0 || o.At >= 1 {
		return bad("--at %v is outside [0, 1)", o.At)
	}
	if o.At == 0 {
		o.At = 0.2
	}
	if o.Load == 0 {
		o.Load = 2
	}
	if !(o.Load > 0 && o.Load <= 1000) {
		return bad("load %v is outside (0, 1000]", o.Load)
	}
	if o.SchedLoad != 0 && !(o.SchedLoad > 0 && o.SchedLoad <= 1000) {
		return bad("load with the scheduler %v is outside (0, 1000]", o.SchedLoad)
	}
	if o.NoIdle && o.OnlyIdle {
		return bad("no idle runs and only idle runs: nothing to run")
	}
	if err := defaultIn("δT", &o.Period, DefaultNPBPeriod, time.Millisecond, time.Hour); err != nil {
		return bad("%v", err)
	}
	if err := defaultIn("probe", &o.Probe, DefaultProbe, 10*time.Millisecond, time.Hour); err != nil {
		return bad("%v", err)
	}
	for _, f := range []struct {
		name         string
		v            *int
		def, lo, max int
	}{
		{"users", &o.Users, 1, 1, 1000},
		{"rounds", &o.Rounds, 1, 1, 100},
		{"idle rounds", &o.IdleRounds, DefaultIdleRounds, 1, 100},
		{"probe rounds", &o.ProbeRounds, 3, 1, 100},
	} {
		if err := defaultIn(f.name, f.v, f.def, f.lo, f.max); err != nil {
			return bad("%v", err)
		}
	}
	if o.Target == 0 {
		o.Target = 0.02
	}
	if !(o.Target > 0 && o.Target < 10) {
		return bad("target overhead %v is outside (0, 10)", o.Target)
	}
	if len(o.Vias) == 0 {
		o.Vias = []daemon.Via{daemon.Direct, daemon.Indirect}
	}
	for _, v := range o.Vias {
		if v != daemon.Direct && v != daemon.Indirect {
			return bad("checkpoint mode %q is neither direct nor indirect", v)
		}
	}
	return o, nil
}

// NPBMove is one migration the scheduler made, as the master logged it.
type NPBMove struct {
	Via      string  `json:"via"`
	Bytes    int64   `json:"checkpoint_bytes"`
	Seconds  float64 `json:"seconds"`
	FreezeMS float64 `json:"freeze_ms"`
}

// NPBRun is one run of a kernel.
type NPBRun struct {
	Kernel string `json:"kernel"`
	// Name is idle, idle+sed, busy, busy+sed-direct or busy+sed-indirect.
	Name  string `json:"name"`
	Busy  bool   `json:"busy"`
	Sched bool   `json:"sched"`
	Via   string `json:"via,omitempty"`
	// Seconds is the wall time of the job, from its start until the
	// report; KernelSeconds is the kernel's own timed region.
	Seconds       float64 `json:"seconds"`
	KernelSeconds float64 `json:"kernel_seconds"`
	// CPUSeconds is the process's CPU time (user+sys) over the same span:
	// every daemon, task and the client run in this process, and CPU time
	// is far less sensitive than wall time to other tenants of a shared
	// machine. 0 where the platform does not tell (not Linux).
	CPUSeconds float64   `json:"cpu_seconds"`
	Verified   string    `json:"verified"`
	Migrations int       `json:"migrations"`
	Failed     int       `json:"failed_migrations"`
	Moves      []NPBMove `json:"moves,omitempty"`
	// BusyHost is where the user arrived, BusyAt when (seconds after the
	// start); empty and 0 when it did not arrive before the end.
	BusyHost string  `json:"busy_host,omitempty"`
	BusyAt   float64 `json:"busy_at,omitempty"`
}

// CheckpointBytes is the largest checkpoint of the run's moves (0 without
// moves).
func (r NPBRun) CheckpointBytes() int64 {
	var m int64
	for _, mv := range r.Moves {
		m = max(m, mv.Bytes)
	}
	return m
}

// NPBStat is one kind of run of a kernel over the rounds.
type NPBStat struct {
	Name string `json:"name"`
	Via  string `json:"via,omitempty"`
	// Seconds is the median wall time over the rounds, Min and Max its
	// range.
	Seconds float64 `json:"seconds"`
	Min     float64 `json:"min"`
	Max     float64 `json:"max"`
	Rounds  int     `json:"rounds"`
	// CPUSeconds is the median CPU time (user+sys) of the rounds, CPUMin
	// and CPUMax its range (0 where unknown).
	CPUSeconds float64 `json:"cpu_seconds"`
	CPUMin     float64 `json:"cpu_min"`
	CPUMax     float64 `json:"cpu_max"`
	// MinMigrations and MaxMigrations range over the rounds;
	// CheckpointBytes is the largest checkpoint of any round's moves.
	MinMigrations   int   `json:"min_migrations"`
	MaxMigrations   int   `json:"max_migrations"`
	CheckpointBytes int64 `json:"checkpoint_bytes"`
	// Verified: every round verified.
	Verified bool `json:"verified"`
}

// NPBKernelResult is one kernel's row of the table.
type NPBKernelResult struct {
	Kernel string `json:"kernel"`
	// Runs are all the timed runs, in the order they were made.
	Runs []NPBRun `json:"runs"`
	// Idle and IdleSched are the runs on the idle machine without and
	// with the scheduler (absent with NoIdle); Busy is the run with the
	// user arriving and migration disabled; Sched the runs with
	// Dynamic-SED, one per checkpoint mode.
	Idle      *NPBStat  `json:"idle,omitempty"`
	IdleSched *NPBStat  `json:"idle_sched,omitempty"`
	Busy      NPBStat   `json:"busy"`
	Sched     []NPBStat `json:"sched"`
	// Speedups are Busy's median time over each Sched's; Overhead is the
	// median of the idle pairs' wall-time ratios (Dynamic-SED on over
	// off), minus 1, and IdleOverhead its whole summary.
	Speedups     []float64    `json:"speedups"`
	Overhead     float64      `json:"overhead"`
	IdleOverhead *NPBOverhead `json:"idle_overhead,omitempty"`
	// SchedShare is the scheduler's own cost (NPBLoadResult.SchedCost,
	// CPU seconds per second) over the kernel's CPU seconds per wall
	// second with the scheduler off: the CPU time the scheduler adds to
	// this kernel's run, as a fraction of it (absent without the probe).
	SchedShare *float64 `json:"sched_share,omitempty"`
}

// schedShare is cost's CPU per second over the kernel's idle CPU rate.
func schedShare(cost *NPBSchedCost, idle *NPBStat) *float64 {
	if cost == nil || idle == nil || idle.Seconds <= 0 || idle.CPUSeconds <= 0 {
		return nil
	}
	x := cost.PerSecond.Median / (idle.CPUSeconds / idle.Seconds)
	return &x
}

// npbStat summarises the runs named name.
func npbStat(runs []NPBRun, name string) NPBStat {
	st := NPBStat{Name: name, Verified: true}
	var secs, cpus []float64
	for _, r := range runs {
		if r.Name != name {
			continue
		}
		if st.Rounds == 0 {
			st.Via, st.MinMigrations, st.MaxMigrations = r.Via, r.Migrations, r.Migrations
		}
		st.Rounds++
		secs = append(secs, r.Seconds)
		cpus = append(cpus, r.CPUSeconds)
		st.MinMigrations, st.MaxMigrations = min(st.MinMigrations, r.Migrations), max(st.MaxMigrations, r.Migrations)
		st.CheckpointBytes = max(st.CheckpointBytes, r.CheckpointBytes())
		st.Verified = st.Verified && r.Verified == npb.Successful
	}
	if st.Rounds == 0 {
		st.Verified = false
		return st
	}
	st.Seconds, st.Min, st.Max = Median(secs), slices.Min(secs), slices.Max(secs)
	st.CPUSeconds, st.CPUMin, st.CPUMax = Median(cpus), slices.Min(cpus), slices.Max(cpus)
	return st
}

// NPBSpread is a sample of overheads (a ratio minus 1): its median,
// quartiles and range.
type NPBSpread struct {
	Median float64 `json:"median"`
	Q1     float64 `json:"q1"`
	Q3     float64 `json:"q3"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// spreadOf summarises xs (not empty).
func spreadOf(xs []float64) NPBSpread {
	s := slices.Clone(xs)
	slices.Sort(s)
	return NPBSpread{Median: quantile(s, 0.5), Q1: quantile(s, 0.25), Q3: quantile(s, 0.75), Min: s[0], Max: s[len(s)-1]}
}

// quantile is the q-quantile of sorted s, interpolating linearly between
// order statistics (R's type 7).
func quantile(s []float64, q float64) float64 {
	h := q * float64(len(s)-1)
	i := int(h)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + (h-float64(i))*(s[i+1]-s[i])
}

// NPBOverhead is the runtime's overhead when nothing migrates, from pairs
// of idle runs: in each pair, the run with Dynamic-SED on over the run
// with the scheduler off, minus 1.
type NPBOverhead struct {
	Pairs int `json:"pairs"`
	// Wall is the spread of the per-pair overheads in wall time; CPU in
	// the process's CPU time (nil when the platform does not tell).
	Wall NPBSpread  `json:"wall"`
	CPU  *NPBSpread `json:"cpu,omitempty"`
	// Target is the overhead allowed; Met says whether the median per-pair
	// wall-time overhead is within it; Straddles, that the interquartile
	// range of the wall-time overheads holds the target, so that the
	// verdict could go either way on this machine; CPUMet, whether the
	// median CPU-time overhead is within it.
	Target    float64 `json:"target"`
	Met       bool    `json:"met"`
	Straddles bool    `json:"straddles"`
	CPUMet    bool    `json:"cpu_met"`
}

// idlePairs pairs the idle runs in the order made (each pair holds one run
// of each side, in either order) and summarises their ratios. It is nil
// without a complete pair.
func idlePairs(runs []NPBRun, target float64) *NPBOverhead {
	var wall, cpu []float64
	var off, on *NPBRun
	cpuKnown := true
	for i := range runs {
		r := &runs[i]
		switch r.Name {
		case "idle":
			off = r
		case "idle+sed":
			on = r
		default:
			continue
		}
		if off == nil || on == nil {
			continue
		}
		if off.Seconds > 0 {
			wall = append(wall, on.Seconds/off.Seconds-1)
		}
		if off.CPUSeconds > 0 && on.CPUSeconds > 0 {
			cpu = append(cpu, on.CPUSeconds/off.CPUSeconds-1)
		} else {
			cpuKnown = false
		}
		off, on = nil, nil
	}
	if len(wall) == 0 {
		return nil
	}
	ov := &NPBOverhead{Pairs: len(wall), Wall: spreadOf(wall), Target: target}
	ov.Met = ov.Wall.Median <= target
	ov.Straddles = ov.Wall.Q1 <= target && target < ov.Wall.Q3
	if cpuKnown && len(cpu) == len(wall) {
		c := spreadOf(cpu)
		ov.CPU, ov.CPUMet = &c, c.Median <= target
	}
	return ov
}

// summarizeKernel builds a kernel's row from its runs.
func summarizeKernel(kernel string, runs []NPBRun, idle, busy bool, vias []daemon.Via, target float64) NPBKernelResult {
	kr := NPBKernelResult{Kernel: kernel, Runs: runs}
	if idle {
		i, is := npbStat(runs, "idle"), npbStat(runs, "idle+sed")
		kr.Idle, kr.IdleSched = &i, &is
		if kr.IdleOverhead = idlePairs(runs, target); kr.IdleOverhead != nil {
			kr.Overhead = kr.IdleOverhead.Wall.Median
		}
	}
	if !busy {
		return kr
	}
	kr.Busy = npbStat(runs, "busy")
	for _, v := range vias {
		st := npbStat(runs, "busy+sed-"+string(v))
		kr.Sched = append(kr.Sched, st)
		sp := 0.0
		if st.Seconds > 0 {
			sp = kr.Busy.Seconds / st.Seconds
		}
		kr.Speedups = append(kr.Speedups, sp)
	}
	return kr
}

// runOrder is the order of the runs in round r (from 0): round r starts
// with run r (mod n), and odd rounds go backwards from it, so no run is
// always first or always after the same one.
func runOrder[T any](runs []T, r int) []T {
	n := len(runs)
	out := make([]T, n)
	for i := range n {
		j := (r + i) % n
		if r%2 == 1 {
			j = ((r-i)%n + n) % n
		}
		out[i] = runs[j]
	}
	return out
}

// NPBLoadResult is the whole experiment.
type NPBLoadResult struct {
	Class  string        `json:"class"`
	Hosts  int           `json:"hosts"`
	NP     int           `json:"np"`
	Period time.Duration `json:"period_ns"`
	At     float64       `json:"at"`
	Users  int           `json:"users"`
	Load   float64       `json:"load"`
	// SchedLoad is the load in the runs with the scheduler when it is not
	// Load.
	SchedLoad float64 `json:"sched_load,omitempty"`
	Rounds    int     `json:"rounds"`
	// IdleRounds is the number of idle pairs per kernel (0 without idle
	// runs), Target the overhead they are held to.
	IdleRounds int     `json:"idle_rounds,omitempty"`
	Target     float64 `json:"target,omitempty"`
	OnlyIdle   bool    `json:"only_idle,omitempty"`
	// SchedCost is the scheduler's own cost on the idle machine (absent
	// without idle runs or with NoProbe).
	SchedCost *NPBSchedCost     `json:"sched_cost,omitempty"`
	Kernels   []NPBKernelResult `json:"kernels"`
}

// NPBLoad runs the experiment: for every kernel, after an untimed run, the
// pairs of idle runs (unless NoIdle), then the rounds of the run with
// migration disabled and one run with Dynamic-SED per checkpoint mode
// (unless OnlyIdle). A run that does not verify makes it fail with
// ErrNotVerified, after the other runs; the result holds every run made.
func NPBLoad(ctx context.Context, o NPBLoadOptions) (*NPBLoadResult, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	shared, err := os.MkdirTemp("", "dpvm-npbload-")
	if err != nil {
		return nil, fmt.Errorf("npb-load: shared directory: %w", err)
	}
	defer os.RemoveAll(shared)
	res := &NPBLoadResult{Class: o.Class, Hosts: o.Hosts, NP: o.NP, Period: o.Period, At: o.At, Users: o.Users, Load: o.Load,
		Rounds: o.Rounds, OnlyIdle: o.OnlyIdle}
	if o.SchedLoad != o.Load {
		res.SchedLoad = o.SchedLoad
	}
	if !o.NoIdle {
		res.IdleRounds, res.Target = o.IdleRounds, o.Target
	}
	if o.OnlyIdle {
		res.Rounds = 0
	}
	var unverified []string
	type kind struct {
		name        string
		busy, sched bool
		via         daemon.Via
	}
	if !o.NoIdle && !o.NoProbe {
		if res.SchedCost, err = schedCost(ctx, o, shared); err != nil {
			return res, err
		}
	}
	idle := []kind{{"idle", false, false, ""}, {"idle+sed", false, true, daemon.Direct}}
	var kinds []kind
	if !o.OnlyIdle {
		kinds = append(kinds, kind{"busy", true, false, ""})
		for _, via := range o.Vias {
			kinds = append(kinds, kind{"busy+sed-" + string(via), true, true, via})
		}
	}
	for _, k := range o.Kernels {
		run := func(kd kind) (NPBRun, error) {
			r, err := npbRun(ctx, o, shared, k, kd.name, kd.busy, kd.sched, kd.via)
			if err != nil {
				return r, fmt.Errorf("npb-load %s %s: %w", k, kd.name, err)
			}
			if r.Verified == npb.Unsuccessful {
				unverified = append(unverified, k+" "+kd.name)
			}
			if o.Progress != nil {
				o.Progress(r)
			}
			return r, nil
		}
		// Untimed: the first run of a kernel touches its memory first.
		if _, err := run(kind{name: "warm-up"}); err != nil {
			return res, err
		}
		var runs []NPBRun
		for pair := range o.IdleRounds {
			if o.NoIdle {
				break
			}
			for _, kd := range runOrder(idle, pair) { // ABBA
				r, err := run(kd)
				if err != nil {
					return res, err
				}
				runs = append(runs, r)
			}
		}
		for round := range o.Rounds {
			if len(kinds) == 0 {
				break
			}
			for _, kd := range runOrder(kinds, round) {
				r, err := run(kd)
				if err != nil {
					return res, err
				}
				runs = append(runs, r)
			}
		}
		kr := summarizeKernel(k, runs, !o.NoIdle, !o.OnlyIdle, o.Vias, o.Target)
		kr.SchedShare = schedShare(res.SchedCost, kr.Idle)
		res.Kernels = append(res.Kernels, kr)
	}
	if len(unverified) > 0 {
		return res, fmt.Errorf("%w: %s", ErrNotVerified, strings.Join(unverified, ", "))
	}
	return res, nil
}

// npbConfig is the daemons' configuration for a run: emulated static load,
// and the Dynamic-SED scheduler with checkpoints via via when sched.
func npbConfig(o NPBLoadOptions, shared string, sched bool, via daemon.Via, log slog.Handler) daemon.Config {
	// Heartbeats carry the periodic load reports, so they follow δT, but
	// not below 250 ms: a daemon's join waits ten heartbeats, and the
	// user's arrival is reported at once anyway. A host is declared lost
	// only after far longer, since the machine is shared and a run may be
	// starved for a while.
	hb := max(o.Period/2, 250*time.Millisecond)
	cfg := daemon.Config{Emulate: true, Load: load.Static{}, Heartbeat: hb, DeadAfter: max(10*time.Second, 5*hb),
		SharedDir: shared, Logger: slog.New(log)}
	if sched {
		cfg.Sched = daemon.SchedConfig{Period: o.Period, Via: via}
	}
	return cfg
}

// NPBSchedCost is the scheduler's own cost measured directly: the virtual
// machine of the runs, without a kernel, sits idle for a while with the
// scheduler off and with Dynamic-SED on, in pairs (ABBA), and the
// process's CPU time is compared. What the scheduler does each δT (its
// check: the hosts' figures, sched.Idle, and a listing of every host's
// processes when something changed) is all that differs, and the idle
// baseline is small, so the figure is far steadier on a shared machine
// than a kernel's time.
type NPBSchedCost struct {
	Pairs   int     `json:"pairs"`
	Seconds float64 `json:"seconds"` // the length of each idle spell
	// OffCPU and OnCPU are the median CPU seconds used per second of the
	// spell (a fraction of one core), without and with the scheduler.
	OffCPU float64 `json:"off_cpu_per_s"`
	OnCPU  float64 `json:"on_cpu_per_s"`
	// PerSecond is the spread over the pairs of the difference, on minus
	// off, in CPU seconds per second; Checks the median number of checks
	// the scheduler made in a spell, and PerCheckMS the median difference
	// per check in milliseconds.
	PerSecond  NPBSpread `json:"per_second"`
	Checks     int       `json:"checks"`
	PerCheckMS float64   `json:"per_check_ms"`
}

// schedCost measures the scheduler's cost on the idle virtual machine.
func schedCost(ctx context.Context, o NPBLoadOptions, shared string) (*NPBSchedCost, error) {
	spell := func(sched bool) (cpuPerS float64, checks int, err error) {
		vm, err := daemon.StartLocalVM(ctx, o.Hosts, npbConfig(o, shared, sched, daemon.Direct, slog.DiscardHandler))
		if err != nil {
			return 0, 0, err
		}
		defer vm.Halt(10 * time.Second)
		runtime.GC()
		c0 := vm.Master().SchedStatus().Checks
		cpu0, err := cpuSeconds()
		if err != nil {
			return 0, 0, err
		}
		start := time.Now()
		t := time.NewTimer(o.Probe)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
		cpu1, err := cpuSeconds()
		if err != nil {
			return 0, 0, err
		}
		return (cpu1 - cpu0) / time.Since(start).Seconds(), vm.Master().SchedStatus().Checks - c0, nil
	}
	sc := &NPBSchedCost{Pairs: o.ProbeRounds, Seconds: o.Probe.Seconds()}
	var diffs, offs, ons, perCheck []float64
	var checks []float64
	for pair := range o.ProbeRounds {
		var cpu [2]float64
		for _, on := range runOrder([]bool{false, true}, pair) {
			c, n, err := spell(on)
			if err != nil {
				return nil, fmt.Errorf("npb-load: scheduler cost: %w", err)
			}
			if on {
				cpu[1] = c
				checks = append(checks, float64(n))
			} else {
				cpu[0] = c
			}
		}
		offs, ons, diffs = append(offs, cpu[0]), append(ons, cpu[1]), append(diffs, cpu[1]-cpu[0])
		if n := checks[len(checks)-1]; n > 0 {
			perCheck = append(perCheck, 1000*(cpu[1]-cpu[0])*o.Probe.Seconds()/n)
		}
	}
	sc.OffCPU, sc.OnCPU, sc.PerSecond = Median(offs), Median(ons), spreadOf(diffs)
	sc.Checks, sc.PerCheckMS = int(Median(checks)), Median(perCheck)
	return sc, nil
}

// npbRun is one run of kernel k on a fresh virtual machine.
func npbRun(ctx context.Context, o NPBLoadOptions, shared, k, name string, busy, sched bool, via daemon.Via) (NPBRun, error) {
	r := NPBRun{Kernel: k, Name: name, Busy: busy, Sched: sched}
	moves := &moveLog{}
	if sched {
		r.Via = string(via)
	}
	vm, err := daemon.StartLocalVM(ctx, o.Hosts, npbConfig(o, shared, sched, via, moves))
	if err != nil {
		return r, err
	}
	defer vm.Halt(10 * time.Second)
	m := vm.Master()
	cl, err := daemon.Dial(ctx, m.Addr(), vm.Cluster.Admin)
	if err != nil {
		return r, err
	}
	defer cl.Close()

	var (
		once     sync.Once
		injected = make(chan struct{})
		injErr   error
		start    time.Time
		arrived  bool
	)
	arrive := func() {
		defer close(injected)
		host := o.Host
		if host == "" {
			if host, injErr = busyHost(ctx, m, k); injErr != nil {
				return
			}
		}
		users, l := o.Users, o.Load
		if sched && o.SchedLoad > 0 {
			l = o.SchedLoad
		}
		if injErr = vm.InjectLoad(ctx, host, load.Overlay{Users: &users, Load: &l}); injErr == nil {
			r.BusyHost, r.BusyAt, arrived = host, time.Since(start).Seconds(), true
		}
	}
	progress := func(p npb.Progress) {
		if !busy || p.Total <= 0 || float64(p.Done) < o.At*float64(p.Total) {
			return
		}
		// Not in the client's reader: the injection is a call of its own.
		once.Do(func() { go arrive() })
	}
	// Garbage left by earlier runs is collected now, not during this one.
	runtime.GC()
	cpu0, cpuErr := cpuSeconds()
	start = time.Now()
	nh := 0
	if hs, err := cl.Hosts(ctx); err == nil {
		nh = len(hs)
	}
	rep, err := npb.Run(ctx, cl.Runner(daemon.JobOptions{}), k, o.Class, o.NP, npb.RunOptions{Progress: progress, Hosts: nh})
	r.Seconds = time.Since(start).Seconds()
	if cpu1, err := cpuSeconds(); err == nil && cpuErr == nil {
		r.CPUSeconds = cpu1 - cpu0
	}
	once.Do(func() { close(injected) }) // the user never came: nothing to wait for
	<-injected
	if err != nil {
		return r, err
	}
	if injErr != nil {
		return r, fmt.Errorf("the user's arrival: %w", injErr)
	}
	if busy && !arrived {
		return r, fmt.Errorf("the run ended before rank 0 reported %.0f%% of its iterations: no user arrived", 100*o.At)
	}
	r.KernelSeconds, r.Verified = rep.TimeS, rep.Verified
	st := m.SchedStatus()
	r.Migrations, r.Failed = st.Migrations, st.Failed
	r.Moves = moves.list()
	return r, nil
}

// userHZ is the unit of the CPU times in /proc/self/stat: USER_HZ, 100 on
// every Linux architecture.
const userHZ = 100

// cpuSeconds is the CPU time (user+sys) this process has used so far, from
// /proc/self/stat (Linux; elsewhere an error). Its resolution is 1/userHZ.
func cpuSeconds() (float64, error) { return procCPUSeconds("self") }

// procCPUSeconds is the CPU time (user+sys) process pid ("self" for this
// one) has used so far, from /proc/<pid>/stat.
func procCPUSeconds(pid string) (float64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, fmt.Errorf("cpu time: %w", err)
	}
	return parseCPUSeconds(string(b))
}

// parseCPUSeconds reads utime and stime (fields 14 and 15) from a
// /proc/<pid>/stat line. The command name (field 2) is in parentheses and
// may hold spaces and parentheses itself, so the fields are counted from
// the last ')'.
func parseCPUSeconds(stat string) (float64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("cpu time: %w: no command name in %q", ErrBadStat, trimStat(stat))
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (the state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu time: %w: %d fields after the command name", ErrBadStat, len(f))
	}
	var ticks float64
	for _, x := range f[11:13] {
		n, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cpu time: %w: %w", ErrBadStat, err)
		}
		ticks += float64(n)
	}
	return ticks / userHZ, nil
}

// ErrBadStat: /proc/self/stat could not be read as such.
var ErrBadStat = errors.New("bench: malformed /proc stat line")

func trimStat(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// busyHost picks where the user arrives: the host of the kernel's worker
// with the highest TID among those not on the master (or on it, if all
// are), so that the busy host holds a worker.
func busyHost(ctx context.Context, m *daemon.Daemon, kernel string) (string, error) {
	tasks, err := m.AllTasks(ctx, false)
	if err != nil {
		return "", err
	}
	typ := "npb." + kernel + ".worker"
	var best, onMaster *daemon.TaskInfo
	for i := range tasks {
		t := &tasks[i]
		if t.Type != typ || t.State != daemon.Running {
			continue
		}
		if t.Host == m.Name() {
			if onMaster == nil || t.TID > onMaster.TID {
				onMaster = t
			}
		} else if best == nil || t.TID > best.TID {
			best = t
		}
	}
	if best == nil {
		best = onMaster
	}
	if best == nil {
		return "", fmt.Errorf("no running %s worker to make its host busy", kernel)
	}
	return best.Host, nil
}

// moveLog is a log handler that keeps the master's records of completed
// migrations (message "migrated", with the checkpoint's size), since the
// scheduler's status counts its moves but does not list them.
type moveLog struct {
	mu    sync.Mutex
	moves []NPBMove
}

func (l *moveLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelInfo }

func (l *moveLog) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message != "migrated" {
		return nil
	}
	var mv NPBMove
	rec.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "via":
			mv.Via = a.Value.String()
		case "bytes":
			mv.Bytes = a.Value.Int64()
		case "seconds":
			mv.Seconds = a.Value.Float64()
		case "freeze_ms":
			mv.FreezeMS = a.Value.Float64()
		}
		return true
	})
	l.mu.Lock()
	l.moves = append(l.moves, mv)
	l.mu.Unlock()
	return nil
}

func (l *moveLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *moveLog) WithGroup(string) slog.Handler      { return l }

func (l *moveLog) list() []NPBMove {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.moves)
}

// formatBytes prints a checkpoint size in KiB or MiB.
func formatBytes(b int64) string {
	switch {
	case b == 0:
		return "–"
	case b < 1<<10:
		return fmt.Sprintf("%d B", b)
	case b >= 10<<20:
		return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10))
}

// secs prints a median time with its range when there are several rounds.
func secs(st NPBStat) string {
	if st.Rounds > 1 && st.Min != st.Max {
		return fmt.Sprintf("%.2f (%.2f–%.2f)", st.Seconds, st.Min, st.Max)
	}
	return fmt.Sprintf("%.2f", st.Seconds)
}

func migrations(st NPBStat) string {
	if st.MinMigrations == st.MaxMigrations {
		return fmt.Sprint(st.MinMigrations)
	}
	return fmt.Sprintf("%d–%d", st.MinMigrations, st.MaxMigrations)
}

// pct prints an overhead as a signed percentage, to 0.1% (no "-0.0%").
func pct(x float64) string {
	p := math.Round(1000*x) / 10
	if p == 0 {
		p = 0
	}
	return fmt.Sprintf("%+.1f%%", p)
}

// pctTarget prints the target overhead as a percentage ("2%").
func pctTarget(x float64) string { return strconv.FormatFloat(100*x, 'g', 4, 64) + "%" }

// spread prints an overhead's median with its interquartile range and
// range.
func spread(sp NPBSpread) string {
	return fmt.Sprintf("%s (IQR %s…%s; range %s…%s)", pct(sp.Median), pct(sp.Q1), pct(sp.Q3), pct(sp.Min), pct(sp.Max))
}

// cpuSecs prints a median CPU time with its range when there are several
// rounds ("–" where unknown).
func cpuSecs(st NPBStat) string {
	if st.CPUMax == 0 {
		return "–"
	}
	if st.Rounds > 1 && st.CPUMin != st.CPUMax {
		return fmt.Sprintf("%.2f (%.2f–%.2f)", st.CPUSeconds, st.CPUMin, st.CPUMax)
	}
	return fmt.Sprintf("%.2f", st.CPUSeconds)
}

// verdict says how a kernel's idle pairs stand against the target.
func verdict(ov *NPBOverhead) string {
	v := "missed"
	if ov.Met {
		v = "met"
	}
	if ov.Straddles {
		v += " (IQR straddles " + pctTarget(ov.Target) + ")"
	}
	return v
}

// WriteNPBLoad prints the experiment as DynamicPVM's Table 3: per kernel,
// the time with migration disabled, and for each checkpoint mode the time
// with Dynamic-SED, its migrations, the largest checkpoint and the
// speedup; then the idle pairs: their times, wall and CPU, and the
// overhead (the median of the per-pair ratios, with its interquartile
// range and range) against the target, with a verdict per kernel. Times
// are medians over the rounds, with their range.
func WriteNPBLoad(w io.Writer, r *NPBLoadResult) error {
	var b strings.Builder
	if !r.OnlyIdle {
		writeBusyTable(&b, r)
	}
	hasIdle := false
	for _, k := range r.Kernels {
		hasIdle = hasIdle || k.IdleOverhead != nil
	}
	if hasIdle {
		writeIdleTable(&b, r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeBusyTable(b *strings.Builder, r *NPBLoadResult) {
	when := fmt.Sprintf("when rank 0 has done %.3g%% of its iterations", 100*r.At)
	if r.At < 0.01 {
		when = "at rank 0's first progress report"
	}
	fmt.Fprintf(b, "NPB class %s, %d workers on %d daemons (QUIC on loopback, emulated load); %s, %d interactive user(s) arrive on a host holding a worker, with background load %g (its tasks run %g× slower). δT %v. Times are wall seconds of the whole job: the median of %d round(s) in alternating order, with the range.\n\n",
		r.Class, r.NP, r.Hosts, when, r.Users, r.Load, 1+r.Load, r.Period, r.Rounds)
	if r.SchedLoad > 0 {
		fmt.Fprintf(b, "In the runs with Dynamic-SED the user brings load %g instead (%g× slower), so that the worker cannot finish before it is moved: those runs are not comparable with the run without migration.\n\n", r.SchedLoad, 1+r.SchedLoad)
	}
	var vias []string
	if len(r.Kernels) > 0 {
		for _, s := range r.Kernels[0].Sched {
			vias = append(vias, s.Via)
		}
	}
	b.WriteString("| kernel | no migration: time (s) |")
	for _, v := range vias {
		fmt.Fprintf(b, " Dynamic-SED %s: time (s) | migrations | checkpoint size | speedup |", v)
	}
	b.WriteString(" verified |\n|---|---|")
	for range vias {
		b.WriteString("---|---|---|---|")
	}
	b.WriteString("---|\n")
	for _, k := range r.Kernels {
		fmt.Fprintf(b, "| %s | %s |", strings.ToUpper(k.Kernel), secs(k.Busy))
		verified := k.Busy.Verified
		for i, s := range k.Sched {
			fmt.Fprintf(b, " %s | %s | %s | %.2f |", secs(s), migrations(s), formatBytes(s.CheckpointBytes), k.Speedups[i])
			verified = verified && s.Verified
		}
		v := "all runs"
		if !verified {
			v = "NOT ALL"
		}
		fmt.Fprintf(b, " %s |\n", v)
	}
}

func writeIdleTable(b *strings.Builder, r *NPBLoadResult) {
	if !r.OnlyIdle {
		b.WriteString("\n")
	} else {
		fmt.Fprintf(b, "NPB class %s, %d workers on %d daemons (QUIC on loopback, emulated load), δT %v.\n\n", r.Class, r.NP, r.Hosts, r.Period)
	}
	fmt.Fprintf(b, "Overhead when nothing migrates (idle machine, same kernel and tasks): %d pair(s) of runs, scheduler off and Dynamic-SED on, in ABBA order. Times are the medians of the runs with their range; CPU is the process's user+sys time. The overhead is the median of the per-pair ratios on/off, minus 1, with its interquartile range and range.\n\n",
		r.IdleRounds)
	if sc := r.SchedCost; sc != nil {
		fmt.Fprintf(b, "The scheduler's own cost, measured directly: the same virtual machine without a kernel, idle for %.3g s with the scheduler off and on (%d pair(s), ABBA), used %.2f%% and %.2f%% of a core; the difference is %s of a core (IQR %s…%s), %.2f ms of CPU per check (%d checks per spell). The column \"scheduler's share\" divides it by the kernel's CPU per second with the scheduler off.\n\n",
			sc.Seconds, sc.Pairs, 100*sc.OffCPU, 100*sc.OnCPU, pct(sc.PerSecond.Median), pct(sc.PerSecond.Q1), pct(sc.PerSecond.Q3), sc.PerCheckMS, sc.Checks)
	}
	b.WriteString("| kernel | off: wall (s) | on: wall (s) | off: CPU (s) | on: CPU (s) | migrations | overhead, wall | overhead, CPU | scheduler's share | ≤" + pctTarget(r.Target) + " (wall) | verified |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	var met, missed, straddle, cpuMissed, shares []string
	cpuKnown := 0
	for _, k := range r.Kernels {
		ov := k.IdleOverhead
		if ov == nil {
			continue
		}
		name := strings.ToUpper(k.Kernel)
		cpu := "–"
		if ov.CPU != nil {
			cpu = spread(*ov.CPU)
			cpuKnown++
			if !ov.CPUMet {
				cpuMissed = append(cpuMissed, fmt.Sprintf("%s (%s)", name, pct(ov.CPU.Median)))
			}
		}
		v := "all runs"
		if !k.Idle.Verified || !k.IdleSched.Verified {
			v = "NOT ALL"
		}
		share := "–"
		if k.SchedShare != nil {
			share = pct(*k.SchedShare)
			shares = append(shares, fmt.Sprintf("%s %s", name, share))
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name, secs(*k.Idle), secs(*k.IdleSched),
			cpuSecs(*k.Idle), cpuSecs(*k.IdleSched), migrations(*k.IdleSched), spread(ov.Wall), cpu, share, verdict(ov), v)
		if ov.Met {
			met = append(met, fmt.Sprintf("%s (%s)", name, pct(ov.Wall.Median)))
		} else {
			missed = append(missed, fmt.Sprintf("%s (%s)", name, pct(ov.Wall.Median)))
		}
		if ov.Straddles {
			straddle = append(straddle, name)
		}
	}
	fmt.Fprintf(b, "\nTarget: Dynamic-SED costs at most %s when nothing migrates, judged on the median per-pair wall-time ratio: ", pctTarget(r.Target))
	var parts []string
	if len(met) > 0 {
		parts = append(parts, "met for "+strings.Join(met, ", "))
	}
	if len(missed) > 0 {
		parts = append(parts, "MISSED for "+strings.Join(missed, ", "))
	}
	b.WriteString(strings.Join(parts, "; ") + ".")
	if len(straddle) > 0 {
		fmt.Fprintf(b, " The interquartile range of the ratios straddles %s for %s: on this machine the verdict there could go either way.", pctTarget(r.Target), strings.Join(straddle, ", "))
	}
	switch {
	case cpuKnown == 0:
		b.WriteString(" CPU times are unknown on this platform.")
	case len(cpuMissed) > 0:
		fmt.Fprintf(b, " In CPU time the median exceeds %s for %s.", pctTarget(r.Target), strings.Join(cpuMissed, ", "))
	default:
		fmt.Fprintf(b, " In CPU time the median is within %s for every kernel measured.", pctTarget(r.Target))
	}
	if len(shares) > 0 {
		fmt.Fprintf(b, " Measured directly, the scheduler adds %s of CPU time.", strings.Join(shares, ", "))
	}
	b.WriteString("\n")
}

// defaultIn sets *v to def when it is zero, then checks that it lies in
// lo..hi.
func defaultIn[T int | time.Duration](name string, v *T, def, lo, hi T) error {
	if *v == 0 {
		*v = def
	}
	if *v < lo || *v > hi {
		return fmt.Errorf("%s %v is outside %v..%v", name, *v, lo, hi)
	}
	return nil
}
