package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var simSurviveSeeds = flag.Int("survive-seeds", 3, "how many seeds TestSimSurvive runs of each case")

// TestSimSurvive runs the losses a checkpointed job must survive on the
// simulation's machine: four daemons on transport.Mem in a synctest
// bubble, frames lost, swapped and delayed and connections cut as the
// seed draws. simRing runs with a checkpoint every 100 ms; once one is
// complete:
//
//   - root: the root is moved to a host, which crashes;
//   - worker: a host with workers of the job (the root stays on the
//     master's host) crashes;
//   - checkpoint: a host with tasks of the job crashes at a step of the
//     next checkpoint round the seed draws (the master's "ckpt:pause",
//     "ckpt:quiet", "ckpt:write" or "ckpt:commit" fault point);
//   - rollback: a host with tasks of the job crashes, and a second one
//     crashes as the master is about to restore the job (the
//     "ckpt:restore" fault point), so that the rollback loses a host;
//   - move-origin, move-destination: the root is moved to a host, then
//     moved on to another, and the origin crashes once the checkpoint has
//     left it ("migrate:sent"), or the destination once it has restored
//     the task ("migrate:restored").
//
// Each job must print the fault-free run's sum (after a rollback in the
// cases but the moves'), and no task of it may run on two hosts
// meanwhile (simJob).
// The master's own loss is TestSim's last phase (a master recovered) and
// TestMasterLossOfProcesses's (the job lost with it).
func TestSimSurvive(t *testing.T) {
	want := simReference(t)
	for _, scenario := range []string{"root", "worker", "checkpoint", "rollback", "move-origin", "move-destination"} {
		hit := 0
		for seed := range *simSurviveSeeds {
			t.Run(fmt.Sprintf("%s/%d", scenario, seed), func(t *testing.T) {
				dir := simDir(t)
				synctest.Test(t, func(t *testing.T) {
					if simSurvive(t, scenario, uint64(seed), dir, want) {
						hit++
					}
				})
			})
		}
		if hit == 0 && !t.Failed() {
			t.Errorf("%s: no seed of %d lost its host where it should", scenario, *simSurviveSeeds)
		}
		t.Logf("%s: %d of %d seeds lost the host where the case says", scenario, hit, *simSurviveSeeds)
	}
}

// simSurvive runs one case of TestSimSurvive under seed and reports
// whether the host was lost where the case says: a move can fail under
// the faults before its fault point, or the job end before it.
func simSurvive(t *testing.T, scenario string, seed uint64, dir, want string) bool {
	f := &faults{seed: seed, drop: 100, hold: 100, delay: 300, cut: 1000}
	out := &syncBuffer{}
	cfg := simCfg(dir, out)
	var vm *LocalVM
	var point atomic.Value // the fault point armed: a string
	point.Store("")
	var victim atomic.Pointer[Daemon]
	dead := map[*Daemon]bool{}
	cfg.FaultHook = func(p string) {
		f.admitPause(p)
		if p != "" && point.CompareAndSwap(p, "") {
			victim.Load().crash()
		}
	}
	vm = startMemVM(t, 4, f, cfg)
	m := vm.Master()
	r := seed*0x9e3779b97f4a7c15 + 11
	next := func(n uint64) uint64 {
		r = r*6364136223846793005 + 1442695040888963407
		return (r >> 33) % n
	}
	hosts := vm.Daemons[1:]
	a := hosts[next(uint64(len(hosts)))]
	var b *Daemon
	for b == nil || b == a {
		b = hosts[next(uint64(len(hosts)))]
	}
	live := func() []*Daemon {
		var ds []*Daemon
		for _, d := range vm.Daemons {
			if !dead[d] && !(victim.Load() == d && point.Load() == "") {
				ds = append(ds, d)
			}
		}
		return ds
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	moved := make(chan error, 1)
	step := "" // the checkpoint case's fault point
	got, rb := simJob(t, m, out, live, func() {
		js, err := m.job(1)
		if err != nil {
			t.Fatal(err)
		}
		root := js.root
		// The root starts on the master's host, which no case crashes:
		// but for the worker, checkpoint and rollback cases, it moves to
		// a first (a move aborts when the task reaches no safe point
		// within the move timeout: it is tried again).
		for try := 1; scenario != "rollback" && scenario != "worker" && scenario != "checkpoint"; try++ {
			_, err := m.Migrate(ctx, root, a.Name(), Direct)
			if err == nil {
				break
			}
			if !errors.Is(err, ErrAborted) || try == 20 {
				t.Fatalf("move the root to %s, try %d: %v", a.Name(), try, err)
			}
		}
		switch scenario {
		case "root", "worker":
			dead[a] = true
			a.crash()
		case "checkpoint":
			steps := []string{"ckpt:pause", "ckpt:quiet", "ckpt:write", "ckpt:commit"}
			step = steps[next(uint64(len(steps)))]
			victim.Store(a)
			point.Store(step)
		case "rollback":
			victim.Store(b)
			point.Store("ckpt:restore")
			dead[a] = true
			a.crash()
		case "move-origin", "move-destination":
			victim.Store(a)
			at := "migrate:sent"
			if scenario == "move-destination" {
				victim.Store(b)
				at = "migrate:restored"
			}
			point.Store(at)
			go func() {
				_, err := m.Migrate(ctx, root, b.Name(), Direct)
				moved <- err
			}()
		}
	})
	if got != want {
		t.Fatalf("%s: the job printed sum %s, its fault-free run %s", scenario, got, want)
	}
	// A move's loss may take no task of the job with it: the origin's
	// copy resumes when the destination is lost before the commit, and
	// the origin may hold nothing else of the job.
	reached := point.Load() == ""
	if rb == 0 && (scenario == "root" || scenario == "worker" || scenario == "rollback" || scenario == "checkpoint" && reached) {
		t.Fatalf("%s: the job did not roll back", scenario)
	}
	if scenario == "checkpoint" {
		// The job may end before its next round reaches the step.
		t.Logf("%s: %s lost at %s: %v; %d rollbacks", scenario, a.Name(), step, reached, rb)
	} else if scenario == "move-origin" || scenario == "move-destination" {
		err := <-moved
		t.Logf("%s: the move of the root from %s to %s: %v; %d rollbacks; host lost at its point: %v", scenario, a.Name(), b.Name(), err, rb, reached)
	} else if !reached {
		t.Fatalf("%s: the fault point %s was never reached", scenario, point.Load())
	}
	return reached
}
