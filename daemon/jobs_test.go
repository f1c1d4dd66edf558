package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/ckpt/jobset"
	"github.com/dpvm/dpvm/task"
)

// ringRoot passes a token around a ring of workers for Laps laps; halfway
// it waits for a word from outside (tag 99), which gives tests a moment
// when the whole job sits at safe points. Its result depends only on its
// state, so a run restarted from a checkpoint prints what an uninterrupted
// one does.
//
// Sent records that the lap's token is out: the root waits for it at a
// safe point, and a root restored from a checkpoint taken there must not
// send the lap's token again — the one out is in a worker's checkpointed
// mailbox or state, and a second would circulate beside it (the ring then
// sums differently after a rollback).
type ringRoot struct {
	N, Laps int
	Workers []task.TID
	Lap     int
	Sum     int64
	Poked   bool
	Sent    bool
}

type ringWorker struct {
	Next task.TID
	Hops int
	Seed int64
}

type ringToken struct {
	Lap int
	Sum int64
}

// ringMid hears when a ring's root waits halfway.
var ringMid = make(chan task.TID, 16)

// waitRingMid waits for a ring's root to reach half way, for at most a
// minute: a ring whose job failed never does, and the test fails instead
// of waiting for ever.
func waitRingMid(t *testing.T) task.TID {
	t.Helper()
	select {
	case tid := <-ringMid:
		return tid
	case <-time.After(time.Minute):
		t.Fatal("no ring root reached half way within a minute")
		return 0
	}
}

func init() {
	task.Register("daemon.test.ringroot", &ringRoot{})
	task.Register("daemon.test.ringworker", &ringWorker{})
}

func (r *ringRoot) Run(c *task.Ctx) error {
	if r.Workers == nil {
		ws := make([]*ringWorker, r.N)
		for i := range ws {
			ws[i] = &ringWorker{Seed: int64(i + 1)}
		}
		for i := range ws {
			tids, err := c.Spawn(ws[i], 1)
			if err != nil {
				return err
			}
			r.Workers = append(r.Workers, tids...)
		}
		for i, w := range r.Workers {
			next := c.MyTID()
			if i+1 < len(r.Workers) {
				next = r.Workers[i+1]
			}
			if err := c.Send(w, 1, next); err != nil {
				return err
			}
		}
	}
	for r.Lap < r.Laps {
		if r.Lap == r.Laps/2 && !r.Poked {
			ringMid <- c.MyTID()
			if _, err := c.Recv(task.AnyTask, 99, nil, task.Safe()); err != nil {
				return err
			}
			r.Poked = true
		}
		if !r.Sent {
			if err := c.Send(r.Workers[0], 2, ringToken{Lap: r.Lap, Sum: r.Sum}); err != nil {
				return err
			}
			r.Sent = true
		}
		var tok ringToken
		if _, err := c.Recv(r.Workers[len(r.Workers)-1], 2, &tok, task.Safe()); err != nil {
			return err
		}
		r.Sum = tok.Sum
		r.Lap++
		r.Sent = false
	}
	if err := c.Mcast(r.Workers, 3, nil); err != nil {
		return err
	}
	c.Printf("ring of %d, %d laps: sum %d\n", r.N, r.Laps, r.Sum)
	return nil
}

func (w *ringWorker) Run(c *task.Ctx) error {
	if w.Next.IsZero() {
		if _, err := c.Recv(c.Parent(), 1, &w.Next, task.Safe()); err != nil {
			return err
		}
	}
	for {
		var tok ringToken
		st, err := c.Recv(task.AnyTask, task.AnyTag, &tok, task.Safe())
		if err != nil {
			return err
		}
		if st.Tag == 3 {
			return nil
		}
		w.Hops++
		w.Seed = w.Seed*6364136223846793005 + 1442695040888963407
		tok.Sum += w.Seed>>40 + int64(w.Hops)
		if err := c.Send(w.Next, 2, tok); err != nil {
			return err
		}
	}
}

// poke tells a waiting ring root to go on.
func poke(t *testing.T, d *Daemon, root task.TID) {
	t.Helper()
	if _, err := d.SpawnTask(fn(t, func(c *task.Ctx, _ int) error { return c.Send(root, 99, nil) })); err != nil {
		t.Fatal(err)
	}
}

var ringSum = regexp.MustCompile(`ring of \d+, \d+ laps: sum (-?\d+)`)

// TestJobCheckpointAndRestart checkpoints a job running on three hosts
// twice while it waits halfway, lets it finish, then restarts it from its
// checkpoint on another virtual machine of two hosts: it finishes with the
// same result. A tampered newest checkpoint is passed over, naming the bad
// file, for the one before.
func TestJobCheckpointAndRestart(t *testing.T) {
	shared := t.TempDir()
	out := &syncBuffer{}
	vm := startVM(t, 3, Config{SharedDir: shared, Output: out})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	js := m.newJob("ring", "daemon.test.ringroot", JobOptions{Keep: 3})
	tids, err := m.startLocal(ctx, 0, js.id, task.SpawnRequest{Type: "daemon.test.ringroot", Count: 1,
		State: mustState(t, &ringRoot{N: 5, Laps: 40})})
	if err != nil {
		t.Fatal(err)
	}
	m.jobRunning(js, tids[0])
	waitRingMid(t)
	var cks []JobCheckpoint
	for range 2 {
		ck, err := m.CheckpointJob(ctx, js.id, "")
		if err != nil {
			t.Fatal(err)
		}
		cks = append(cks, ck)
	}
	if cks[0].Tasks != 6 || cks[1].Seq != 2 || cks[0].Bytes == 0 {
		t.Fatalf("checkpoints %+v", cks)
	}
	for _, ck := range cks {
		ents, err := os.ReadDir(ck.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if fi, err := e.Info(); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("%s: mode %v, %v", e.Name(), fi.Mode(), err)
			}
		}
	}
	poke(t, m, js.root)
	info, err := m.Wait(ctx, js.root)
	if err != nil || info.Status != 0 {
		t.Fatalf("ring: %+v %v\n%s", info, err, out)
	}
	first := ringSum.FindStringSubmatch(out.String())
	if first == nil {
		t.Fatalf("no result: %q", out)
	}

	// Tamper with one task file of the newest set.
	bad := filepath.Join(cks[1].Dir, ckptFileName(js.root))
	b, err := os.ReadFile(bad)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}

	// Another virtual machine, two hosts, the same key and directory.
	out2 := &syncBuffer{}
	vm2 := startVM(t, 2, Config{SharedDir: shared, Output: out2, Secret: vm.Cluster.Secret})
	m2 := vm2.Master()
	jobDir, _ := jobset.JobDir(shared, "ring")
	js2, skipped, err := m2.RestartJob(ctx, jobDir, JobOptions{}, func(uint64) io.Writer { return out2 })
	if err != nil {
		t.Fatal(err)
	}
	if len(skipped) != 1 || !errors.Is(skipped[0], jobset.ErrTampered) || !strings.Contains(skipped[0].Error(), filepath.Base(bad)) {
		t.Fatalf("skipped %v, want the tampered %s", skipped, bad)
	}
	if js2.root != js.root || js2.seq() != 1 {
		t.Fatalf("restarted job: root %v seq %d", js2.root, js2.seq())
	}
	if got := waitRingMid(t); got != js.root {
		t.Fatalf("restored root %v waits, want %v", got, js.root)
	}
	poke(t, m2, js2.root)
	info, err = m2.Wait(ctx, js2.root)
	if err != nil || info.Status != 0 {
		t.Fatalf("restarted ring: %+v %v\n%s", info, err, out2)
	}
	second := ringSum.FindStringSubmatch(out2.String())
	if second == nil || second[1] != first[1] {
		t.Fatalf("restarted ring printed %q, the first run %q", out2, first[0])
	}
	// A new task of a host whose ID restored tasks carry takes a number
	// above theirs.
	man, err := jobset.ReadManifest(cks[0].Dir, m.manifestKey())
	if err != nil {
		t.Fatal(err)
	}
	var top uint32
	for _, e := range man.Entries {
		if tid, _ := task.ParseTID(e.TID); tid.Host() == 1 {
			top = max(top, tid.Num())
		}
	}
	tid, err := m2.SpawnTask(fn(t, func(*task.Ctx, int) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if top < 2 || tid.Num() <= top {
		t.Fatalf("a new task on h1 is %v; restored tasks of h1 go up to number %d", tid, top)
	}
}

// TestJobCheckpointFailures: no shared directory, no such job, a task that
// never reaches a safe point (the job runs on), an unwritable directory
// (the job runs on, no set is left).
func TestJobCheckpointFailures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	vm := startVM(t, 2, Config{MoveTimeout: 200 * time.Millisecond})
	if _, err := vm.Master().CheckpointJob(ctx, 42, ""); !errors.Is(err, ErrNoJob) {
		t.Fatalf("a missing job: %v", err)
	}
	js := vm.Master().newJob("", "x", JobOptions{})
	if _, err := vm.Master().CheckpointJob(ctx, js.id, ""); !errors.Is(err, ErrNoSharedDir) {
		t.Fatalf("no shared directory: %v", err)
	}
	vm.Master().endJob(js)

	shared := t.TempDir()
	vm = startVM(t, 2, Config{MoveTimeout: 200 * time.Millisecond, SharedDir: shared})
	m := vm.Master()
	js = m.newJob("spin", "daemon.test.spinner", JobOptions{})
	tids, err := m.startLocal(ctx, 0, js.id, task.SpawnRequest{Type: "daemon.test.spinner", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	m.jobRunning(js, tids[0])
	if _, err := m.CheckpointJob(ctx, js.id, ""); !errors.Is(err, ErrNoSafePoint) {
		t.Fatalf("a task without safe points: %v", err)
	}
	if err := m.Kill(tids[0]); err != nil {
		t.Fatalf("the spinner is gone after the failed checkpoint: %v", err)
	}

	js = m.newJob("ring2", "daemon.test.ringroot", JobOptions{})
	tids, err = m.startLocal(ctx, 0, js.id, task.SpawnRequest{Type: "daemon.test.ringroot", Count: 1,
		State: mustState(t, &ringRoot{N: 2, Laps: 4})})
	if err != nil {
		t.Fatal(err)
	}
	m.jobRunning(js, tids[0])
	waitRingMid(t)
	// The job's directory is a file: nothing can be written under it.
	if err := os.WriteFile(filepath.Join(shared, "job-ring2"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CheckpointJob(ctx, js.id, ""); err == nil {
		t.Fatal("checkpointed into a file")
	}
	poke(t, m, js.root)
	if info, err := m.Wait(ctx, js.root); err != nil || info.Status != 0 {
		t.Fatalf("the job after a failed checkpoint: %+v %v", info, err)
	}
}

func mustState(t *testing.T, v task.Task) []byte {
	t.Helper()
	_, b, err := task.EncodeState(v)
	if err != nil {
		t.Fatal(fmt.Errorf("encode state: %w", err))
	}
	return b
}

// TestJobRollsBackWhenAHostIsLost: a job with a checkpoint loses a host
// that ran some of its workers (it crashes); the master rolls the job back
// to its checkpoint on the hosts left, and it finishes with the result of
// an uninterrupted run.
func TestJobRollsBackWhenAHostIsLost(t *testing.T) {
	shared := t.TempDir()
	out := &syncBuffer{}
	vm := startVM(t, 4, Config{SharedDir: shared, Output: out, Heartbeat: 50 * time.Millisecond, DeadAfter: 500 * time.Millisecond})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ring := &ringRoot{N: 6, Laps: 20}

	// The reference: uninterrupted.
	_, root, err := m.StartJob(ctx, ring, JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitRingMid(t)
	poke(t, m, root)
	if info, err := m.Wait(ctx, root); err != nil || info.Status != 0 {
		t.Fatalf("reference ring: %+v %v", info, err)
	}
	want := ringSum.FindStringSubmatch(out.String())
	if want == nil {
		t.Fatalf("no result: %q", out)
	}

	job, root, err := m.StartJob(ctx, ring, JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitRingMid(t)
	if _, err := m.CheckpointJob(ctx, job, ""); err != nil {
		t.Fatal(err)
	}
	js, err := m.job(job)
	if err != nil {
		t.Fatal(err)
	}
	// h2 runs workers of the job (placed round robin); it crashes.
	before := strings.Count(out.String(), "sum")
	vm.Daemons[1].crash()
	if got := waitRingMid(t); got != root {
		t.Fatalf("after the rollback %v waits halfway, want the root %v", got, root)
	}
	ts, err := m.AllTasks(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range ts {
		if ti.Job == job && ti.Host == "h2" {
			t.Fatalf("%v restored on the lost host", ti.TID)
		}
	}
	poke(t, m, root)
	info, err := m.waitJob(ctx, js)
	if err != nil || info.Status != 0 {
		t.Fatalf("rolled-back ring: %+v %v\n%s", info, err, out)
	}
	if m.Rollbacks() != 1 {
		t.Fatalf("%d rollbacks", m.Rollbacks())
	}
	all := ringSum.FindAllStringSubmatch(out.String(), -1)
	if len(all) != before+1 || all[len(all)-1][1] != want[1] {
		t.Fatalf("results %v, want a second %s", all, want[1])
	}
}

// TestSpawnRootsCheckpointPeriodically: a task spawned as the root of its
// own job with a checkpoint period gets complete checkpoints while it
// runs, and its job ends with it.
func TestSpawnRootsCheckpointPeriodically(t *testing.T) {
	shared := t.TempDir()
	vm := startVM(t, 2, Config{SharedDir: shared})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, state, err := task.EncodeState(&ringRoot{N: 3, Laps: 6})
	if err != nil {
		t.Fatal(err)
	}
	tids, err := m.spawnRoots(ctx, task.SpawnRequest{Type: "daemon.test.ringroot", State: state, Count: 1},
		JobOptions{CheckpointEvery: 20 * time.Millisecond, Keep: 1})
	if err != nil || len(tids) != 1 {
		t.Fatal(tids, err)
	}
	root := waitRingMid(t)
	var info TaskInfo
	for _, ti := range m.Tasks(false) {
		if ti.TID == root {
			info = ti
		}
	}
	if info.Job == 0 || root != tids[0] {
		t.Fatalf("root %v (spawned %v) in job %d", root, tids, info.Job)
	}
	jobDir, _ := jobset.JobDir(shared, fmt.Sprintf("j%d", info.Job))
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, m, _, err := jobset.Latest(jobDir, vm.Master().manifestKey()); err == nil && len(m.Entries) == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no complete checkpoint after 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	js, err := m.job(info.Job)
	if err != nil {
		t.Fatal(err)
	}
	poke(t, m, root)
	select { // the job ends with its root
	case <-js.done:
	case <-ctx.Done():
		t.Fatal("the job outlived its root")
	}
	m.endJob(js) // returns once the ending under way is complete (sync.Once)
	if _, err := m.job(info.Job); !errors.Is(err, ErrNoJob) {
		t.Fatalf("an ended job is still registered: %v", err)
	}
	if seqs, _ := jobset.Sets(jobDir); len(seqs) != 1 {
		t.Fatalf("kept sets %v, want the newest only", seqs)
	}
}

// TestRestartEpochAboveManifest: the epoch clock of the machine that took a
// checkpoint set is in its manifest, and a master that restores the set
// without having seen those epochs (another machine here; a recovered
// master likewise) routes the restored tasks above it: no task's epoch
// goes back.
func TestRestartEpochAboveManifest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	shared := t.TempDir()
	vm := startVM(t, 2, Config{SharedDir: shared})
	m := vm.Master()
	// The clock as many moves would have left it.
	const high = 1 << 20
	m.mv.nextEpoch(high)
	job, root, err := m.StartJob(ctx, &ringRoot{N: 3, Laps: 4}, JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitRingMid(t)
	ck, err := m.CheckpointJob(ctx, job, "")
	if err != nil {
		t.Fatal(err)
	}
	man, err := jobset.ReadManifest(ck.Dir, m.manifestKey())
	if err != nil {
		t.Fatal(err)
	}
	if man.Epoch < high {
		t.Fatalf("the manifest records epoch %d, the clock was at %d at least", man.Epoch, high)
	}
	poke(t, m, root)
	if info, err := m.Wait(ctx, root); err != nil || info.Status != 0 {
		t.Fatalf("ring: %+v %v", info, err)
	}

	vm2 := startVM(t, 2, Config{SharedDir: shared, Secret: vm.Cluster.Secret})
	m2 := vm2.Master()
	js2, _, err := m2.RestartJob(ctx, filepath.Dir(ck.Dir), JobOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := waitRingMid(t); got != root {
		t.Fatalf("restored root %v waits, want %v", got, root)
	}
	if e := m2.routeEpoch(root); e <= man.Epoch {
		t.Errorf("restored %v at epoch %d, not above the manifest's %d", root, e, man.Epoch)
	}
	poke(t, m2, js2.root)
	if info, err := m2.Wait(ctx, js2.root); err != nil || info.Status != 0 {
		t.Fatalf("restarted ring: %+v %v", info, err)
	}
}
