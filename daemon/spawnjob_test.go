package daemon

import (
	"context"
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
