package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/load"
	"github.com/dpvm/dpvm/examples"
)

// SEDOptions configures the Dynamic-SED experiment (seed 001 Table 3,
// seed 000 principle 1): a parallel job runs on an embedded virtual machine
// whose hosts emulate their load; mid-run an interactive user arrives on
// one host and its load rises; the job runs once without the scheduler and
// once with it.
type SEDOptions struct {
	Hosts   int           // daemons (default 4)
	Workers int           // pi workers, placed round-robin (default Hosts)
	Samples int64         // pi samples (default 40 million)
	Period  time.Duration // δT (default 200 ms)
	After   time.Duration // when the user arrives (default 1 s into the run)
	Host    string        // where (default h2)
	Users   int           // how many users arrive (default 1)
	Load    float64       // the load they bring (default 2: that host's tasks run 3× slower)
	Via     daemon.Via    // how the scheduler moves tasks (default direct)
}

func (o *SEDOptions) defaults() {
	if o.Hosts <= 0 {
		o.Hosts = 4
	}
	if o.Workers <= 0 {
		o.Workers = o.Hosts
	}
	if o.Samples <= 0 {
		o.Samples = 40_000_000
	}
	if o.Period <= 0 {
		o.Period = 200 * time.Millisecond
	}
	if o.After <= 0 {
		o.After = time.Second
	}
	if o.Host == "" {
		o.Host = "h2"
	}
	if o.Users <= 0 {
		o.Users = 1
	}
	if o.Load < 0 {
		o.Load = 0
	} else if o.Load == 0 {
		o.Load = 2
	}
	if o.Via == "" {
		o.Via = daemon.Direct
	}
}

// SEDRun is one run of the job.
type SEDRun struct {
	Sched      bool    `json:"sched"`
	Seconds    float64 `json:"seconds"`
	Migrations int     `json:"migrations"`
	Hits       int64   `json:"hits"`
}

// SEDResult compares the two runs.
type SEDResult struct {
	Options SEDOptions `json:"-"`
	Off     SEDRun     `json:"without"`
	On      SEDRun     `json:"with"`
	Speedup float64    `json:"speedup"`
	Same    bool       `json:"same_result"`
}

var piHits = regexp.MustCompile(`: (\d+) hits`)

// SEDExperiment runs the job without and then with Dynamic-SED.
func SEDExperiment(ctx context.Context, o SEDOptions) (SEDResult, error) {
	o.defaults()
	res := SEDResult{Options: o}
	var err error
	if res.Off, err = sedRun(ctx, o, false); err != nil {
		return res, fmt.Errorf("without the scheduler: %w", err)
	}
	if res.On, err = sedRun(ctx, o, true); err != nil {
		return res, fmt.Errorf("with Dynamic-SED: %w", err)
	}
	res.Speedup = res.Off.Seconds / res.On.Seconds
	res.Same = res.Off.Hits == res.On.Hits
	return res, nil
}

func sedRun(ctx context.Context, o SEDOptions, on bool) (SEDRun, error) {
	run := SEDRun{Sched: on}
	var out bytes.Buffer
	cfg := daemon.Config{Output: &out, Emulate: true, Load: load.Static{}, Heartbeat: o.Period / 2}
	if on {
		cfg.Sched = daemon.SchedConfig{Period: o.Period, Via: o.Via}
	}
	vm, err := daemon.StartLocalVM(ctx, o.Hosts, cfg)
	if err != nil {
		return run, err
	}
	defer vm.Halt(10 * time.Second)
	m := vm.Master()
	start := time.Now()
	root, err := m.SpawnTask(&examples.Pi{Workers: o.Workers, Samples: o.Samples})
	if err != nil {
		return run, err
	}
	// The user arrives mid-run.
	arrive := time.AfterFunc(o.After, func() {
		users, l := o.Users, o.Load
		_ = vm.InjectLoad(ctx, o.Host, load.Overlay{Users: &users, Load: &l})
	})
	defer arrive.Stop()
	info, err := m.Wait(ctx, root)
	run.Seconds = time.Since(start).Seconds()
	if err != nil {
		return run, err
	}
	if err := daemon.ExitError(info); err != nil {
		return run, fmt.Errorf("%w\n%s", err, out.String())
	}
	mm := piHits.FindStringSubmatch(out.String())
	if mm == nil {
		return run, fmt.Errorf("no result in the job's output: %q", out.String())
	}
	run.Hits, _ = strconv.ParseInt(mm[1], 10, 64)
	run.Migrations = m.SchedStatus().Migrations
	return run, nil
}

// WriteSED prints the experiment's table.
func WriteSED(w io.Writer, r SEDResult) error {
	o := r.Options
	fmt.Fprintf(w, "pi with %d workers and %d samples on %d daemons (emulated load); at %v, %d interactive user(s) arrive on %s with load %g (its tasks run %g× slower)\n",
		o.Workers, o.Samples, o.Hosts, o.After, o.Users, o.Host, o.Load, 1+o.Load)
	fmt.Fprintf(w, "%-24s %10s %11s %14s\n", "", "time (s)", "migrations", "hits")
	fmt.Fprintf(w, "%-24s %10.2f %11d %14d\n", "without Dynamic-SED", r.Off.Seconds, r.Off.Migrations, r.Off.Hits)
	fmt.Fprintf(w, "%-24s %10.2f %11d %14d\n", fmt.Sprintf("with Dynamic-SED (δT %v)", o.Period), r.On.Seconds, r.On.Migrations, r.On.Hits)
	same := "the same"
	if !r.Same {
		same = "DIFFERENT"
	}
	_, err := fmt.Fprintf(w, "speedup %.2f×; result %s\n", r.Speedup, same)
	return err
}
