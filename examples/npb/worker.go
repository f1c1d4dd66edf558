package npb

import (
	"errors"
	"fmt"
	"time"

	"github.com/dpvm/dpvm/task"
)

// Place is a worker's position in its run, common to every kernel: its
// class and its communicator (its rank and its peers). The root task
// spawns the workers as a team (task.Ctx.Spawn with task.Team); each joins it once.
type Place struct {
	Class string
	NP    int
	// Iters, when above 0, replaces the class's iteration count (CG, MG
	// and FT only; see RunOptions.Iterations).
	Iters int
	// C is the run's workers by rank; the root is not a member.
	C task.Comm
	// T0 is when the timed region started (Unix nanoseconds, rank 0 only).
	T0 int64
}

// attach joins the worker's communicator (at once when Run re-enters) and
// returns the comm that carries its messages.
func (p *Place) attach(c *task.Ctx) (comm, error) {
	if err := c.JoinComm(&p.C); err != nil {
		return nil, err
	}
	if p.C.Size() != p.NP {
		return nil, fmt.Errorf("npb worker: a team of %d, want %d", p.C.Size(), p.NP)
	}
	tc := &taskComm{c: c, team: &p.C}
	if hs, err := c.Hosts(); err == nil && len(hs) == 1 {
		tc.oneHost = true
	}
	return tc, nil
}

// hooks connect a kernel's main loop to its surroundings.
type hooks struct {
	// safePoint is called once per iteration of the main loop (nil in
	// serial runs). A non-nil error ends the run with that error.
	safePoint func() error
	// setupPoint is called every few thousand rows while a kernel builds
	// what it derives from its fields (CG's matrix): a safe point where
	// Run, re-entered, starts its set-up over (nil: none, as in serial
	// runs).
	setupPoint func() error
	// ready waits, at a safe point, for every rank to finish its set-up
	// before the first exchange, so that none waits for a peer still
	// setting up outside a safe point (nil: no wait).
	ready func() error
	// progress reports iterations done (rank 0; may be nil).
	progress func(Progress)
	// now is the clock timing the benchmark's timed region.
	now func() time.Time
	// stages makes a run of more than one rank outside the runtime take
	// the safe points inside an iteration that a run on the team's
	// task.Comm takes (MG's stages; tests).
	stages bool
}

func (h *hooks) safe() error {
	if h.safePoint == nil {
		return nil
	}
	return h.safePoint()
}

// setup is setupPoint, if set.
func (h *hooks) setup() error {
	if h.setupPoint == nil {
		return nil
	}
	return h.setupPoint()
}

// allReady is ready, if set.
func (h *hooks) allReady() error {
	if h.ready == nil {
		return nil
	}
	return h.ready()
}

func (h *hooks) report(done, total int) {
	if h.progress != nil {
		h.progress(Progress{Done: done, Total: total})
	}
}

// startTimer records the start of the timed region on rank 0, once.
func (p *Place) startTimer(cm comm, h *hooks) {
	if cm.rank() == 0 && p.T0 == 0 {
		p.T0 = h.now().UnixNano()
	}
}

// elapsed is the time since the timed region started, in seconds.
func (p *Place) elapsed(h *hooks) float64 {
	return float64(h.now().UnixNano()-p.T0) / 1e9
}

// iters returns the iteration count of the run: Iters when it is set, else
// the class's own count.
func (p *Place) iters(class int) int {
	if p.Iters > 0 {
		return p.Iters
	}
	return class
}

// worker is a kernel task's code: run executes the kernel (resuming from the
// worker's fields) and returns, on rank 0, the report (without Hosts).
type worker interface {
	task.Task
	place() *Place
	run(cm comm, h *hooks) (*Report, error)
}

// runWorker is the body of every worker's Run.
func runWorker(c *task.Ctx, k worker) error {
	p := k.place()
	cm, err := p.attach(c)
	if err != nil {
		return err
	}
	// A set-up tick is a safe point only while the team's task.Comm keeps
	// no results to replay: Run re-entered inside a step (CG's, IS's)
	// must make its collectives again before its next safe point, which
	// would drop them.
	setup := func() error {
		if len(p.C.Done) > 0 {
			return nil
		}
		return c.SafePoint()
	}
	h := &hooks{safePoint: c.SafePoint, setupPoint: setup, ready: func() error { return p.C.Barrier(c) }, now: time.Now}
	if p.C.Rank == 0 {
		h.progress = func(pr Progress) { _ = c.Send(c.Parent(), tagProgress, pr) }
	}
	rep, err := k.run(cm, h)
	if err != nil {
		if errors.Is(err, task.ErrSuspended) {
			return err
		}
		return fmt.Errorf("npb %s rank %d: %w", rep.kernelName(k), p.C.Rank, err)
	}
	if p.C.Rank == 0 {
		if err := c.Send(c.Parent(), tagResult, rep); err != nil {
			return fmt.Errorf("npb: send result: %w", err)
		}
	}
	return nil
}

func (r *Report) kernelName(k worker) string {
	if r != nil {
		return r.Kernel
	}
	switch k.(type) {
	case *EPWorker:
		return "ep"
	case *CGWorker:
		return "cg"
	case *MGWorker:
		return "mg"
	case *FTWorker:
		return "ft"
	case *ISWorker:
		return "is"
	}
	return "?"
}

// newWorker returns the prototype worker of kernel for class and np tasks,
// after checking that the decomposition supports np.
func newWorker(kernel, class string, np int) (worker, error) {
	if np < 1 {
		return nil, fmt.Errorf("np %d: at least one task is needed: %w", np, ErrBadNP)
	}
	pl := Place{Class: class, NP: np}
	switch kernel {
	case "ep":
		if _, err := EPParamsFor(class); err != nil {
			return nil, err
		}
		return &EPWorker{Place: pl}, nil
	case "cg":
		p, err := CGParamsFor(class)
		if err != nil {
			return nil, err
		}
		if np > p.NA {
			return nil, fmt.Errorf("CG class %s: np %d exceeds the %d rows: %w", class, np, p.NA, ErrBadNP)
		}
		return &CGWorker{Place: pl}, nil
	case "mg":
		p, err := MGParamsFor(class)
		if err != nil {
			return nil, err
		}
		if !isPow2(np) || np > p.N/2 {
			return nil, fmt.Errorf("MG class %s: np %d: the grid is split into slabs of planes, so np must be a power of two up to %d: %w", class, np, p.N/2, ErrBadNP)
		}
		return &MGWorker{Place: pl}, nil
	case "ft":
		p, err := FTParamsFor(class)
		if err != nil {
			return nil, err
		}
		if !isPow2(np) || np > min(p.NY, p.NZ) {
			return nil, fmt.Errorf("FT class %s: np %d: the grid is split into slabs and transposed, so np must be a power of two up to %d: %w", class, np, min(p.NY, p.NZ), ErrBadNP)
		}
		return &FTWorker{Place: pl}, nil
	case "is":
		p, err := ISParamsFor(class)
		if err != nil {
			return nil, err
		}
		if !isPow2(np) || np > 1<<p.LogBuckets {
			return nil, fmt.Errorf("IS class %s: np %d: the key range is split by buckets, so np must be a power of two up to %d: %w", class, np, 1<<p.LogBuckets, ErrBadNP)
		}
		return &ISWorker{Place: pl}, nil
	}
	return nil, fmt.Errorf("%q: %w", kernel, ErrUnknownKernel)
}

// RunSerial runs kernel for class as a single task without the runtime:
// the serial reference form, and the baseline of the runtime's overhead.
// progress may be nil.
func RunSerial(kernel, class string, progress func(Progress)) (*Report, error) {
	k, err := NormKernel(kernel)
	if err != nil {
		return nil, err
	}
	cl, err := NormClass(class)
	if err != nil {
		return nil, err
	}
	w, err := newWorker(k, cl, 1)
	if err != nil {
		return nil, err
	}
	return w.run(soloComm{}, &hooks{progress: progress, now: time.Now})
}

func mops(mop, t float64) float64 {
	if t <= 0 {
		return 0
	}
	return mop / t
}

// finish fills a report's common fields.
func (p *Place) finish(kernel string, iters int, t, mop float64) *Report {
	m := mops(mop, t)
	return &Report{
		Kernel: kernel, Class: p.Class, NP: p.NP, Iterations: iters,
		TimeS: t, Mops: m, MopsPerTask: m / float64(p.NP),
	}
}
