package share

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Demand is the load a job adds to a host: CPU (one running job is 1) and
// I/O (explicit plus implicit page-fault load, in the same unit as
// Host.LoadIO).
type Demand struct {
	CPU float64
	IO  float64
}

// WAL is the weighted average load index policy of Qin et al.:
// load = W_CPU·load_cpu + W_IO·load_io, where load_cpu is the number of
// running jobs and load_io the sum of the jobs' explicit and implicit
// (page-fault) I/O load. A new job stays local unless the origin is
// overloaded; then it moves to the least-loaded host if the discrepancy
// exceeds the job's own load and the move is expected to lower its
// slowdown. Express LoadIO in units comparable with a running job, for
// example the disk time demanded per unit time.
type WAL struct {
	// WIO is the I/O weight W_IO in [0, 1]; W_CPU = 1 − W_IO.
	WIO float64
	// Overload is the WAL load above which a host tries to move a new job.
	Overload float64
	// MigrationCost is the cost of moving a job, in load units: a move must
	// make the job's expected load at the destination lower than at the
	// origin by more than this.
	MigrationCost float64
}

// DefaultWAL returns equal weights, overload at a load of 2 and no
// migration cost.
func DefaultWAL() WAL { return WAL{WIO: 0.5, Overload: 2} }

// Validate reports an out-of-range parameter.
func (w WAL) Validate() error {
	if !(w.WIO >= 0 && w.WIO <= 1) || !(w.Overload >= 0) || !(w.MigrationCost >= 0) {
		return fmt.Errorf("%w: WAL W_IO %g (0..1), overload %g (≥ 0), migration cost %g (≥ 0)", ErrBadParam, w.WIO, w.Overload, w.MigrationCost)
	}
	return nil
}

// Name returns "wal".
func (WAL) Name() string { return "wal" }

// Load is the weighted average load of a host with the given CPU and I/O
// load.
func (w WAL) Load(cpu, io float64) float64 {
	return (1-w.WIO)*cpu + w.WIO*io
}

// Choose runs WAL's five steps for a job with demand d submitted at origin,
// with the hosts' current CPU and I/O loads given by load(h) (which must not
// yet include the job). It returns the host that should run the job.
func (w WAL) Choose(n, origin int, d Demand, load func(h int) (cpu, io float64)) int {
	c, io := load(origin)
	li := w.Load(c+d.CPU, io+d.IO) // step 1: add the job's load
	if li <= w.Overload {          // step 2: only an overloaded host migrates
		return origin
	}
	jl := w.Load(d.CPU, d.IO)
	best, bestLoad := -1, math.Inf(1)
	for h := 0; h < n; h++ { // step 3: the least-loaded candidate
		if h == origin {
			continue
		}
		hc, hio := load(h)
		if l := w.Load(hc, hio); l < bestLoad {
			best, bestLoad = h, l
		}
	}
	if best < 0 || li-bestLoad <= jl { // discrepancy must exceed the job's load
		return origin
	}
	if bestLoad+jl+w.MigrationCost >= li { // step 4: the move must pay off
		return origin
	}
	return best // step 5
}

// PlaceJob is Place for a job with a known demand.
func (w WAL) PlaceJob(origin int, hosts []Host, d Demand) (Decision, error) {
	if err := w.Validate(); err != nil {
		return Decision{}, fmt.Errorf("wal: %w", err)
	}
	if err := validate(origin, hosts); err != nil {
		return Decision{}, fmt.Errorf("wal: %w", err)
	}
	if !(d.CPU >= 0) || !(d.IO >= 0) {
		return Decision{}, fmt.Errorf("wal: %w: demand cpu %g io %g", ErrBadParam, d.CPU, d.IO)
	}
	h := w.Choose(len(hosts), origin, d, func(h int) (float64, float64) {
		return float64(hosts[h].Tasks) / float64(hosts[h].Cores), hosts[h].LoadIO
	})
	return Decision{Host: h}, nil
}

// Place implements Placer for a job of unknown demand, taken as one CPU-bound
// task (CPU 1, no I/O). Host CPU load is tasks per core.
func (w WAL) Place(origin int, hosts []Host, _ *rand.Rand) (Decision, error) {
	return w.PlaceJob(origin, hosts, Demand{CPU: 1})
}

// ControllerConfig parameterises the WAL-FC feedback controller. Its zero
// value means the defaults given on each field.
type ControllerConfig struct {
	// WIO is the initial I/O weight (default 0.5).
	WIO float64
	// Buffer is the initial share of memory used as I/O buffer (default
	// 0.25, the paper's 160 MB of 640 MB).
	Buffer float64
	// WeightStep is ΔW_IO per control action (default 0.05).
	WeightStep float64
	// BufferStep is Δbuffer share per control action (default 0.02).
	BufferStep float64
	// MinWIO and MaxWIO bound W_IO (defaults 0.05 and 0.95).
	MinWIO, MaxWIO float64
	// MinBuffer and MaxBuffer bound the buffer share (defaults 0.05 and 0.6).
	MinBuffer, MaxBuffer float64
	// History is the number of recent slowdowns averaged into s_avg
	// (default 20).
	History int
	// Recent is how many completed jobs make one control step: the
	// controller acts once every Recent observations, comparing the mean of
	// those Recent slowdowns with s_avg. The default 1 is the paper's rule
	// (every job, its own slowdown); a larger value smooths the signal when
	// job slowdowns are noisy. It must not exceed History.
	Recent int
}

func (c ControllerConfig) withDefaults() ControllerConfig {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.WIO, 0.5)
	def(&c.Buffer, 0.25)
	def(&c.WeightStep, 0.05)
	def(&c.BufferStep, 0.02)
	def(&c.MinWIO, 0.05)
	def(&c.MaxWIO, 0.95)
	def(&c.MinBuffer, 0.05)
	def(&c.MaxBuffer, 0.6)
	if c.History == 0 {
		c.History = 20
	}
	if c.Recent == 0 {
		c.Recent = 1
	}
	return c
}

// Validate reports an out-of-range parameter (after defaults are applied).
func (c ControllerConfig) Validate() error {
	c = c.withDefaults()
	ok := c.MinWIO >= 0 && c.MinWIO <= c.MaxWIO && c.MaxWIO <= 1 && c.WIO >= c.MinWIO && c.WIO <= c.MaxWIO &&
		c.MinBuffer >= 0 && c.MinBuffer <= c.MaxBuffer && c.MaxBuffer < 1 && c.Buffer >= c.MinBuffer && c.Buffer <= c.MaxBuffer &&
		c.WeightStep > 0 && c.BufferStep > 0 && c.History >= 1 && c.Recent >= 1 && c.Recent <= c.History
	if !ok {
		return fmt.Errorf("%w: controller %+v", ErrBadParam, c)
	}
	return nil
}

// Controller is the WAL-FC feedback controller. After each job completes,
// Observe feeds it the job's slowdown s_j; it keeps the recent slowdowns and
// their mean s_avg. If s_avg > s_j the last action helped and is repeated;
// if s_avg < s_j it hurt and is reversed. It steers W_IO and the buffer
// share this way, each with its own last direction.
type Controller struct {
	cfg        ControllerConfig
	wio, buf   float64
	dirW, dirB float64
	hist       []float64
	next       int
	sum        float64
	recentSum  float64
	recentN    int
}

// NewController returns a controller starting from cfg's initial weight and
// buffer share, first moving both up.
func NewController(cfg ControllerConfig) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("wal-fc: %w", err)
	}
	cfg = cfg.withDefaults()
	return &Controller{cfg: cfg, wio: cfg.WIO, buf: cfg.Buffer, dirW: 1, dirB: 1, hist: make([]float64, 0, cfg.History)}, nil
}

// WIO is the current I/O weight.
func (c *Controller) WIO() float64 { return c.wio }

// Buffer is the current buffer share of memory.
func (c *Controller) Buffer() float64 { return c.buf }

// Observe takes the slowdown of a newly completed job and, every Recent
// jobs, applies one control action; it returns the current W_IO and buffer
// share. Slowdowns that are not finite or below zero are ignored.
func (c *Controller) Observe(slowdown float64) (wio, buf float64) {
	if !(slowdown >= 0) || math.IsInf(slowdown, 0) {
		return c.wio, c.buf
	}
	if len(c.hist) < c.cfg.History {
		c.hist = append(c.hist, slowdown)
	} else {
		c.sum -= c.hist[c.next]
		c.hist[c.next] = slowdown
		c.next = (c.next + 1) % c.cfg.History
	}
	c.sum += slowdown
	c.recentSum += slowdown
	c.recentN++
	if c.recentN < c.cfg.Recent {
		return c.wio, c.buf
	}
	sj := c.recentSum / float64(c.recentN)
	c.recentSum, c.recentN = 0, 0
	avg := c.sum / float64(len(c.hist))
	switch {
	case avg < sj: // worse: reverse the last actions
		c.dirW, c.dirB = -c.dirW, -c.dirB
	case avg == sj: // no signal: hold
		return c.wio, c.buf
	}
	c.wio = clamp(c.wio+c.dirW*c.cfg.WeightStep, c.cfg.MinWIO, c.cfg.MaxWIO)
	c.buf = clamp(c.buf+c.dirB*c.cfg.BufferStep, c.cfg.MinBuffer, c.cfg.MaxBuffer)
	return c.wio, c.buf
}

func clamp(v, lo, hi float64) float64 {
	return math.Max(lo, math.Min(hi, v))
}
