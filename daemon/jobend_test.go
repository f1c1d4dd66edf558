package daemon

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/task"
)

// spawnWaiters spawns n tasks that wait for a message that never comes,
// placed round-robin over the machine's hosts, and hands the caller's TID
// and theirs to spawned.
func spawnWaiters(t *testing.T, c *task.Ctx, n int, spawned chan<- []task.TID) error {
	waiter := fn(t, func(c *task.Ctx, _ int) error {
		_, err := c.Recv(task.AnyTask, 1, nil, task.Safe())
		return err
	})
	kids, err := c.Spawn(waiter, n)
	if err != nil {
		return err
	}
	spawned <- append([]task.TID{c.MyTID()}, kids...)
	return nil
}

// waitingRoot is a root task that spawns n waiters (spawnWaiters) and
// then waits, as they do, for a message that never comes.
func waitingRoot(t *testing.T, n int, spawned chan<- []task.TID) task.Task {
	return fn(t, func(c *task.Ctx, _ int) error {
		if err := spawnWaiters(t, c, n, spawned); err != nil {
			return err
		}
		_, err := c.Recv(task.AnyTask, 1, nil, task.Safe())
		return err
	})
}

// jobOf returns the job of task tid.
func jobOf(t *testing.T, m *Daemon, tid task.TID) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts, err := m.AllTasks(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range ts {
		if ti.TID == tid {
			return ti.Job
		}
	}
	t.Fatalf("%v is not running", tid)
	return 0
}

// waitJobGone polls the machine's task list until none of tids runs,
// failing after a deadline (the hosts talk over real sockets).
func waitJobGone(t *testing.T, m *Daemon, tids []task.TID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		ts, err := m.AllTasks(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		state := map[task.TID]TaskState{}
		for _, ti := range ts {
			state[ti.TID] = ti.State
		}
		left := 0
		for _, tid := range tids {
			if state[tid] == Running {
				left++
			}
		}
		if left == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of the job's tasks %v still run: %v", left, tids, state)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestJobEndsWhole: a job's tasks end with it — when its root fails after
// spawning workers on every host, when KillJob names it, and when the
// command that ran it goes away (dpvm run interrupted); KillJob of a job
// that does not exist fails with ErrNoJob.
func TestJobEndsWhole(t *testing.T) {
	vm := startVM(t, 3, Config{})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	spawned := make(chan []task.TID, 1)

	t.Run("root fails", func(t *testing.T) {
		_, root, err := m.StartJob(ctx, fn(t, func(c *task.Ctx, _ int) error {
			if err := spawnWaiters(t, c, 3, spawned); err != nil {
				return err
			}
			return errors.New("the root fails")
		}), JobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tids := <-spawned
		if info, err := m.Wait(ctx, root); err != nil || info.Status == 0 {
			t.Fatalf("root: %+v %v", info, err)
		}
		waitJobGone(t, m, tids)
	})

	t.Run("kill job", func(t *testing.T) {
		job, _, err := m.StartJob(ctx, waitingRoot(t, 3, spawned), JobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tids := <-spawned
		n, err := m.KillJob(ctx, job)
		if err != nil || n != len(tids) {
			t.Fatalf("KillJob: %d killed, %v; the job had %d tasks", n, err, len(tids))
		}
		waitJobGone(t, m, tids)
		if _, err := m.KillJob(ctx, job+100); !errors.Is(err, ErrNoJob) {
			t.Fatalf("KillJob of no job: %v", err)
		}
	})

	t.Run("command goes away", func(t *testing.T) {
		cl := adminClient(t, ctx, vm)
		typ, state, err := task.EncodeState(waitingRoot(t, 3, spawned))
		if err != nil {
			t.Fatal(err)
		}
		runCtx, interrupt := context.WithCancel(ctx)
		ran := make(chan error, 1)
		go func() {
			_, err := cl.Run(runCtx, typ, state, &syncBuffer{})
			ran <- err
		}()
		tids := <-spawned
		if job := jobOf(t, m, tids[0]); job == 0 {
			t.Fatalf("root %v has no job", tids[0])
		}
		interrupt() // Ctrl-C on dpvm run
		if err := <-ran; !errors.Is(err, context.Canceled) {
			t.Errorf("interrupted run: %v", err)
		}
		waitJobGone(t, m, tids)
	})
}

// TestCheckpointRefusedOnceJobOver: between its root's end and the
// master forgetting it, a job's periodic checkpoint may still tick; if a
// host leaves then (the embedded machine stopping), the round must be
// refused as the job's end, not fail as tasks lost with a host.
func TestCheckpointRefusedOnceJobOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vm := startMemVMWith(t, 2, nil, Config{SharedDir: t.TempDir()})
		m := vm.Master()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		spawned := make(chan []task.TID, 1)
		job, _, err := m.StartJob(ctx, waitingRoot(t, 2, spawned), JobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		<-spawned
		js := m.reg.get(job)
		if js == nil {
			t.Fatalf("job %d is not registered", job)
		}
		if on := m.reg.hostsOf(job); len(on) != 2 {
			t.Fatalf("job %d runs on %v, want both hosts", job, on)
		}
		js.ended.Do(func() { close(js.done) }) // endJob's first half
		if err := vm.Daemons[1].Halt(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the master has handled h2's leaving
		if hs := m.Hosts(); len(hs) != 1 {
			t.Fatalf("h2 still a member after it left: %+v", hs)
		}
		if _, err := m.checkpointJob(ctx, js, ""); !errors.Is(err, ErrNoJob) {
			t.Errorf("checkpoint of an ended job after a host left: %v, want ErrNoJob", err)
		}
		m.forgetJob(js)
	})
}

// fnKillTask is fnTask for a root that asks that its job's other tasks be
// killed when it returns (task.JobEnder).
type fnKillTask struct{ fnTask }

func init() { task.Register("daemon.test.fnkill", &fnKillTask{}) }

// JobEnd asks for the job's other tasks to be killed.
func (*fnKillTask) JobEnd() task.JobEnd { return task.KillTasks }

// runJobAsync runs root as an embedded job on m's machine, handing the
// root's final state and the run's result (exitError) to the channel.
type jobResult struct {
	info TaskInfo
	err  error
}

func runJobAsync(ctx context.Context, m *Daemon, root task.Task) <-chan jobResult {
	ch := make(chan jobResult, 1)
	go func() {
		info, err := m.runEmbeddedJob(ctx, root, JobOptions{}, nil)
		if err == nil {
			err = exitError(info)
		}
		ch <- jobResult{info, err}
	}()
	return ch
}

// TestJobWaitsForTasks: a root that returns while its children run does
// not end the job: the job ends once they have, its result is the
// root's, and a child that failed fails the run, named with its status
// (ErrJobTasks, an ExitError of status 1); with none failed the run
// succeeds.
func TestJobWaitsForTasks(t *testing.T) {
	for _, failing := range []bool{false, true} {
		t.Run(map[bool]string{false: "children succeed", true: "a child fails"}[failing], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				vm := startMemVMWith(t, 2, nil, Config{})
				m := vm.Master()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				release := make(chan struct{})
				child := fn(t, func(c *task.Ctx, arg int) error {
					<-release
					if arg == 1 {
						return &task.ExitError{Status: 3}
					}
					return nil
				})
				kids := make(chan []task.TID, 1)
				root := fn(t, func(c *task.Ctx, _ int) error {
					var tids []task.TID
					for arg := range 2 {
						k := *child
						if failing {
							k.Arg = arg
						}
						got, err := c.Spawn(&k, 1)
						if err != nil {
							return err
						}
						tids = append(tids, got...)
					}
					if err := c.SetResult("root's"); err != nil {
						return err
					}
					kids <- tids
					return nil
				})
				ran := runJobAsync(ctx, m, root)
				tids := <-kids
				synctest.Wait() // the root has returned; its children wait
				select {
				case r := <-ran:
					t.Fatalf("the job ended while its children ran: %+v %v", r.info, r.err)
				default:
				}
				close(release)
				r := <-ran
				var s string
				if err := r.info.Result.Decode(&s); err != nil || s != "root's" {
					t.Errorf("job's result %q (%v), want the root's", s, err)
				}
				if r.info.State != Exited || r.info.Status != 0 {
					t.Errorf("root ended %v status %d", r.info.State, r.info.Status)
				}
				if !failing {
					if r.err != nil || len(r.info.JobFailures) != 0 {
						t.Fatalf("run: %v, failures %+v", r.err, r.info.JobFailures)
					}
					return
				}
				var ee *task.ExitError
				if !errors.Is(r.err, ErrJobTasks) || !errors.As(r.err, &ee) || ee.Status != 1 {
					t.Fatalf("run with a failed child: %v, want ErrJobTasks and exit status 1", r.err)
				}
				if len(r.info.JobFailures) != 1 || r.info.JobFailures[0].TID != tids[1] || r.info.JobFailures[0].Status != 3 {
					t.Fatalf("failures %+v, want %v with status 3", r.info.JobFailures, tids[1])
				}
				if want := tids[1].String() + " (daemon.test.fn) exited with status 3"; !strings.Contains(r.err.Error(), want) {
					t.Errorf("run's error %q does not say %q", r.err, want)
				}
			})
		})
	}
}

// TestJobKillsOnReturn: a root that asks for it (task.JobEnder) has its
// job's remaining tasks killed when it returns, on every host; the run
// names them as killed with the job and fails. A root that fails has
// its job's tasks killed and named too.
func TestJobKillsOnReturn(t *testing.T) {
	for _, name := range []string{"root asks", "root fails"} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				vm := startMemVMWith(t, 2, nil, Config{})
				m := vm.Master()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				spawned := make(chan []task.TID, 1)
				body := func(c *task.Ctx, _ int) error {
					if err := spawnWaiters(t, c, 3, spawned); err != nil {
						return err
					}
					if name == "root fails" {
						return &task.ExitError{Status: 4}
					}
					return nil
				}
				var root task.Task = &fnKillTask{*fn(t, body)}
				if name == "root fails" {
					root = fn(t, body)
				}
				ran := runJobAsync(ctx, m, root)
				tids := <-spawned
				r := <-ran
				var ee *task.ExitError
				if !errors.Is(r.err, ErrJobTasks) || !errors.As(r.err, &ee) {
					t.Fatalf("run: %v, want ErrJobTasks and an exit status", r.err)
				}
				if want := map[string]int{"root asks": 1, "root fails": 4}[name]; ee.Status != want {
					t.Errorf("exit status %d, want %d", ee.Status, want)
				}
				var got []task.TID
				for _, f := range r.info.JobFailures {
					if f.State != Killed {
						t.Errorf("%v ended %v, want killed", f.TID, f.State)
					}
					if !strings.Contains(r.err.Error(), f.TID.String()+" (daemon.test.fn) killed with its job") {
						t.Errorf("run's error %q does not name %v as killed", r.err, f.TID)
					}
					got = append(got, f.TID)
				}
				want := slices.Clone(tids[1:])
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("reported killed %v, want the children %v", got, want)
				}
				waitJobGone(t, m, tids)
			})
		})
	}
}

// TestClientRunReportsJobFailures: the tasks killed at a job's end reach
// the command that ran it (dpvm run --master), in the root's final state,
// and ExitError names them.
func TestClientRunReportsJobFailures(t *testing.T) {
	vm := startVM(t, 2, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := adminClient(t, ctx, vm)
	spawned := make(chan []task.TID, 1)
	typ, state, err := task.EncodeState(&fnKillTask{*fn(t, func(c *task.Ctx, _ int) error {
		return spawnWaiters(t, c, 2, spawned)
	})})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cl.RunJob(ctx, typ, state, JobOptions{}, &syncBuffer{})
	if err != nil {
		t.Fatal(err)
	}
	tids := <-spawned
	if info.TID != tids[0] || info.State != Exited || info.Status != 0 {
		t.Errorf("root's final state %+v", info)
	}
	if len(info.JobFailures) != 2 {
		t.Fatalf("job failures %+v, want the 2 children killed", info.JobFailures)
	}
	err = ExitError(info)
	if !errors.Is(err, ErrJobTasks) {
		t.Fatalf("ExitError: %v, want ErrJobTasks", err)
	}
	for _, k := range tids[1:] {
		if !strings.Contains(err.Error(), k.String()+" (daemon.test.fn) killed with its job") {
			t.Errorf("ExitError %q does not name %v", err, k)
		}
	}
}

// TestJobTaskKilledByItsJobIsNoFailure: a task that a task of its job
// kills (PVM's timing kills its slave) ended on purpose: the run
// succeeds.
func TestJobTaskKilledByItsJobIsNoFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vm := startMemVMWith(t, 2, nil, Config{})
		m := vm.Master()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		spawned := make(chan []task.TID, 1)
		root := fn(t, func(c *task.Ctx, _ int) error {
			if err := spawnWaiters(t, c, 2, spawned); err != nil {
				return err
			}
			for _, k := range (<-spawned)[1:] {
				if err := c.Kill(k); err != nil {
					return err
				}
			}
			return nil
		})
		r := <-runJobAsync(ctx, m, root)
		if r.err != nil || len(r.info.JobFailures) != 0 {
			t.Fatalf("run: %v, failures %+v; want success", r.err, r.info.JobFailures)
		}
	})
}

// restartKillRoot is a root whose choice of how its job ends is in its
// state (Kill): it spawns a child that waits for a message that never
// comes, then waits at safe points until restartGo is set, and returns.
type restartKillRoot struct {
	Kill    bool
	Spawned bool
}

// restartGo lets restartKillRoot return.
var restartGo atomic.Bool

func init() { task.Register("daemon.test.restartkill", &restartKillRoot{}) }

// JobEnd kills the job's other tasks when Kill is set.
func (r *restartKillRoot) JobEnd() task.JobEnd {
	if r.Kill {
		return task.KillTasks
	}
	return task.WaitForTasks
}

func (r *restartKillRoot) Run(c *task.Ctx) error {
	if !r.Spawned {
		waiter := &fnTask{Fn: restartWaiter}
		if _, err := c.Spawn(waiter, 1); err != nil {
			return err
		}
		r.Spawned = true
	}
	for !restartGo.Load() {
		if err := c.SafePoint(); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// restartWaiter is the fn key of restartKillRoot's child.
var restartWaiter = func() string {
	key := "restart-waiter"
	fnMu.Lock()
	fns[key] = func(c *task.Ctx, _ int) error {
		_, err := c.Recv(task.AnyTask, 1, nil, task.Safe())
		return err
	}
	fnMu.Unlock()
	return key
}()

// TestRestartKeepsHowTheJobEnds: a job restarted from a checkpoint ends as
// its root's checkpointed state asks (task.JobEnder): a root that asked
// for its job's other tasks to be killed when it returns has them killed,
// named, after the restart too. Before, the restarted job asked the
// root type's zero value, which waits, and the job never ended.
func TestRestartKeepsHowTheJobEnds(t *testing.T) {
	shared := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		restartGo.Store(false)
		t.Cleanup(func() { restartGo.Store(true) })
		vm := startMemVMWith(t, 2, nil, Config{SharedDir: shared})
		m := vm.Master()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		job, root, err := m.StartJob(ctx, &restartKillRoot{Kill: true}, JobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the root spawned its child and waits at its safe points
		ck, err := m.CheckpointJob(ctx, job, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.KillJob(ctx, job); err != nil {
			t.Fatal(err)
		}

		vm2 := startMemVMWith(t, 2, nil, Config{SharedDir: shared, Secret: vm.Cluster.Secret})
		m2 := vm2.Master()
		js2, _, err := m2.RestartJob(ctx, filepath.Dir(ck.Dir), JobOptions{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if js2.root != root {
			t.Fatalf("restarted root %v, want %v", js2.root, root)
		}
		restartGo.Store(true)
		info, err := m2.WaitJob(ctx, js2.id)
		if err != nil {
			t.Fatalf("the restarted job: %v", err)
		}
		if len(info.JobFailures) != 1 || info.JobFailures[0].State != Killed {
			t.Fatalf("the restarted job's failures %+v, want its child killed with it", info.JobFailures)
		}
		if err := exitError(info); !errors.Is(err, ErrJobTasks) || !strings.Contains(err.Error(), "killed with its job") {
			t.Errorf("the run's result %v, want the child named as killed with its job", err)
		}
	})
}

// TestSpawnOneJobEndsAsItsRootAsks: a job spawned as one (dpvm spawn -n)
// ends as its root's state asks (task.JobEnder), as a run's does: a root
// with Kill set has its child killed when it returns, and the job's end
// names it. Before, the job asked the type's zero value and waited for
// the child for good.
func TestSpawnOneJobEndsAsItsRootAsks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		restartGo.Store(false) // the root waits until the job is waited for
		t.Cleanup(func() { restartGo.Store(true) })
		vm := startMemVMWith(t, 2, nil, Config{})
		m := vm.Master()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		req := task.SpawnRequest{Type: "daemon.test.restartkill", State: mustState(t, &restartKillRoot{Kill: true}), Count: 1}
		tids, err := m.spawnOneJob(ctx, req, JobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ts, err := m.AllTasks(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		var job uint64
		for _, ti := range ts {
			if ti.TID == tids[0] {
				job = ti.Job
			}
		}
		if job == 0 {
			t.Fatalf("the root %v is in no job: %+v", tids[0], ts)
		}
		type waited struct {
			info TaskInfo
			err  error
		}
		done := make(chan waited, 1)
		go func() {
			info, err := m.WaitJob(ctx, job)
			done <- waited{info, err}
		}()
		synctest.Wait() // the job is waited for before its root returns
		restartGo.Store(true)
		w := <-done
		info, err := w.info, w.err
		if err != nil {
			t.Fatalf("the job: %v", err)
		}
		if len(info.JobFailures) != 1 || info.JobFailures[0].State != Killed {
			t.Fatalf("the job's failures %+v, want the root's child killed with it", info.JobFailures)
		}
	})
}
