package sim

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/dpvm/dpvm/task"
)

// base is the virtual clock's zero, as the pure machines see it.
var base = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// clock is the virtual time as the pure machines take it.
func (w *world) clock() time.Time { return base.Add(w.now) }

// check verifies the invariants after a step: every task that has not
// ended is in service on at most one host, and, when on none, is caught
// in a move (suspended at its origin or prepared at its destination);
// no host's route for a task goes back in epoch; a task in service on a
// host belongs to that incarnation of the host. The per-pair FIFO and
// exactly-once invariant is checked at every delivery (shost.put).
func (w *world) check() {
	m := w.master
	rolling := m.rollingBack()
	for _, tid := range m.order() {
		if m.task(tid).Exited {
			continue
		}
		st := m.incs[tid]
		if m.down && st != nil && st.ended && st.host.tasks[tid] != st {
			continue // it ended after the master crashed, which never heard of it
		}
		on := 0
		// A task on a crashed host is lost with it until the job rolls
		// back; during the rollback it is on no host.
		moving := rolling || (st != nil && st.host.crashed)
		for _, h := range w.hosts {
			if h.crashed {
				continue
			}
			if ht := h.tasks[tid]; ht != nil {
				on++
				if ht.host != h {
					// A restarted host's new incarnation holds a task of
					// its old one.
					w.fail(fmt.Errorf("%w: %v (incarnation %d) holds %v's incarnation %d of %v's incarnation %d",
						ErrInvariant, h.name, h.inc, tid, ht.inc, ht.host.name, ht.host.inc))
					return
				}
			}
			if h.leaving[tid] != nil || h.arriving[tid] != nil {
				moving = true
			}
			switch e, last := h.node.Routes().Lookup(tid).Epoch, h.epochs[tid]; {
			case e < last:
				w.fail(fmt.Errorf("%w: %v's route for %v went back from epoch %d to %d", ErrInvariant, h.name, tid, last, e))
				return
			case e > last:
				h.epochs[tid] = e
			}
		}
		switch {
		case on > 1:
			w.fail(fmt.Errorf("%w: %v runs on %v at once", ErrInvariant, tid, w.runningOn(tid)))
			return
		case on == 0 && !moving:
			w.fail(fmt.Errorf("%w: %v is on no host and in no move", ErrInvariant, tid))
			return
		}
	}
}

// runningOn names the hosts not crashed that have tid in service.
func (w *world) runningOn(tid task.TID) []string {
	var on []string
	for _, h := range w.hosts {
		if !h.crashed && h.tasks[tid] != nil {
			on = append(on, h.name)
		}
	}
	return on
}

// ErrWrongResult: a seed's run ended with another result than the
// program's fault-free run.
var ErrWrongResult = errors.New("result differs from the fault-free run's")

// Program builds a fresh root task for each run (a run changes its
// task's state).
type Program func() (task.Task, error)

// Report is what Check found.
type Report struct {
	// Reference is the fault-free run (seed 0, no faults) every seed is
	// compared with; its length is the seeds' Horizon.
	Reference Result
	// Seeds are the runs, in seed order.
	Seeds []Result
}

// Failed counts the seeds that failed.
func (r *Report) Failed() int {
	n := 0
	for _, s := range r.Seeds {
		if !s.OK {
			n++
		}
	}
	return n
}

// Check runs prog's fault-free run (seed 0, no faults), then one run per
// seed with cfg's hosts and faults, parallel on up to procs goroutines
// (0: GOMAXPROCS), each run single-threaded. A seed fails if its run
// fails or its result differs from the fault-free run's (a job lost with
// its crashed master, Result.LostWithMaster, is the documented outcome,
// not a failure). Horizon, unless
// cfg sets it, is the fault-free run's length, so that a seed's run
// depends only on the seed, the hosts, the faults and the program.
func Check(cfg Config, seeds []uint64, prog Program, procs int) (*Report, error) {
	root, err := prog()
	if err != nil {
		return nil, err
	}
	ref := Run(Config{Seed: 0, Hosts: cfg.Hosts, MaxTime: cfg.MaxTime, MaxEvents: cfg.MaxEvents}, root)
	if !ref.OK {
		return &Report{Reference: ref}, fmt.Errorf("the fault-free run failed: %w", ref.Err)
	}
	if cfg.Horizon <= 0 {
		cfg.Horizon = horizon(ref)
	}
	if procs <= 0 {
		procs = runtime.GOMAXPROCS(0)
	}
	rep := &Report{Reference: ref, Seeds: make([]Result, len(seeds))}
	var wg sync.WaitGroup
	next := make(chan int)
	var buildErr error
	var mu sync.Mutex
	for range min(procs, len(seeds)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				c := cfg
				c.Seed = seeds[i]
				root, err := prog()
				if err != nil {
					mu.Lock()
					buildErr = err
					mu.Unlock()
					continue
				}
				res := Run(c, root)
				if res.OK && !res.LostWithMaster && res.Result != ref.Result {
					res.OK = false
					res.Err = fmt.Errorf("%w: %s, want %s", ErrWrongResult, res.Result, ref.Result)
				}
				rep.Seeds[i] = res
			}
		}()
	}
	for i := range seeds {
		next <- i
	}
	close(next)
	wg.Wait()
	return rep, buildErr
}

// Shrink looks for fewer kinds of fault that still fail seed cfg.Seed of
// prog, which failed under cfg: it drops the kinds of cfg.Faults one at a
// time, in FaultNames order, keeping each drop under which the seed
// still fails (any failure: a seed run under other faults is another
// run). ref is the fault-free run Check compared with; a zero
// cfg.Horizon is taken from it as Check takes it. It returns the
// smallest set found and that run's result; the seed replays under it as
// under any other faults.
func Shrink(cfg Config, prog Program, ref Result) (Config, Result, error) {
	if cfg.Horizon <= 0 {
		cfg.Horizon = horizon(ref)
	}
	run := func(c Config) (Result, error) {
		root, err := prog()
		if err != nil {
			return Result{}, err
		}
		r := Run(c, root)
		if r.OK && !r.LostWithMaster && r.Result != ref.Result {
			r.OK = false
			r.Err = fmt.Errorf("%w: %s, want %s", ErrWrongResult, r.Result, ref.Result)
		}
		return r, nil
	}
	best, err := run(cfg)
	if err != nil || best.OK {
		return cfg, best, err
	}
	for _, n := range faultNames {
		if cfg.Faults&n.f == 0 {
			continue
		}
		c := cfg
		c.Faults &^= n.f
		r, err := run(c)
		if err != nil {
			return cfg, best, err
		}
		if !r.OK {
			cfg, best = c, r
		}
	}
	return cfg, best, nil
}

// horizon is the stretch of virtual time Check places faults in: the
// fault-free run's length.
func horizon(ref Result) time.Duration { return max(ref.Time, time.Millisecond) }
