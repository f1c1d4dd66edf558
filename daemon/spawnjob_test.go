package daemon

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// groupMate joins the group "mates" of its job, makes it a communicator
// once Size tasks have joined, and adds up one per member: it ends with
// status 3 unless the group has Size members. Tasks of different jobs
// would each have a group "mates" of their own and wait forever.
type groupMate struct {
	Size int
	M    task.Comm
}

func init() { task.Register("daemon.test.groupmate", &groupMate{}) }

func (g *groupMate) Run(c *task.Ctx) error {
	if _, err := c.Join("mates"); err != nil {
		return err
	}
	if err := c.GroupComm("mates", g.Size, &g.M); err != nil {
		return err
	}
	n := []int64{1}
	if err := task.AllReduce(c, &g.M, task.Sum[int64], n); err != nil {
		return err
	}
	if g.M.Size() != g.Size || n[0] != int64(g.Size) {
		return task.Exit(3)
	}
	return nil
}

// TestSpawnOneJob: 'dpvm spawn -n 3' starts the three tasks as one job, as
// PVM's console does, placed over two hosts: they meet in the job's group,
// and every one ends in the same job, the first its root.
func TestSpawnOneJob(t *testing.T) {
	vm := startVM(t, 2, Config{})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, state, err := task.EncodeState(&groupMate{Size: 3})
	if err != nil {
		t.Fatal(err)
	}
	req := task.SpawnRequest{Type: "daemon.test.groupmate", State: state, Count: 3}
	tids, err := m.spawnOneJob(ctx, req, JobOptions{})
	if err != nil || len(tids) != 3 {
		t.Fatalf("spawn -n 3 = %v, %v", tids, err)
	}
	var job uint64
	for i, tid := range tids {
		info, err := m.Wait(ctx, tid)
		if err != nil {
			t.Fatal(err)
		}
		if info.State != Exited || info.Status != 0 {
			t.Errorf("task %d %v ended %v with status %d (%s)", i, tid, info.State, info.Status, info.Err)
		}
		if i == 0 {
			job = info.Job
		}
		if info.Job == 0 || info.Job != job {
			t.Errorf("task %d %v in job %d, the first in %d", i, tid, info.Job, job)
		}
	}
	req.Count = 0
	if _, err := m.spawnOneJob(ctx, req, JobOptions{}); err == nil {
		t.Error("spawn -n 0 succeeded")
	}
}

// TestSpawnOneJobCountsAsOneJobOfItsCaller: a user's 'dpvm spawn -n 3' is
// one job, theirs, counted once against their quota of jobs: its
// reservation is given back once the job is counted, and a second such
// spawn past the quota is refused and starts no job.
func TestSpawnOneJobCountsAsOneJobOfItsCaller(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vm, alice, _, _, _ := memUsers(t, 2, Config{MaxUserTasks: 8, MaxUserJobs: 1, MaxJobTasks: 8})
	m := vm.Master()
	typ, state := waitingType(t)
	tids, err := alice.SpawnOneJob(ctx, typ, state, 3, "", JobOptions{})
	if err != nil || len(tids) != 3 {
		t.Fatalf("alice spawns 3 tasks as one job: %v, %v", tids, err)
	}
	job, err := m.taskJob(ctx, tids[0])
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := m.owners.job(job); !ok || w.name != "alice" {
		t.Errorf("job %d of alice's spawn owned by %+v (%v), want alice", job, w, ok)
	}
	m.owners.mu.Lock()
	jobs, pend := len(m.owners.userJobs["alice"]), m.owners.pendJobs["alice"]
	m.owners.mu.Unlock()
	if jobs != 1 || pend != 0 {
		t.Errorf("alice holds %d jobs with %d reserved, want 1 and 0", jobs, pend)
	}
	if _, err := alice.SpawnOneJob(ctx, typ, state, 2, "", JobOptions{}); !errors.Is(err, ErrLimit) {
		t.Fatalf("alice spawned a second job, quota 1: %v", err)
	}
	if n := jobCount(m); n != 1 {
		t.Fatalf("%d jobs after a refused spawn, want 1", n)
	}
}
