package daemon

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// safeBarrierGroup is the group of TestBarrierSafeSurvivesMoveAndCheckpoint.
const safeBarrierGroup = "safe-barrier"

// barrierMover joins safeBarrierGroup, waits in its barrier at a safe
// point, tells its parent the host it passed on, then meets the others in
// a second, plain barrier.
type barrierMover struct {
	Joined bool
	Passed bool
}

func init() { task.Register("daemon.test.barriermover", &barrierMover{}) }

func (w *barrierMover) Run(c *task.Ctx) error {
	if !w.Joined {
		if _, err := c.Join(safeBarrierGroup); err != nil {
			return err
		}
		w.Joined = true
	}
	if !w.Passed {
		if err := c.Barrier(safeBarrierGroup, 4, task.Safe()); err != nil {
			return err
		}
		w.Passed = true
		if err := c.Send(c.Parent(), 2, c.HostName()); err != nil {
			return err
		}
	}
	return c.Barrier(safeBarrierGroup, 4)
}

// barrierArrivals is how many members of the job's safeBarrierGroup have
// arrived at its open barrier, by the master's group server.
func barrierArrivals(m *Daemon, job uint64) int {
	return m.groups.arrivals(jobGroup(job, safeBarrierGroup))
}

// TestBarrierSafeSurvivesMoveAndCheckpoint: three workers wait in a group
// barrier with Safe (one on the master, whose group server it uses
// directly, two on another host) for the root, which arrives last. Job
// checkpoints are taken while they wait and two of them are moved to a
// third host: every round and move succeeds, the barrier stays open with
// exactly the three workers' arrivals (none counted twice, none lost),
// and when the root arrives it completes once for everyone: each worker
// passes it once, none before the root arrived, the moved ones on their
// new host, and a second barrier of the same group then finds nothing
// left over.
func TestBarrierSafeSurvivesMoveAndCheckpoint(t *testing.T) {
	vm := startVM(t, 3, Config{SharedDir: t.TempDir(), MoveTimeout: 5 * time.Second})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ready := make(chan []task.TID, 1)
	passed := make(chan []string, 1)
	root := fn(t, func(c *task.Ctx, _ int) error {
		if _, err := c.Join(safeBarrierGroup); err != nil {
			return err
		}
		var kids []task.TID
		for _, h := range []string{"h1", "h2", "h2"} {
			k, err := c.Spawn(&barrierMover{}, 1, task.OnHost(h))
			if err != nil {
				return err
			}
			kids = append(kids, k...)
		}
		ready <- kids
		if _, err := c.Recv(task.AnyTask, 9, nil, task.Safe()); err != nil {
			return err
		}
		if st, ok := c.Probe(task.AnyTask, 2); ok {
			return fmt.Errorf("%v passed the barrier before the root arrived", st.From)
		}
		if err := c.Barrier(safeBarrierGroup, 4); err != nil {
			return err
		}
		seen := map[task.TID]bool{}
		var hosts []string
		for range kids {
			var h string
			st, err := c.Recv(task.AnyTask, 2, &h)
			if err != nil {
				return err
			}
			if seen[st.From] {
				return fmt.Errorf("%v passed the barrier twice", st.From)
			}
			seen[st.From] = true
			hosts = append(hosts, st.From.String()+"@"+h)
		}
		if err := c.Barrier(safeBarrierGroup, 4); err != nil {
			return fmt.Errorf("second barrier: %w", err)
		}
		passed <- hosts
		return nil
	})
	job, rootTID, err := m.StartJob(ctx, root, JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var kids []task.TID
	select {
	case kids = <-ready:
	case <-ctx.Done():
		t.Fatal("the root never spawned its workers")
	}
	allWaiting := func(when string) {
		t.Helper()
		for barrierArrivals(m, job) != 3 {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: %d of 3 workers in the barrier", when, barrierArrivals(m, job))
			case <-time.After(time.Millisecond):
			}
		}
	}
	allWaiting("before the first checkpoint")
	if _, err := m.CheckpointJob(ctx, job, ""); err != nil {
		t.Fatalf("checkpoint with the workers in the barrier: %v", err)
	}
	for _, w := range kids[:2] {
		if _, err := m.Migrate(ctx, w, "h3", Direct); err != nil {
			t.Fatalf("move of %v, waiting in the barrier: %v", w, err)
		}
	}
	if _, err := m.CheckpointJob(ctx, job, ""); err != nil {
		t.Fatalf("checkpoint after the moves: %v", err)
	}
	allWaiting("after the moves")
	tell, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error { return c.Send(rootTID, 9, nil) }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Wait(ctx, tell); err != nil {
		t.Fatal(err)
	}
	info, err := m.WaitJob(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if err := ExitError(info); err != nil {
		t.Fatal(err)
	}
	var got []string
	select {
	case got = <-passed:
	default:
		t.Fatal("the root ended without reporting")
	}
	want := []string{kids[0].String() + "@h3", kids[1].String() + "@h3", kids[2].String() + "@h2"}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("workers passed the barrier as %v, want %v", got, want)
	}
}
