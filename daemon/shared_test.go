package daemon

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/task"
)

// sharedTable is the read-only value the shareWorkers of a test share:
// build says which build of the test made it.
type sharedTable struct {
	build int64
	rows  []int
}

// shareProbe is a test's view of its shareWorkers: how many tables were
// built, what each worker got, and when to stop.
type shareProbe struct {
	builds atomic.Int64
	seen   chan shareSeen
	stop   atomic.Bool
}

type shareSeen struct {
	tid  task.TID
	host string
	v    *sharedTable
}

var shareProbes sync.Map // test name → *shareProbe

func newShareProbe(t *testing.T) (string, *shareProbe) {
	p := &shareProbe{seen: make(chan shareSeen, 16)}
	shareProbes.Store(t.Name(), p)
	t.Cleanup(func() { shareProbes.Delete(t.Name()) })
	return t.Name(), p
}

// shareWorker asks for the table "table" (task.Shared) each time Run
// starts (on its first host, after a move, after a restore), says what it
// got, and reaches safe points until its test stops it.
type shareWorker struct{ Probe string }

// shareRoot spawns N shareWorkers once, then waits at safe points as
// they do.
type shareRoot struct {
	Probe   string
	N       int
	Spawned bool
}

func init() {
	task.Register("daemon.test.shareworker", &shareWorker{})
	task.Register("daemon.test.shareroot", &shareRoot{})
}

func (w *shareWorker) Run(c *task.Ctx) error {
	v, _ := shareProbes.Load(w.Probe)
	p := v.(*shareProbe)
	tab, err := task.Shared(c, "table", func() (*sharedTable, error) {
		return &sharedTable{build: p.builds.Add(1), rows: []int{1, 2, 3}}, nil
	})
	if err != nil {
		return err
	}
	p.seen <- shareSeen{c.MyTID(), c.HostName(), tab}
	return waitStop(c, p)
}

func (r *shareRoot) Run(c *task.Ctx) error {
	v, _ := shareProbes.Load(r.Probe)
	p := v.(*shareProbe)
	if !r.Spawned {
		if _, err := c.Spawn(&shareWorker{Probe: r.Probe}, r.N); err != nil {
			return err
		}
		r.Spawned = true
	}
	return waitStop(c, p)
}

// waitStop reaches a safe point every 10 ms (virtual time) until p says
// stop.
func waitStop(c *task.Ctx, p *shareProbe) error {
	for !p.stop.Load() {
		time.Sleep(10 * time.Millisecond)
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	return nil
}

// heldShared is what d's shared values are: how many, and their users.
func heldShared(d *Daemon) [2]int {
	v, u := d.shared.held()
	return [2]int{v, u}
}

// TestSharedFollowsMoves: two tasks on h2 get one table, built once. One
// moves to h3 and, asking again from Run there, gets a table of its own
// built there (h3 holds none), with the same contents; h2 keeps its table
// for the task left there. Once both tasks end, no host holds a table.
// In-memory network, virtual time.
func TestSharedFollowsMoves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vm := startMemVMWith(t, 3, nil, Config{})
		m := vm.Master()
		name, p := newShareProbe(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		a := spawnOn(t, m, "h2", &shareWorker{Probe: name})
		b := spawnOn(t, m, "h2", &shareWorker{Probe: name})
		s1, s2 := <-p.seen, <-p.seen
		if s1.v != s2.v || s1.host != "h2" || s2.host != "h2" || p.builds.Load() != 1 {
			t.Fatalf("two tasks on h2: tables %p (%s) and %p (%s), %d builds; want one table built once", s1.v, s1.host, s2.v, s2.host, p.builds.Load())
		}
		if got := heldShared(vm.Daemons[1]); got != [2]int{1, 2} {
			t.Fatalf("h2 holds %v (values, users), want [1 2]", got)
		}
		if _, err := m.Migrate(ctx, a, "h3", Direct); err != nil {
			t.Fatal(err)
		}
		s3 := <-p.seen
		if s3.tid != a || s3.host != "h3" || s3.v == s1.v || s3.v.build != 2 || !slices.Equal(s3.v.rows, s1.v.rows) {
			t.Fatalf("after the move %v got %+v on %s; want a table of its own, built on h3", a, *s3.v, s3.host)
		}
		synctest.Wait()
		if h2, h3 := heldShared(vm.Daemons[1]), heldShared(vm.Daemons[2]); h2 != [2]int{1, 1} || h3 != [2]int{1, 1} {
			t.Fatalf("after the move h2 holds %v, h3 %v (values, users); want [1 1] each", h2, h3)
		}
		if !runsOn(vm.Daemons[1], b) {
			t.Fatalf("%v left h2", b)
		}
		p.stop.Store(true)
		time.Sleep(time.Second)
		synctest.Wait()
		for _, d := range vm.Daemons {
			if got := heldShared(d); got != [2]int{} {
				t.Errorf("%s holds %v (values, users) after the tasks ended", d.Name(), got)
			}
		}
		if p.builds.Load() != 2 {
			t.Errorf("%d builds, want 2", p.builds.Load())
		}
	})
}

// TestSharedAfterRollback: the two workers of a job share a table; a task
// of no job on the same host, asking under the same key, gets its own.
// The job is checkpointed, killed (its table goes with its last worker,
// the other stays) and restarted from the checkpoint: the restored
// workers ask again from Run and share one new table. Virtual time.
func TestSharedAfterRollback(t *testing.T) {
	shared := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		vm := startMemVMWith(t, 1, nil, Config{SharedDir: shared})
		d := vm.Master()
		ctx := context.Background()
		name, p := newShareProbe(t)
		loner, err := d.SpawnTask(&shareWorker{Probe: name})
		if err != nil {
			t.Fatal(err)
		}
		sl := <-p.seen
		job, _, err := d.StartJob(ctx, &shareRoot{Probe: name, N: 2}, JobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s1, s2 := <-p.seen, <-p.seen
		if s1.v != s2.v || s1.v == sl.v || p.builds.Load() != 2 {
			t.Fatalf("job's workers: tables %p and %p, the loner's %p, %d builds; want the workers to share one of their own", s1.v, s2.v, sl.v, p.builds.Load())
		}
		if got := heldShared(d); got != [2]int{2, 3} {
			t.Fatalf("holds %v (values, users), want [2 3]", got)
		}
		time.Sleep(100 * time.Millisecond)
		ck, err := d.CheckpointJob(ctx, job, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.KillJob(ctx, job); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := heldShared(d); got != [2]int{1, 1} {
			t.Fatalf("after the kill: holds %v (values, users), want the loner's alone [1 1]", got)
		}
		if _, _, err := d.RestartJob(ctx, ck.Dir, JobOptions{}, nil); err != nil {
			t.Fatal(err)
		}
		r1, r2 := <-p.seen, <-p.seen
		if r1.v != r2.v || r1.v == s1.v || r1.v == sl.v || r1.v.build != 3 || !slices.Contains([]task.TID{s1.tid, s2.tid}, r1.tid) {
			t.Fatalf("restored workers %v and %v: builds %d and %d; want one new table (build 3) shared", r1.tid, r2.tid, r1.v.build, r2.v.build)
		}
		if got := heldShared(d); got != [2]int{2, 3} {
			t.Fatalf("after the restart: holds %v (values, users), want [2 3]", got)
		}
		p.stop.Store(true)
		time.Sleep(time.Second)
		synctest.Wait()
		if got := heldShared(d); got != [2]int{} {
			t.Errorf("holds %v (values, users) after every task ended", got)
		}
		if info, err := d.Wait(ctx, loner); err != nil || info.Status != 0 {
			t.Errorf("loner: %+v %v", info, err)
		}
	})
}

// TestSharedBuildFails: a build's error reaches its caller and the task
// waiting for the build, and leaves nothing held; the next call builds.
func TestSharedBuildFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := New(Config{Output: &syncBuffer{}})
		ctx := context.Background()
		errBuild := errors.New("no table")
		release := make(chan struct{})
		started := make(chan struct{})
		var builds atomic.Int64
		build := func() (int, error) {
			if builds.Add(1) == 1 {
				close(started)
				<-release
				return 0, errBuild
			}
			return 42, nil
		}
		results := make(chan error, 2)
		ask := func(c *task.Ctx, _ int) error {
			v, err := task.Shared(c, "k", build)
			if err == nil && v != 42 {
				t.Errorf("got %d, want 42", v)
			}
			results <- err
			return nil
		}
		first, err := d.SpawnTask(fn(t, ask))
		if err != nil {
			t.Fatal(err)
		}
		<-started
		if _, err := d.SpawnTask(fn(t, ask)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the second waits for the first's build
		close(release)
		for range 2 {
			if err := <-results; !errors.Is(err, errBuild) {
				t.Errorf("a call of the failed build: %v, want its error", err)
			}
		}
		if _, err := d.Wait(ctx, first); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := heldShared(d); got != [2]int{} {
			t.Fatalf("after a failed build: holds %v, want nothing", got)
		}
		if _, err := d.SpawnTask(fn(t, ask)); err != nil {
			t.Fatal(err)
		}
		if err := <-results; err != nil {
			t.Fatalf("the next call: %v", err)
		}
		if err := d.Halt(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
