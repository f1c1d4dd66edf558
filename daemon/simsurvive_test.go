package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/ckpt/jobset"
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
//
// The master's loss, with its host placing no tasks (master-no-tasks)
// and placing them (master), is simSurviveMaster's.
func TestSimSurvive(t *testing.T) {
	want := simReference(t)
	for _, scenario := range []string{"root", "worker", "checkpoint", "rollback", "move-origin", "move-destination", "master", "master-no-tasks"} {
		ran, hit := 0, 0 // seeds run (not left out by -run), and those that lost the host
		for seed := range *simSurviveSeeds {
			t.Run(fmt.Sprintf("%s/%d", scenario, seed), func(t *testing.T) {
				ran++
				dir := simDir(t)
				synctest.Test(t, func(t *testing.T) {
					reached := false
					if strings.HasPrefix(scenario, "master") {
						reached = simSurviveMaster(t, scenario == "master-no-tasks", uint64(seed), dir, want)
					} else {
						reached = simSurvive(t, scenario, uint64(seed), dir, want)
					}
					if reached {
						hit++
					}
				})
			})
		}
		if ran == 0 {
			continue
		}
		if hit == 0 && !t.Failed() {
			t.Errorf("%s: no seed of %d lost its host where it should", scenario, ran)
		}
		t.Logf("%s: %d of %d seeds lost the host where the case says", scenario, hit, ran)
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

// simSurviveMaster runs the master's loss under seed: a client runs
// simRing with a checkpoint every 100 ms (placed off the master's host
// with noTasks), and once a checkpoint is complete the master crashes and
// one is recovered at its address. A recovered master takes hosts and
// tasks back, not jobs: the client, connected again, must end with
// ErrJobLostWithMaster, having killed the job's tasks the hosts brought
// back (none may run on), and a restart of the job's directory must print
// the fault-free run's sum. It reports whether the master was lost while
// the job ran.
func simSurviveMaster(t *testing.T, noTasks bool, seed uint64, dir, want string) bool {
	f := &faults{seed: seed, drop: 100, hold: 100, delay: 300, cut: 1000}
	out := &syncBuffer{}
	cfg := simCfg(dir, out)
	cfg.FaultHook = f.admitPause
	cfg.MasterNoTasks = noTasks
	vm := startMemVM(t, 4, f, cfg)
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := DialNetwork(ctx, m.cfg.Network, m.Addr(), vm.Cluster.Admin)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ran := &syncBuffer{}
	done := make(chan runOutcome, 1)
	go func() {
		info, err := cl.RunJob(ctx, "daemon.test.ringroot", mustState(t, simRing()), JobOptions{CheckpointEvery: 100 * time.Millisecond, Keep: 2}, ran)
		done <- runOutcome{info, err}
	}()
	var js *jobState
	for js == nil || js.seq() == 0 {
		select {
		case r := <-done:
			t.Logf("the job ended before the master's loss: %+v %v", r.info, r.err)
			return false
		case <-time.After(10 * time.Millisecond):
		}
		js, _ = m.job(1)
	}
	name := js.name
	addr := m.Addr()
	m.crash()
	<-m.Done()
	mc := simCfg(dir, out)
	mc.Logger = m.cfg.Logger
	mc.Network, mc.Heartbeat, mc.RTO, mc.MasterNoTasks = m.cfg.Network, m.cfg.Heartbeat, m.cfg.RTO, noTasks
	mc.Listen, mc.Master, mc.Recover, mc.Credential, mc.Secret = addr, true, true, vm.Cluster.Master, vm.Cluster.Secret
	m2, err := Start(ctx, mc)
	if err != nil {
		t.Fatalf("recover the master: %v", err)
	}
	vm.Daemons[0] = m2 // the machine's cleanup halts it
	r := <-done
	if !errors.Is(r.err, ErrJobLostWithMaster) {
		t.Fatalf("the run after its master's loss: %+v %v, want ErrJobLostWithMaster", r.info, r.err)
	}
	if !strings.Contains(r.err.Error(), "dpvm restart DIR/job-"+name) {
		t.Fatalf("the run's error does not say how to restart the job: %v", r.err)
	}
	// The client killed what the hosts brought back: nothing of the job
	// runs on.
	if err := simCheckJob(vm.Daemons, 1, true); err != nil {
		t.Fatalf("after the run ended: %v", err)
	}
	jobDir, err := jobset.JobDir(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	out2 := &syncBuffer{}
	js2, _, err := m2.RestartJob(ctx, jobDir, JobOptions{}, func(uint64) io.Writer { return out2 })
	if err != nil {
		t.Fatalf("restart %s: %v", filepath.Base(jobDir), err)
	}
	if info, err := m2.waitJob(ctx, js2); err != nil || info.Status != 0 {
		t.Fatalf("the restarted job: %+v %v\n%s", info, err, out2)
	}
	sums := ringSum.FindAllStringSubmatch(out2.String(), -1)
	if len(sums) != 1 || sums[0][1] != want {
		t.Fatalf("the restarted job printed %q, want sum %s", out2, want)
	}
	t.Logf("master lost (no tasks: %v): %v", noTasks, r.err)
	return true
}
