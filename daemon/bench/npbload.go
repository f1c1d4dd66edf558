package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"dpvm/daemon"
	"dpvm/daemon/load"
	"dpvm/examples/npb"
)

// DynamicPVM's Table 3 today (`dpvm bench npb-load`): each NPB kernel runs
// on an embedded virtual machine of several daemons talking QUIC over
// loopback, whose hosts emulate their load. Part-way through the run an
// interactive user arrives on a host that holds a worker and brings
// background load, so that host's tasks really run (1 + load) times
// slower (emulation: they are paused at their safe points). The kernel
// runs once with migration disabled and once with the Dynamic-SED
// scheduler for each checkpoint mode; two runs on the idle machine, with
// and without the scheduler, give the runtime's overhead when nothing
// migrates.

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
	Period time.Duration // δT (default 200 ms)
	// At is when the user arrives: once rank 0 has done this fraction of
	// its iterations (default 0.2; a tiny fraction such as 1e-9: at its
	// first progress report).
	At    float64
	Users int     // interactive users arriving (default 1)
	Load  float64 // the background load they bring (default 2: 3× slower)
	// Host is where they arrive (default: the host of a worker other than
	// the master's, chosen when they arrive).
	Host string
	// Vias are the checkpoint modes of the runs with Dynamic-SED (default
	// direct and indirect).
	Vias []daemon.Via
	// NoIdle skips the two runs on the idle machine (the overhead).
	NoIdle bool
	// Rounds is how many times each run is made, in alternating order
	// (default 1); the table gives medians and ranges. One untimed run of
	// each kernel precedes them, so that no timed run is the first to
	// touch the kernel's memory.
	Rounds int
	// Progress, when set, is told of every run as it ends.
	Progress func(NPBRun)
}

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
	if o.Period == 0 {
		o.Period = 200 * time.Millisecond
	}
	if o.Period < time.Millisecond || o.Period > time.Hour {
		return bad("δT %v is outside 1ms..1h", o.Period)
	}
	if o.At < 0 || o.At >= 1 {
		return bad("--at %v is outside [0, 1)", o.At)
	}
	if o.At == 0 {
		o.At = 0.2
	}
	if o.Users == 0 {
		o.Users = 1
	}
	if o.Users < 1 || o.Users > 1000 {
		return bad("%d users is outside 1..1000", o.Users)
	}
	if o.Load == 0 {
		o.Load = 2
	}
	if !(o.Load > 0 && o.Load <= 1000) {
		return bad("load %v is outside (0, 1000]", o.Load)
	}
	if o.Rounds == 0 {
		o.Rounds = 1
	}
	if o.Rounds < 1 || o.Rounds > 100 {
		return bad("%d rounds is outside 1..100", o.Rounds)
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
	Seconds       float64   `json:"seconds"`
	KernelSeconds float64   `json:"kernel_seconds"`
	Verified      string    `json:"verified"`
	Migrations    int       `json:"migrations"`
	Failed        int       `json:"failed_migrations"`
	Moves         []NPBMove `json:"moves,omitempty"`
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
	// Speedups are Busy's median time over each Sched's; Overhead is
	// IdleSched's median time over Idle's, minus 1.
	Speedups []float64 `json:"speedups"`
	Overhead float64   `json:"overhead"`
}

// npbStat summarises the runs named name.
func npbStat(runs []NPBRun, name string) NPBStat {
	st := NPBStat{Name: name, Verified: true}
	var secs []float64
	for _, r := range runs {
		if r.Name != name {
			continue
		}
		if st.Rounds == 0 {
			st.Via, st.MinMigrations, st.MaxMigrations = r.Via, r.Migrations, r.Migrations
		}
		st.Rounds++
		secs = append(secs, r.Seconds)
		st.MinMigrations, st.MaxMigrations = min(st.MinMigrations, r.Migrations), max(st.MaxMigrations, r.Migrations)
		st.CheckpointBytes = max(st.CheckpointBytes, r.CheckpointBytes())
		st.Verified = st.Verified && r.Verified == npb.Successful
	}
	if st.Rounds == 0 {
		st.Verified = false
		return st
	}
	st.Seconds, st.Min, st.Max = medianFloat(secs), slices.Min(secs), slices.Max(secs)
	return st
}

// summarizeKernel builds a kernel's row from its runs.
func summarizeKernel(kernel string, runs []NPBRun, idle bool, vias []daemon.Via) NPBKernelResult {
	kr := NPBKernelResult{Kernel: kernel, Runs: runs}
	if idle {
		i, is := npbStat(runs, "idle"), npbStat(runs, "idle+sed")
		kr.Idle, kr.IdleSched = &i, &is
		if i.Seconds > 0 {
			kr.Overhead = is.Seconds/i.Seconds - 1
		}
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
	Class   string            `json:"class"`
	Hosts   int               `json:"hosts"`
	NP      int               `json:"np"`
	Period  time.Duration     `json:"period_ns"`
	At      float64           `json:"at"`
	Users   int               `json:"users"`
	Load    float64           `json:"load"`
	Rounds  int               `json:"rounds"`
	Kernels []NPBKernelResult `json:"kernels"`
}

// NPBLoad runs the experiment: for every kernel, the idle runs (unless
// NoIdle), the run with migration disabled and one run with Dynamic-SED
// per checkpoint mode. A run that does not verify makes it fail with
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
	res := &NPBLoadResult{Class: o.Class, Hosts: o.Hosts, NP: o.NP, Period: o.Period, At: o.At, Users: o.Users, Load: o.Load, Rounds: o.Rounds}
	var unverified []string
	type kind struct {
		name        string
		busy, sched bool
		via         daemon.Via
	}
	var kinds []kind
	if !o.NoIdle {
		kinds = append(kinds, kind{"idle", false, false, ""}, kind{"idle+sed", false, true, daemon.Direct})
	}
	kinds = append(kinds, kind{"busy", true, false, ""})
	for _, via := range o.Vias {
		kinds = append(kinds, kind{"busy+sed-" + string(via), true, true, via})
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
		for round := range o.Rounds {
			for _, kd := range runOrder(kinds, round) {
				r, err := run(kd)
				if err != nil {
					return res, err
				}
				runs = append(runs, r)
			}
		}
		res.Kernels = append(res.Kernels, summarizeKernel(k, runs, !o.NoIdle, o.Vias))
	}
	if len(unverified) > 0 {
		return res, fmt.Errorf("%w: %s", ErrNotVerified, strings.Join(unverified, ", "))
	}
	return res, nil
}

// npbRun is one run of kernel k on a fresh virtual machine.
func npbRun(ctx context.Context, o NPBLoadOptions, shared, k, name string, busy, sched bool, via daemon.Via) (NPBRun, error) {
	r := NPBRun{Kernel: k, Name: name, Busy: busy, Sched: sched}
	moves := &moveLog{}
	// Heartbeats carry the periodic load reports, so they follow δT, but
	// not below 250 ms: a daemon's join waits ten heartbeats, and the
	// user's arrival is reported at once anyway. A host is declared lost
	// only after far longer, since the machine is shared and a run may be
	// starved for a while.
	hb := max(o.Period/2, 250*time.Millisecond)
	cfg := daemon.Config{Emulate: true, Load: load.Static{}, Heartbeat: hb, DeadAfter: max(10*time.Second, 5*hb),
		SharedDir: shared, Logger: slog.New(moves)}
	if sched {
		r.Via = string(via)
		cfg.Sched = daemon.SchedConfig{Period: o.Period, Via: via}
	}
	vm, err := daemon.StartLocalVM(ctx, o.Hosts, cfg)
	if err != nil {
		return r, err
	}
	defer vm.Halt(10 * time.Second)
	m := vm.Master()
	cl, err := daemon.Dial(ctx, m.Addr(), vm.Key)
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
	start = time.Now()
	rep, err := npb.RunOn(ctx, cl, k, o.Class, o.NP, npb.RunOptions{Progress: progress})
	r.Seconds = time.Since(start).Seconds()
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

// WriteNPBLoad prints the experiment as DynamicPVM's Table 3: per kernel,
// the time with migration disabled, and for each checkpoint mode the time
// with Dynamic-SED, its migrations, the largest checkpoint and the
// speedup; then the idle runs and the overhead. Times are medians over the
// rounds, with their range.
func WriteNPBLoad(w io.Writer, r *NPBLoadResult) error {
	var b strings.Builder
	when := fmt.Sprintf("when rank 0 has done %.3g%% of its iterations", 100*r.At)
	if r.At < 0.01 {
		when = "at rank 0's first progress report"
	}
	fmt.Fprintf(&b, "NPB class %s, %d workers on %d daemons (QUIC on loopback, emulated load); %s, %d interactive user(s) arrive on a host holding a worker, with background load %g (its tasks run %g× slower). δT %v. Times are wall seconds of the whole job: the median of %d round(s) in alternating order, with the range.\n\n",
		r.Class, r.NP, r.Hosts, when, r.Users, r.Load, 1+r.Load, r.Period, r.Rounds)
	var vias []string
	if len(r.Kernels) > 0 {
		for _, s := range r.Kernels[0].Sched {
			vias = append(vias, s.Via)
		}
	}
	b.WriteString("| kernel | no migration: time (s) |")
	for _, v := range vias {
		fmt.Fprintf(&b, " Dynamic-SED %s: time (s) | migrations | checkpoint size | speedup |", v)
	}
	b.WriteString(" verified |\n|---|---|")
	for range vias {
		b.WriteString("---|---|---|---|")
	}
	b.WriteString("---|\n")
	for _, k := range r.Kernels {
		fmt.Fprintf(&b, "| %s | %s |", strings.ToUpper(k.Kernel), secs(k.Busy))
		verified := k.Busy.Verified
		for i, s := range k.Sched {
			fmt.Fprintf(&b, " %s | %s | %s | %.2f |", secs(s), migrations(s), formatBytes(s.CheckpointBytes), k.Speedups[i])
			verified = verified && s.Verified
		}
		v := "all runs"
		if !verified {
			v = "NOT ALL"
		}
		fmt.Fprintf(&b, " %s |\n", v)
	}
	hasIdle := false
	for _, k := range r.Kernels {
		hasIdle = hasIdle || k.Idle != nil
	}
	if hasIdle {
		b.WriteString("\nOverhead when nothing migrates (idle machine, same kernel and tasks):\n\n| kernel | scheduler off: time (s) | Dynamic-SED on: time (s) | migrations | overhead |\n|---|---|---|---|---|\n")
		for _, k := range r.Kernels {
			if k.Idle == nil {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %+.1f%% |\n", strings.ToUpper(k.Kernel), secs(*k.Idle), secs(*k.IdleSched), migrations(*k.IdleSched), 100*k.Overhead)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
