package daemon

import (
	"context"
	"errors"
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
		cl, err := Dial(ctx, m.Addr(), vm.Cluster.Admin)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
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
