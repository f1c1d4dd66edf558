package daemon

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/task"
)

// memUsers starts a virtual machine of n daemons on the in-memory network
// with its audit lines in the returned buffer, and dials its master as
// users alice and bob and as the admin.
func memUsers(t *testing.T, n int, cfg Config) (vm *LocalVM, alice, bob, admin *Client, audit *syncBuffer) {
	t.Helper()
	audit = &syncBuffer{}
	cfg.AuditLogger = slog.New(slog.NewTextHandler(audit, nil))
	vm = startMemVMWith(t, n, nil, cfg)
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dial := func(cred *pki.Credential) *Client {
		cl, err := DialNetwork(ctx, m.cfg.Network, m.Addr(), cred)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	user := func(name string) *Client {
		cred, err := vm.Cluster.User(name, pki.RoleUser)
		if err != nil {
			t.Fatal(err)
		}
		return dial(cred)
	}
	return vm, user("alice"), user("bob"), dial(vm.Cluster.Admin), audit
}

// waitingType is a task type that waits for a message that never comes.
func waitingType(t *testing.T) (typ string, state []byte) {
	typ, state, err := task.EncodeState(fn(t, func(c *task.Ctx, _ int) error {
		_, err := c.Recv(task.AnyTask, 1, nil, task.Safe())
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	return typ, state
}

// jobCount is how many jobs the master holds.
func jobCount(m *Daemon) int {
	m.reg.mu.Lock()
	defer m.reg.mu.Unlock()
	return len(m.reg.byID)
}

// TestJobActionsCheckOwner: as alice, killing, checkpointing and moving
// bob's job and its root are refused with ErrForbidden and audited as
// refused; bob and the admin may.
func TestJobActionsCheckOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vm, alice, bob, admin, audit := memUsers(t, 2, Config{SharedDir: t.TempDir()})
	m := vm.Master()
	typ, state := waitingType(t)
	roots, err := bob.SpawnRoots(ctx, typ, state, 1, "", JobOptions{})
	if err != nil || len(roots) != 1 {
		t.Fatalf("bob starts a job: %v %v", roots, err)
	}
	job := jobOf(t, m, roots[0])
	if n, err := alice.KillJob(ctx, job); !errors.Is(err, ErrForbidden) {
		t.Fatalf("alice killed bob's job %d: %d tasks, %v", job, n, err)
	}
	if _, err := alice.Checkpoint(ctx, job, ""); !errors.Is(err, ErrForbidden) {
		t.Fatalf("alice checkpointed bob's job: %v", err)
	}
	if _, err := alice.Migrate(ctx, roots[0], "h2", Direct); !errors.Is(err, ErrForbidden) {
		t.Fatalf("alice moved bob's root: %v", err)
	}
	if err := alice.Kill(ctx, roots[0]); !errors.Is(err, ErrForbidden) {
		t.Fatalf("alice killed bob's root: %v", err)
	}
	if _, err := alice.Spawn(ctx, typ, state, 1, ""); err != nil {
		t.Fatalf("alice spawns a task of her own: %v", err)
	}
	lines := audit.String()
	for _, method := range []string{mKillJob, mCheckpoint, mMigrate, mKill} {
		want := "who=alice role=user"
		found := false
		for _, l := range strings.Split(lines, "\n") {
			if strings.Contains(l, want) && strings.Contains(l, "method="+method+" ") && strings.Contains(l, `outcome="refused: `) {
				found = true
			}
		}
		if !found {
			t.Errorf("no refused %s of alice's in the audit log:\n%s", method, lines)
		}
	}
	if _, err := bob.Checkpoint(ctx, job, ""); err != nil {
		t.Fatalf("bob checkpoints his job: %v", err)
	}
	if n, err := admin.KillJob(ctx, job); err != nil || n != 1 {
		t.Fatalf("the admin kills bob's job: %d, %v", n, err)
	}
}

// TestRestartCheckpointOwner: a checkpoint records its job's owner; alice
// may not restart bob's, and the admin's restart of it is bob's job.
func TestRestartCheckpointOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vm, alice, bob, admin, _ := memUsers(t, 2, Config{SharedDir: t.TempDir()})
	m := vm.Master()
	typ, state := waitingType(t)
	roots, err := bob.SpawnRoots(ctx, typ, state, 1, "", JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	job := jobOf(t, m, roots[0])
	ck, err := bob.Checkpoint(ctx, job, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.KillJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	waitJobGone(t, m, roots)
	if _, err := alice.Restart(ctx, ck.Dir, JobOptions{}, &syncBuffer{}); !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), "bob's") {
		t.Fatalf("alice restarted bob's checkpoint: %v", err)
	}
	restarted := make(chan error, 1)
	go func() {
		_, err := admin.Restart(ctx, ck.Dir, JobOptions{}, &syncBuffer{})
		restarted <- err
	}()
	var again uint64
	// The job's owner is recorded as the restart is admitted, before its
	// tasks are restored: wait until its root runs, so that a kill finds it.
	waitFor(t, ctx, "the restarted job's root to run", func() bool {
		m.owners.mu.Lock()
		for j, o := range m.owners.jobs {
			if j != job && o.name == "bob" {
				again = j
			}
		}
		m.owners.mu.Unlock()
		if again == 0 {
			return false
		}
		ts, err := m.AllTasks(ctx, false)
		return err == nil && slices.ContainsFunc(ts, func(ti TaskInfo) bool { return ti.Job == again })
	})
	if _, err := alice.KillJob(ctx, again); !errors.Is(err, ErrForbidden) {
		t.Fatalf("alice killed bob's restarted job: %v", err)
	}
	if n, err := bob.KillJob(ctx, again); err != nil || n != 1 {
		t.Fatalf("bob kills his restarted job: %d, %v", n, err)
	}
	if err := <-restarted; err != nil {
		t.Logf("the admin's restart ends with its job: %v", err)
	}
}

// TestSpawnQuotas: a user's spawns are bounded by their quota of tasks
// and of jobs, and a job's by its quota, with ErrLimit; a spawn of one job
// per root past MaxSpawn is refused before any job starts; admins are not
// held to the users' quotas.
func TestSpawnQuotas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vm, alice, _, admin, _ := memUsers(t, 2, Config{MaxUserTasks: 5, MaxUserJobs: 2, MaxJobTasks: 4, MaxSpawn: 1000})
	m := vm.Master()
	typ, state := waitingType(t)
	if _, err := alice.Spawn(ctx, typ, state, 6, ""); !errors.Is(err, ErrLimit) {
		t.Fatalf("alice spawned 6 tasks, quota 5: %v", err)
	}
	if _, err := alice.SpawnRoots(ctx, typ, state, 2000000000, "", JobOptions{}); !errors.Is(err, ErrLimit) {
		t.Fatalf("alice spawned 2e9 jobs: %v", err)
	}
	if _, err := alice.SpawnRoots(ctx, typ, state, 3, "", JobOptions{}); !errors.Is(err, ErrLimit) {
		t.Fatalf("alice spawned 3 jobs, quota 2: %v", err)
	}
	if n := jobCount(m); n != 0 {
		t.Fatalf("refused spawns left %d jobs", n)
	}
	tids, err := alice.Spawn(ctx, typ, state, 3, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.SpawnRoots(ctx, typ, state, 2, "", JobOptions{}); err != nil {
		t.Fatalf("alice starts 2 jobs, holding 3 tasks: %v", err)
	}
	if _, err := alice.Spawn(ctx, typ, state, 1, ""); !errors.Is(err, ErrLimit) {
		t.Fatalf("alice spawned a sixth task: %v", err)
	}
	// A task that ends gives its place back.
	if err := alice.Kill(ctx, tids[0]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the killed task to leave alice's count", func() bool {
		n, _ := m.owners.held("alice")
		return n == 4
	})
	if _, err := alice.Spawn(ctx, typ, state, 1, ""); err != nil {
		t.Fatalf("alice spawns in the place of a task that ended: %v", err)
	}
	if _, err := admin.Spawn(ctx, typ, state, 6, ""); err != nil {
		t.Fatalf("the admin spawns past a user's quota: %v", err)
	}

	// A root spawning in a loop meets its job's quota with ErrLimit.
	got := make(chan error, 1)
	spawned := 0
	_, _, err = m.StartJob(ctx, fn(t, func(c *task.Ctx, _ int) error {
		w := fn(t, func(c *task.Ctx, _ int) error {
			_, err := c.Recv(task.AnyTask, 1, nil, task.Safe())
			return err
		})
		for {
			if _, err := c.Spawn(w, 1); err != nil {
				got <- err
				_, err := c.Recv(task.AnyTask, 1, nil, task.Safe())
				return err
			}
			spawned++
		}
	}), JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, ErrLimit) || spawned != 3 {
		t.Fatalf("a root spawning in a loop: %d spawned, then %v; want 3, then ErrLimit", spawned, err)
	}
}

// TestSpawnEndsWithCaller: a spawn of many jobs stops when the client
// that asked for it goes.
func TestSpawnEndsWithCaller(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	vm, alice, _, _, audit := memUsers(t, 2, Config{MaxUserTasks: 1 << 20, MaxUserJobs: 1 << 20, MaxJobTasks: 8})
	m := vm.Master()
	typ, state := waitingType(t)
	const asked = 1 << 20
	spawned := make(chan error, 1)
	go func() {
		_, err := alice.SpawnRoots(ctx, typ, state, asked, "", JobOptions{})
		spawned <- err
	}()
	waitFor(t, ctx, "the first jobs", func() bool { return jobCount(m) >= 3 })
	alice.Close()
	<-spawned
	waitFor(t, ctx, "the spawn's call to end", func() bool {
		return strings.Contains(audit.String(), "method=spawn outcome=")
	})
	if n := jobCount(m); n >= asked {
		t.Fatalf("%d jobs started for a client that went away", n)
	}
	if !strings.Contains(audit.String(), "context canceled") {
		t.Fatalf("the spawn did not say it stopped:\n%s", audit.String())
	}
}

// TestOwnersCounts: the master's counts behind the quotas — a reservation
// holds its place until its spawn answers, a task that ends before its
// spawn's answer is not counted, a job's end drops its tasks, and an
// admin is held to the job's quota only.
func TestOwnersCounts(t *testing.T) {
	var o owners
	q := quota{userTasks: 4, userJobs: 1, jobTasks: 3}
	alice := owner{name: "alice"}
	done, err := o.admit(&alice, 0, 3, q)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.admit(&alice, 0, 2, q); !errors.Is(err, ErrLimit) {
		t.Fatalf("a spawn past a pending reservation: %v, want ErrLimit", err)
	}
	o.ended(task.NewTID(2, 3)) // ends before the answer
	done([]task.TID{task.NewTID(2, 1), task.NewTID(2, 2), task.NewTID(2, 3)})
	if n, _ := o.held("alice"); n != 2 {
		t.Fatalf("alice holds %d tasks, want 2 (one ended before its spawn answered)", n)
	}
	release, err := o.admitJobs(alice, 1, q)
	if err != nil {
		t.Fatal(err)
	}
	o.setJob(9, alice)
	release(1)
	if _, err := o.admitJobs(alice, 1, q); !errors.Is(err, ErrLimit) {
		t.Fatalf("a second job, quota 1: %v, want ErrLimit", err)
	}
	done, err = o.admit(nil, 9, 2, q) // the job's tasks are its owner's
	if err != nil {
		t.Fatal(err)
	}
	o.addJobTasks(9, []task.TID{task.NewTID(3, 1), task.NewTID(3, 2)}) // as they start
	done([]task.TID{task.NewTID(3, 1), task.NewTID(3, 2)})
	if n, jobs := o.held("alice"); n != 4 || jobs != 1 {
		t.Fatalf("alice holds %d tasks and %d jobs, want 4 and 1", n, jobs)
	}
	if _, err := o.admit(nil, 9, 1, q); !errors.Is(err, ErrLimit) {
		t.Fatalf("a fifth task of alice's: %v, want ErrLimit", err)
	}
	o.jobOver(9)
	if n, jobs := o.held("alice"); n != 2 || jobs != 0 {
		t.Fatalf("after her job's end alice holds %d tasks and %d jobs, want 2 and 0", n, jobs)
	}
	root := owner{name: "root", admin: true}
	o.setJob(10, root)
	if _, err := o.admit(nil, 10, 3, q); err != nil {
		t.Fatalf("an admin's job within its quota: %v", err)
	}
	if _, err := o.admit(nil, 10, 4, q); !errors.Is(err, ErrLimit) {
		t.Fatalf("an admin's job past its quota: %v, want ErrLimit", err)
	}
	if _, err := o.admit(&root, 0, 100, q); err != nil {
		t.Fatalf("an admin past a user's quota: %v", err)
	}
}

// TestCancelledCallStops: a spawn of many jobs stops when the client
// gives the call up (its context ends), and the client's connection
// serves on.
func TestCancelledCallStops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	vm, alice, _, _, audit := memUsers(t, 2, Config{MaxUserTasks: 1 << 20, MaxUserJobs: 1 << 20, MaxJobTasks: 8})
	m := vm.Master()
	typ, state := waitingType(t)
	const asked = 1 << 20
	callCtx, giveUp := context.WithCancel(ctx)
	spawned := make(chan error, 1)
	go func() {
		_, err := alice.SpawnRoots(callCtx, typ, state, asked, "", JobOptions{})
		spawned <- err
	}()
	waitFor(t, ctx, "the first jobs", func() bool { return jobCount(m) >= 3 })
	giveUp()
	if err := <-spawned; !errors.Is(err, context.Canceled) {
		t.Fatalf("the given-up spawn: %v", err)
	}
	waitFor(t, ctx, "the spawn's call to end", func() bool {
		return strings.Contains(audit.String(), "method=spawn outcome=")
	})
	if n := jobCount(m); n >= asked {
		t.Fatalf("%d jobs started for a call given up", n)
	}
	if !strings.Contains(audit.String(), "context canceled") {
		t.Fatalf("the spawn did not end with its call:\n%s", audit.String())
	}
	if hs, err := alice.Hosts(ctx); err != nil || len(hs) != 2 {
		t.Fatalf("the client after giving a call up: %v %v", hs, err)
	}
}
