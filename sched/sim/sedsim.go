package sim

import (
	"fmt"
	"math"

	"github.com/dpvm/dpvm/sched"
)

// SEDApp is a parallel application of the trace-driven experiment. Its
// maxsize is Fraction of the largest availability a_maxclass at its start
// (rounded down, at least 1): 1 for A_greedy, 0.7 for A_70, 0.5 for A_50.
type SEDApp struct {
	Name     string  `json:"name"`
	Fraction float64 `json:"fraction"`
}

// SEDApps returns the paper's three applications.
func SEDApps() []SEDApp {
	return []SEDApp{{"A_greedy", 1}, {"A_70", 0.7}, {"A_50", 0.5}}
}

// SEDConfig describes one trace-driven experiment: each application is
// mapped with SED at step Start and followed for Steps steps while
// Dynamic-SED checks it every Params.DeltaT.
type SEDConfig struct {
	Name    string
	Classes []sched.Class
	Params  sched.Params
	Apps    []SEDApp
	// Start is the trace step at which the applications start; Steps is
	// how many steps they are followed (clipped to the trace's end).
	Start, Steps int
}

// DefaultSEDConfig returns the paper's set-up (Table 1 classes, δT = 3 min,
// c¹max = 6, c²max = 4, d_max = 12, load_reserv = 0.5; memory parameters
// scaled as in sched.DefaultParams) for the three applications over 4 days
// from step start of a trace sampled every step seconds.
func DefaultSEDConfig(name string, start int, step float64) SEDConfig {
	return SEDConfig{
		Name: name, Classes: sched.DefaultClasses(), Params: sched.DefaultParams(), Apps: SEDApps(),
		Start: start, Steps: int(math.Round(4 * 86400 / step)),
	}
}

// StartAt returns the first step of t at the given hour of day (0 ≤ hour <
// 24), or -1 if there is none.
func StartAt(t *Trace, hour float64) int {
	for i := 0; i < t.Steps(); i++ {
		_, h := t.Clock(i)
		if math.Abs(h-hour) < t.Step/7200 || (h > hour && h-hour < t.Step/3600) {
			return i
		}
	}
	return -1
}

// SEDAppResult is one application's row of Tables 2 and 3 plus its
// migrations.
type SEDAppResult struct {
	App SEDApp `json:"app"`
	// Size is the number of processes SED mapped; Class the delay class.
	Size  int `json:"size"`
	Class int `json:"class"`
	// EDT is the expected delay time δ_class / size.
	EDT float64 `json:"edt"`
	// MDC is the mean over the steps of the application's current delay:
	// the largest delay α(load + n) any of its processes sees (the slowest
	// process sets the pace of a parallel application). MDT = MDC / size.
	MDC float64 `json:"mdc"`
	MDT float64 `json:"mdt"`
	// Slowdown is (MDT − EDT) / EDT in percent.
	Slowdown float64 `json:"slowdown_percent"`
	// InClass is the fraction of steps at which every process's delay was
	// within its class's upper bound.
	InClass float64 `json:"in_class"`
	// Migrations counts the moves, PerHour per hour of the run; MaxPerHour
	// and MeanPerHour summarise them. Stays counts selections that found
	// no destination (migration wishes).
	Migrations  int     `json:"migrations"`
	MaxPerHour  int     `json:"max_per_hour"`
	MeanPerHour float64 `json:"mean_per_hour"`
	PerHour     []int   `json:"per_hour"`
	Stays       int     `json:"stays"`
}

// SEDResult is one experiment over all applications.
type SEDResult struct {
	Name string `json:"name"`
	// Start describes when the applications started, Hours how long they
	// were followed.
	Start string         `json:"start"`
	Hours float64        `json:"hours"`
	Apps  []SEDAppResult `json:"apps"`
}

// snapshot builds the scheduler's view at step i: the trace's load plus the
// processes placed on each host, the trace's free memory (the parallel
// processes are taken to use none, as in the paper) and users.
func snapshot(t *Trace, i int, cfg *SEDConfig, count []int, procs []sched.Process) *sched.Snapshot {
	s := &sched.Snapshot{Classes: cfg.Classes, Params: cfg.Params, Hosts: make([]sched.Host, len(t.Hosts)), Processes: procs}
	for h, th := range t.Hosts {
		x := t.Samples[i][h]
		s.Hosts[h] = sched.Host{Name: th.Name, Alpha: th.Alpha, Load: float64(x.Load) + float64(count[h]),
			MemFree: float64(x.MemFree), Users: int(x.Users), MaxUsers: th.MaxUsers}
	}
	return s
}

// RunSED runs the experiment on trace t.
func RunSED(t *Trace, cfg SEDConfig) (SEDResult, error) {
	if err := t.Validate(); err != nil {
		return SEDResult{}, fmt.Errorf("sed: %w", err)
	}
	if cfg.Start < 0 || cfg.Start >= t.Steps() || cfg.Steps < 1 {
		return SEDResult{}, fmt.Errorf("sed: %w: start step %d of %d, %d steps", ErrBadConfig, cfg.Start, t.Steps(), cfg.Steps)
	}
	if len(cfg.Apps) == 0 {
		return SEDResult{}, fmt.Errorf("sed: %w: no applications", ErrBadConfig)
	}
	for _, a := range cfg.Apps {
		if !(a.Fraction > 0 && a.Fraction <= 1) {
			return SEDResult{}, fmt.Errorf("sed: %w: application %q fraction %g (0 < f ≤ 1)", ErrBadConfig, a.Name, a.Fraction)
		}
	}
	steps := min(cfg.Steps, t.Steps()-cfg.Start)
	period := 1
	if cfg.Params.DeltaT > 0 {
		period = max(1, int(math.Round(cfg.Params.DeltaT.Seconds()/t.Step)))
	}
	day, hour := t.Clock(cfg.Start)
	res := SEDResult{Name: cfg.Name, Hours: float64(steps) * t.Step / 3600,
		Start: fmt.Sprintf("%s %02d:%02d", dayNames[day], int(hour), int(math.Round((hour-math.Floor(hour))*60))%60)}
	for _, app := range cfg.Apps {
		r, err := runSEDApp(t, &cfg, app, steps, period)
		if err != nil {
			return SEDResult{}, fmt.Errorf("sed: %s: %w", app.Name, err)
		}
		res.Apps = append(res.Apps, r)
	}
	return res, nil
}

func runSEDApp(t *Trace, cfg *SEDConfig, app SEDApp, steps, period int) (SEDAppResult, error) {
	r := SEDAppResult{App: app}
	count := make([]int, len(t.Hosts))
	s0 := snapshot(t, cfg.Start, cfg, count, nil)
	if err := s0.Validate(); err != nil {
		return r, err
	}
	avail := sched.Availability(s0)
	maxsize := max(1, int(math.Floor(app.Fraction*float64(avail[len(avail)-1])+1e-9)))
	m, err := sched.Plan(s0, sched.Job{MinSize: 1, MaxSize: maxsize})
	if err != nil {
		return r, err
	}
	if m.Class == 0 {
		return r, fmt.Errorf("%w: no delay class offers a virtual node at the start (availability %v)", ErrBadConfig, avail)
	}
	r.Size, r.Class, r.EDT = m.Size, m.Class, m.EDT
	index := map[string]int{}
	for h, th := range t.Hosts {
		index[th.Name] = h
	}
	var procs []sched.Process
	for _, p := range m.Hosts {
		for k := 0; k < p.N; k++ {
			procs = append(procs, sched.Process{TID: fmt.Sprintf("p%04d", len(procs)), Host: p.Host, Class: m.Class})
			count[index[p.Host]]++
		}
	}
	hours := int(math.Ceil(float64(steps) * t.Step / 3600))
	r.PerHour = make([]int, hours)
	inClass := 0
	for k := 0; k < steps; k++ {
		i := cfg.Start + k
		s := snapshot(t, i, cfg, count, procs)
		// The application's delay now: its slowest process's.
		worst, ok := 0.0, true
		for _, p := range procs {
			h := s.Hosts[index[p.Host]]
			d := h.ProcessDelay()
			worst = math.Max(worst, d)
			if d > cfg.Classes[p.Class-1].Max {
				ok = false
			}
		}
		r.MDC += worst
		if ok {
			inClass++
		}
		if k%period != 0 || k == 0 {
			continue
		}
		sr, err := sched.Step(s)
		if err != nil {
			return r, fmt.Errorf("step %d: %w", i, err)
		}
		procs = sr.After.Processes
		for _, mv := range sr.Migrations {
			count[index[mv.From]]--
			count[index[mv.To]]++
		}
		r.Migrations += len(sr.Migrations)
		r.Stays += len(sr.Stay)
		r.PerHour[int(float64(k)*t.Step/3600)] += len(sr.Migrations)
	}
	r.MDC /= float64(steps)
	r.MDT = r.MDC / float64(r.Size)
	r.Slowdown = 100 * (r.MDT - r.EDT) / r.EDT
	r.InClass = float64(inClass) / float64(steps)
	for _, n := range r.PerHour {
		r.MaxPerHour = max(r.MaxPerHour, n)
	}
	r.MeanPerHour = float64(r.Migrations) / (float64(steps) * t.Step / 3600)
	return r, nil
}
