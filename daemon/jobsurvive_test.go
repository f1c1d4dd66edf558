package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/ckpt/jobset"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/task"
)

// runWatch runs a watchRoot of n workers for a client of vm's master with
// opts, and returns the client, the notes it hears, the job's output, its
// outcome to come, the job and its root.
func runWatch(t *testing.T, ctx context.Context, vm *LocalVM, n int, opts JobOptions) (notes func() []JobNote, out *syncBuffer, done chan runOutcome, job uint64, root task.TID) {
	t.Helper()
	m := vm.Master()
	cl := adminClient(t, ctx, vm)
	var mu sync.Mutex
	var heard []JobNote
	cl.OnJobNote(func(n JobNote) {
		mu.Lock()
		heard = append(heard, n)
		mu.Unlock()
	})
	notes = func() []JobNote {
		mu.Lock()
		defer mu.Unlock()
		return append([]JobNote(nil), heard...)
	}
	out = &syncBuffer{}
	done = make(chan runOutcome, 1)
	go func() {
		info, err := cl.RunJob(ctx, "daemon.test.watchroot", mustState(t, &watchRoot{N: n}), opts, out)
		done <- runOutcome{info, err}
	}()
	root = <-watchReady
	ts, err := m.AllTasks(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range ts {
		if ti.TID == root {
			job = ti.Job
		}
	}
	if job == 0 {
		t.Fatalf("no job of root %v in %+v", root, ts)
	}
	return notes, out, done, job, root
}

type runOutcome struct {
	info TaskInfo
	err  error
}

// daemonNamed is the daemon of vm named name.
func daemonNamed(t *testing.T, vm *LocalVM, name string) *Daemon {
	t.Helper()
	for _, d := range vm.Daemons {
		if d.Name() == name {
			return d
		}
	}
	t.Fatalf("no daemon %s", name)
	return nil
}

// TestRunFollowsItsRootsHostLoss: a job run by a client has its root moved
// to h2 (off the master), takes a checkpoint, and h2 crashes. The client's
// wait does not end with the connection to h2: the job rolls back, its
// root restored from the checkpoint on a host left, the client hears
// which checkpoint it went back to and gets the job's real result. The
// job's next checkpoints complete, in new sets, although an incomplete
// set numbered after the one it went back to is on disk (as an abandoned
// round leaves one). Before, the run ended with "wait …: host
// unreachable", and the checkpoint after the rollback failed with "mkdir
// …: file exists".
func TestRunFollowsItsRootsHostLoss(t *testing.T) {
	shared := t.TempDir()
	vm := startVM(t, 3, Config{SharedDir: shared, Heartbeat: 50 * time.Millisecond, DeadAfter: 500 * time.Millisecond, MoveTimeout: 3 * time.Second})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	notes, out, done, job, root := runWatch(t, ctx, vm, 2, JobOptions{Keep: 10})
	if _, err := m.Migrate(ctx, root, "h2", Direct); err != nil {
		t.Fatal(err)
	}
	ck, err := m.CheckpointJob(ctx, job, "")
	if err != nil {
		t.Fatal(err)
	}
	js, err := m.job(job)
	if err != nil {
		t.Fatal(err)
	}
	jobDir, err := jobset.JobDir(shared, js.name)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(jobset.SetDir(jobDir, ck.Seq+1), 0o700); err != nil {
		t.Fatal(err)
	}
	daemonNamed(t, vm, "h2").crash()
	deadline := time.Now().Add(30 * time.Second)
	for m.Rollbacks() < 1 {
		select {
		case r := <-done:
			t.Fatalf("the run ended before the rollback: %+v %v", r.info, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no rollback after 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var seqs []uint64
	for range 2 {
		c, err := m.CheckpointJob(ctx, job, "")
		if err != nil {
			t.Fatalf("checkpoint after the rollback: %v", err)
		}
		seqs = append(seqs, c.Seq)
	}
	if seqs[0] <= ck.Seq+1 || seqs[1] <= seqs[0] {
		t.Fatalf("checkpoints %v after going back to %d past an incomplete set %d", seqs, ck.Seq, ck.Seq+1)
	}
	ts, err := m.AllTasks(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	rootBack := false
	for _, ti := range ts {
		if ti.Job != job {
			continue
		}
		if ti.TID == root {
			rootBack = ti.Host != "h2"
			continue
		}
		for _, tag := range []int{6, 5} {
			if _, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error { return c.Send(ti.TID, tag, nil) })); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !rootBack {
		t.Fatalf("root %v not restored on a host left: %+v", root, ts)
	}
	var r runOutcome
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the run did not end")
	}
	if r.err != nil || r.info.Status != 0 || r.info.State != Exited {
		t.Fatalf("run: %+v %v\n%s", r.info, r.err, out)
	}
	if !strings.Contains(out.String(), "all 2 workers done") {
		t.Fatalf("output %q", out)
	}
	ns := notes()
	if len(ns) != 1 || ns[0].Kind != NoteRolledBack || ns[0].Seq != ck.Seq || ns[0].Host != "h2" {
		t.Fatalf("notes %+v, want one rollback to checkpoint %d after losing h2", ns, ck.Seq)
	}
}

// TestJobWithoutCheckpointEndsAtOnce: a job that asks for periodic
// checkpoints and has none yet loses a host running one of its workers:
// it cannot roll back, so it ends at once, its other tasks killed; the
// client hears why and which host took which tasks, and its run fails
// with ErrJobLost. Before, the run waited for good.
func TestJobWithoutCheckpointEndsAtOnce(t *testing.T) {
	shared := t.TempDir()
	vm := startVM(t, 3, Config{SharedDir: shared, Heartbeat: 50 * time.Millisecond, DeadAfter: 500 * time.Millisecond, MoveTimeout: 3 * time.Second})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	notes, out, done, job, root := runWatch(t, ctx, vm, 3, JobOptions{CheckpointEvery: time.Hour})
	ts, err := m.AllTasks(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	var lost task.TID
	for _, ti := range ts {
		if ti.Job == job && ti.TID != root && ti.Host != m.Name() && lost == 0 {
			lost = ti.TID
			daemonNamed(t, vm, ti.Host).crash()
		}
	}
	if lost == 0 {
		t.Fatalf("no worker off the master: %+v", ts)
	}
	var r runOutcome
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the run of a job that lost a worker with no checkpoint did not end")
	}
	if !errors.Is(r.err, ErrJobLost) && !strings.Contains(errString(r.err), ErrJobLost.Error()) {
		t.Fatalf("run: %+v %v, want the job lost\n%s", r.info, r.err, out)
	}
	ns := notes()
	if len(ns) != 1 || ns[0].Kind != NoteLost || ns[0].Host != lost.Host().String() ||
		!strings.Contains(ns[0].Err, lost.String()) || !strings.Contains(ns[0].String(), "no complete checkpoint") {
		t.Fatalf("notes %+v, want one saying the job is lost with %v on %v", ns, lost, lost.Host())
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ts, err := m.AllTasks(ctx, false)
		left := 0
		for _, ti := range ts {
			if ti.Job == job && ti.State == Running {
				left++
			}
		}
		if err == nil && left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tasks of the lost job still run: %+v %v", ts, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCheckpointSkipsSetsOnDisk: a job's checkpoint directory holds an
// incomplete set numbered after its newest complete one (an abandoned
// round's, or one an earlier machine left); the next checkpoints take
// numbers above it and complete. Before, every checkpoint failed with
// "mkdir …: file exists". Virtual time (synctest).
func TestCheckpointSkipsSetsOnDisk(t *testing.T) {
	shared := t.TempDir()
	secret, err := pki.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		d := New(Config{Output: &syncBuffer{}, SharedDir: shared, Secret: secret})
		ctx := context.Background()
		job, _, err := d.StartJob(ctx, &slowSafe{Every: 10 * time.Millisecond, N: 1000}, JobOptions{Keep: 10})
		if err != nil {
			t.Fatal(err)
		}
		first, err := d.CheckpointJob(ctx, job, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(filepath.Dir(first.Dir), filepath.Base(jobset.SetDir("", first.Seq+1))), 0o700); err != nil {
			t.Fatal(err)
		}
		for _, want := range []uint64{first.Seq + 2, first.Seq + 3} {
			c, err := d.CheckpointJob(ctx, job, "")
			if err != nil || c.Seq != want {
				t.Fatalf("checkpoint past an incomplete set %d: seq %d %v, want %d", first.Seq+1, c.Seq, err, want)
			}
		}
		// The incomplete set, older than the newest complete one, is
		// pruned.
		if got := setsOf(t, shared, "j1"); !slices.Equal(got, []uint64{first.Seq, first.Seq + 2, first.Seq + 3}) {
			t.Fatalf("sets %v", got)
		}
		if err := d.Halt(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// setsOf lists the sets of job name under root.
func setsOf(t *testing.T, root, name string) []uint64 {
	t.Helper()
	s, err := jobset.Sets(filepath.Join(root, "job-"+name))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEmbeddedRunHearsItsRollback: an embedded run (Run, LocalRunner:
// runEmbeddedJob) is told its job rolled back, and to which checkpoint,
// when a host with its worker is lost, and gets the job's result.
func TestEmbeddedRunHearsItsRollback(t *testing.T) {
	shared := t.TempDir()
	vm := startVM(t, 3, Config{SharedDir: shared, Heartbeat: 50 * time.Millisecond, DeadAfter: 500 * time.Millisecond, MoveTimeout: 3 * time.Second})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	heard := make(chan JobNote, 4)
	done := make(chan runOutcome, 1)
	go func() {
		info, err := m.runEmbeddedJob(ctx, &watchRoot{N: 2}, JobOptions{}, func(n JobNote) { heard <- n })
		done <- runOutcome{info, err}
	}()
	root := <-watchReady
	ts, err := m.AllTasks(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	var job uint64
	var workers []task.TID
	lost := ""
	for _, ti := range ts {
		if ti.TID == root {
			job = ti.Job
		}
	}
	for _, ti := range ts {
		if ti.Job == job && ti.TID != root {
			workers = append(workers, ti.TID)
			if ti.Host != m.Name() {
				lost = ti.Host
			}
		}
	}
	if lost == "" {
		t.Fatalf("no worker off the master: %+v", ts)
	}
	ck, err := m.CheckpointJob(ctx, job, "")
	if err != nil {
		t.Fatal(err)
	}
	daemonNamed(t, vm, lost).crash()
	var n JobNote
	select {
	case n = <-heard:
	case <-ctx.Done():
		t.Fatal("no note of the rollback")
	}
	if n.Kind != NoteRolledBack || n.Seq != ck.Seq || n.Host != lost || n.Job != job {
		t.Fatalf("note %+v, want a rollback of job %d to %d after losing %s", n, job, ck.Seq, lost)
	}
	for _, w := range workers {
		for _, tag := range []int{6, 5} {
			if _, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error { return c.Send(w, tag, nil) })); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := <-done
	if r.err != nil || r.info.Status != 0 || r.info.State != Exited {
		t.Fatalf("run: %+v %v", r.info, r.err)
	}
}

// TestRunFollowsItsJobThroughAReconnection: the connection of a client
// running a job drops (cut on the client's side). The client connects
// again and attaches to its job, which the master kept: the job's output
// after the cut reaches the client, and the run returns the job's real
// result; another user may not attach to it. Before, the run failed
// with "host unreachable" and the master killed the job.
func TestRunFollowsItsJobThroughAReconnection(t *testing.T) {
	vm := startVM(t, 2, Config{Heartbeat: 50 * time.Millisecond, DeadAfter: 2 * time.Second})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := adminClient(t, ctx, vm)
	out := &syncBuffer{}
	done := make(chan runOutcome, 1)
	go func() {
		info, err := cl.Run(ctx, "daemon.test.watchroot", mustState(t, &watchRoot{N: 2}), out)
		done <- runOutcome{info, err}
	}()
	root := <-watchReady
	ts, err := m.AllTasks(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	var job uint64
	var workers []task.TID
	for _, ti := range ts {
		if ti.TID == root {
			job = ti.Job
		}
	}
	for _, ti := range ts {
		if ti.Job == job && ti.TID != root {
			workers = append(workers, ti.TID)
		}
	}
	attached := func() *peer {
		if co, ok := m.reg.output(job).(*clientOutput); ok {
			return co.p
		}
		return nil
	}
	first := attached()
	if job == 0 || len(workers) != 2 || first == nil {
		t.Fatalf("job %d, workers %v, client %v", job, workers, first)
	}
	deadline := time.Now().Add(30 * time.Second)
	for { // the client knows its job's number
		cl.mu.Lock()
		known := cl.job == job
		cl.mu.Unlock()
		if known {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the client was not told its job's number")
		}
		time.Sleep(time.Millisecond)
	}
	// Another user may not follow the job.
	bob, err := vm.Cluster.User("bob", pki.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	other, err := Dial(ctx, m.Addr(), bob)
	if err != nil {
		t.Fatal(err)
	}
	body, err := encodeMsg(runArgs{Attach: job})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.CallRaw(ctx, mRun, body); !errors.Is(err, ErrForbidden) {
		t.Fatalf("another user attached to job %d: %v", job, err)
	}
	other.Close()
	cl.mu.Lock()
	conn := cl.conn
	cl.mu.Unlock()
	conn.Close("cut")
	for p := attached(); p == nil || p == first; p = attached() {
		select {
		case r := <-done:
			t.Fatalf("the run ended with its connection: %+v %v", r.info, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the client did not attach to its job again within 30 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, w := range workers {
		for _, tag := range []int{6, 5} {
			if _, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error { return c.Send(w, tag, nil) })); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := <-done
	if r.err != nil || r.info.Status != 0 || r.info.State != Exited {
		t.Fatalf("run: %+v %v\n%s", r.info, r.err, out)
	}
	if !strings.Contains(out.String(), "all 2 workers done") {
		t.Fatalf("output after the reconnection %q", out)
	}
}

// TestCheckpointProgressWarns: a job checkpointed every second whose task
// reaches no safe point (it computes for an hour first) has no complete
// checkpoint: its progress names the task that held up the failed rounds
// and the budget it missed, and past three periods warns of it, naming
// the task. Virtual time (synctest).
func TestCheckpointProgressWarns(t *testing.T) {
	shared := t.TempDir()
	secret, err := pki.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		d := New(Config{Output: &syncBuffer{}, SharedDir: shared, Secret: secret, PauseMax: time.Second})
		ctx := context.Background()
		job, root, err := d.StartJob(ctx, &slowSafe{Offset: time.Hour, N: 1}, JobOptions{CheckpointEvery: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1600 * time.Millisecond) // the first round has failed
		synctest.Wait()
		sts := d.JobStatuses()
		if len(sts) != 1 || sts[0].Job != job || sts[0].Last != 0 || sts[0].Warning != "" ||
			!slices.Equal(sts[0].HeldUpBy, []string{root.String()}) || sts[0].HeldUpSeconds <= 0 || sts[0].Failed == "" {
			t.Fatalf("after one failed round: %+v", sts)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		sts = d.JobStatuses()
		if len(sts) != 1 || !strings.Contains(sts[0].Warning, "no complete checkpoint") || !strings.Contains(sts[0].Warning, root.String()) {
			t.Fatalf("after four periods: %+v", sts)
		}
		if _, err := d.KillJob(ctx, job); err != nil {
			t.Fatal(err)
		}
		if err := d.Halt(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestProgressStatus: a job's progress as ps shows it, from its record.
func TestProgressStatus(t *testing.T) {
	t0 := time.Unix(1000, 0)
	late := []task.TID{task.NewTID(2, 3)}
	for _, c := range []struct {
		name     string
		p        ckProgress
		seq      uint64
		every    time.Duration
		now      time.Time
		age      float64
		warnings string // a substring of the warning, or "" for none
	}{
		{"fresh job", ckProgress{started: t0}, 0, time.Second, t0.Add(2 * time.Second), 2, ""},
		{"no checkpoint for 3.5 periods", ckProgress{started: t0, late: late, budget: time.Second}, 0, time.Second, t0.Add(3500 * time.Millisecond), 3.5, "held up by t2:3"},
		{"checkpointed lately", ckProgress{started: t0, done: t0.Add(9 * time.Second)}, 4, time.Second, t0.Add(10 * time.Second), 1, ""},
		{"overdue since a checkpoint", ckProgress{started: t0, done: t0.Add(time.Second), failErr: "quiet timeout"}, 4, time.Second, t0.Add(10 * time.Second), 9, "since checkpoint 4; the last round failed: quiet timeout"},
		{"no period: never overdue", ckProgress{started: t0}, 0, 0, t0.Add(time.Hour), 3600, ""},
	} {
		st := c.p.status(7, c.seq, c.every, c.now)
		if st.AgeSeconds != c.age || st.Last != c.seq || (c.warnings == "") != (st.Warning == "") || !strings.Contains(st.Warning, c.warnings) {
			t.Errorf("%s: %+v", c.name, st)
		}
	}
}

// TestCheckpointsAfterALossAtEachStep: a job with a complete checkpoint
// loses a host (crashed, then deleted by the master) at each step of its
// next checkpoint round in turn — pause, quiet, write (its set's
// directory made), commit. The job rolls back, and its next checkpoints
// complete, numbered after every set before. Before, the discard of the
// round abandoned at its write missed its directory (the rollback had
// taken the driver's record), and the next checkpoint failed with "mkdir
// …: file exists".
func TestCheckpointsAfterALossAtEachStep(t *testing.T) {
	for _, point := range []string{"ckpt:pause", "ckpt:quiet", "ckpt:write", "ckpt:commit"} {
		t.Run(point, func(t *testing.T) {
			var armed atomic.Bool
			var vm *LocalVM
			hook := func(p string) {
				if p != point || !armed.CompareAndSwap(true, false) {
					return
				}
				victim := vm.Daemons[2]
				victim.crash()
				m := vm.Master()
				deadline := time.Now().Add(20 * time.Second)
				for m.hostKnown(victim.cfg.HostID) && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
			}
			shared := t.TempDir()
			vm = startVM(t, 3, Config{SharedDir: shared, Heartbeat: 50 * time.Millisecond, DeadAfter: 500 * time.Millisecond,
				MoveTimeout: 3 * time.Second, FaultHook: hook})
			m := vm.Master()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			job, root, err := m.StartJob(ctx, &watchRoot{N: 3}, JobOptions{Keep: 100})
			if err != nil {
				t.Fatal(err)
			}
			if got := <-watchReady; got != root {
				t.Fatalf("ready %v, want %v", got, root)
			}
			first, err := m.CheckpointJob(ctx, job, "")
			if err != nil {
				t.Fatal(err)
			}
			armed.Store(true)
			lossRound, _ := m.CheckpointJob(ctx, job, "")
			deadline := time.Now().Add(30 * time.Second)
			for m.Rollbacks() < 1 {
				if time.Now().After(deadline) {
					t.Fatal("no rollback after 30 s")
				}
				time.Sleep(10 * time.Millisecond)
			}
			top := max(first.Seq, lossRound.Seq)
			for range 2 {
				c, err := m.CheckpointJob(ctx, job, "")
				if err != nil {
					t.Fatalf("checkpoint after the loss at %s: %v", point, err)
				}
				if c.Seq <= top {
					t.Fatalf("checkpoint %d after sets up to %d", c.Seq, top)
				}
				top = c.Seq
			}
			ts, err := m.AllTasks(ctx, false)
			if err != nil {
				t.Fatal(err)
			}
			for _, ti := range ts {
				if ti.Job == job && ti.TID != root {
					for _, tag := range []int{6, 5} {
						if _, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error { return c.Send(ti.TID, tag, nil) })); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			js, err := m.job(job)
			if err != nil {
				t.Fatal(err)
			}
			if info, err := m.waitJob(ctx, js); err != nil || info.Status != 0 {
				t.Fatalf("job after the loss at %s: %+v %v", point, info, err)
			}
		})
	}
}
