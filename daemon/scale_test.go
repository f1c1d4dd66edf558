package daemon

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// sumRoot spawns N workers in one spawn, waits to be poked (tag 99), then
// gives each worker its index and adds up the squares they send back.
type sumRoot struct {
	N       int
	Workers []task.TID
	Poked   bool
	Sent    int
	Got     int
	Sum     int64
}

// sumWorker waits at a safe point for its index and sends its square.
type sumWorker struct{}

// sumSpawned hears the root's TID once its workers run.
var sumSpawned = make(chan task.TID, 1)

func init() {
	task.Register("daemon.test.sumroot", &sumRoot{})
	task.Register("daemon.test.sumworker", &sumWorker{})
}

func (r *sumRoot) Run(c *task.Ctx) error {
	if r.Workers == nil {
		tids, err := c.Spawn(&sumWorker{}, r.N)
		if err != nil {
			return err
		}
		r.Workers = tids
		sumSpawned <- c.MyTID()
	}
	if !r.Poked {
		if _, err := c.Recv(task.AnyTask, 99, nil, task.Safe()); err != nil {
			return err
		}
		r.Poked = true
	}
	for r.Sent < len(r.Workers) {
		if err := c.Send(r.Workers[r.Sent], 1, int64(r.Sent)); err != nil {
			return err
		}
		r.Sent++
	}
	for r.Got < len(r.Workers) {
		var sq int64
		if _, err := c.Recv(task.AnyTask, 2, &sq, task.Safe()); err != nil {
			return err
		}
		r.Sum += sq
		r.Got++
	}
	c.Printf("sum of %d squares: %d\n", r.N, r.Sum)
	return nil
}

func (w *sumWorker) Run(c *task.Ctx) error {
	var i int64
	if _, err := c.Recv(c.Parent(), 1, &i, task.Safe()); err != nil {
		return err
	}
	return c.Send(c.Parent(), 2, i*i)
}

// TestScaleVM checks correctness, not speed, on a virtual machine larger
// than the others: 64 daemons on the in-memory network and a job of 5000
// tasks spawned in one call, spread over every host. While its workers
// wait, some move (directly and through the shared directory) and the job
// is checkpointed; then every worker answers and the sum is exact.
func TestScaleVM(t *testing.T) {
	const hosts, workers = 64, 5000
	if testing.Short() {
		t.Skip("a virtual machine of 64 daemons and 5000 tasks")
	}
	shared := t.TempDir()
	out := &syncBuffer{}
	// Correctness, not speed: the checkpoint's write step (two move
	// timeouts) writes 5001 tasks under -race on a shared machine.
	vm := startMemVM(t, hosts, &faults{}, Config{SharedDir: shared, Output: out, DeadAfter: 10 * time.Minute, MoveTimeout: 2 * time.Minute})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if got := len(m.Hosts()); got != hosts {
		t.Fatalf("%d hosts, want %d", got, hosts)
	}
	job, root, err := m.StartJob(ctx, &sumRoot{N: workers}, JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := <-sumSpawned; got != root {
		t.Fatalf("spawned by %v, want the root %v", got, root)
	}
	ts, err := m.AllTasks(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	perHost := map[string]int{}
	var ws []TaskInfo
	for _, ti := range ts {
		if ti.Job == job && ti.TID != root {
			perHost[ti.Host]++
			ws = append(ws, ti)
		}
	}
	if len(ws) != workers || len(perHost) != hosts {
		t.Fatalf("%d workers on %d hosts, want %d on %d", len(ws), len(perHost), workers, hosts)
	}
	// Moves between hosts, none of them the master's.
	for i := range 8 {
		w := ws[i*len(ws)/8]
		to := fmt.Sprintf("h%d", 2+(i*7+int(w.TID.Host()))%(hosts-1))
		if to == w.Host {
			to = fmt.Sprintf("h%d", 2+(i*7+int(w.TID.Host())+1)%(hosts-1))
		}
		via := []Via{Direct, Indirect}[i%2]
		if _, err := m.Migrate(ctx, w.TID, to, via); err != nil {
			t.Fatalf("move %v from %s to %s (%s): %v", w.TID, w.Host, to, via, err)
		}
	}
	ck, err := m.CheckpointJob(ctx, job, "")
	if err != nil {
		t.Fatalf("checkpoint of a job of %d tasks on %d hosts: %v", workers+1, hosts, err)
	}
	if ck.Tasks != workers+1 {
		t.Fatalf("checkpoint of %d tasks, want %d", ck.Tasks, workers+1)
	}
	poke(t, m, root)
	info, err := m.Wait(ctx, root)
	if err != nil || info.State != Exited || info.Status != 0 {
		t.Fatalf("root: %+v %v", info, err)
	}
	var want int64
	for i := range int64(workers) {
		want += i * i
	}
	if got := fmt.Sprintf("sum of %d squares: %d\n", workers, want); out.String() != got {
		t.Fatalf("output %q, want %q", out.String(), got)
	}
}
