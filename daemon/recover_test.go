package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/routing/member"
	"github.com/dpvm/dpvm/task"
)

// ponger joins group "g" once and answers every number with itself; it
// waits at safe points, so it can move.
type ponger struct{ Joined bool }

func init() { task.Register("daemon.test.ponger", &ponger{}) }

func (p *ponger) Run(c *task.Ctx) error {
	if !p.Joined {
		if _, err := c.Join("g"); err != nil {
			return err
		}
		p.Joined = true
	}
	for {
		var n int
		st, err := c.Recv(task.AnyTask, task.AnyTag, &n, task.Safe())
		if err != nil {
			return err
		}
		if err := c.Send(st.From, 2, n); err != nil {
			return err
		}
	}
}

// TestMasterRecovery: the master crashes; the hosts run on, their tasks
// keep exchanging messages; a master restarted at the same address with
// Recover takes the hosts back with their IDs, tasks, routes and group
// memberships, and spawning and migration work again.
func TestMasterRecovery(t *testing.T) {
	cfg := Config{Heartbeat: 50 * time.Millisecond, DeadAfter: 500 * time.Millisecond, MasterGrace: 30 * time.Second}
	vm := startVM(t, 3, cfg)
	m := vm.Master()
	addr := m.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	po, _, root, next := pingPong(t, ctx, m, "h2", "h3")
	next(10)
	// A move before the loss: the membership travels with the task.
	if _, err := m.Migrate(ctx, po, "h3", Direct); err != nil {
		t.Fatal(err)
	}
	next(10)
	h3 := vm.Daemons[2]
	h3.ht.mu.Lock()
	used := h3.ht.nextNum // the numbers of h3's ID the old master handed out
	h3.ht.mu.Unlock()
	m.crash()
	<-m.Done()
	// The hosts notice and run on; the ping-pong goes on without a master.
	for _, h := range vm.Daemons[1:] {
		for !h.orphan.Load() {
			next(1)
		}
	}
	next(50)

	m2 := startRecoveredMaster(ctx, t, addr, vm.Cluster, cfg)
	for len(m2.Hosts()) < 3 {
		next(1) // each pong is a moment for the hosts to register again
	}
	if hs := m2.Hosts(); hs[1].ID != 2 || hs[2].ID != 3 {
		t.Fatalf("hosts after recovery: %+v", hs)
	}
	if mem, err := m2.groups.members(jobGroup(0, "g")); err != nil || !slices.Equal(mem, []task.TID{po}) {
		t.Fatalf("group g after recovery: %v %v", mem, err)
	}
	if h := m2.routeHost(po); h != 3 {
		t.Fatalf("route of %v after recovery: %v", po, h)
	}
	// Spawning works, and numbers the master's tasks above any it had,
	// and a host's above any the old master handed out for it.
	tid, err := m2.SpawnTask(fn(t, func(c *task.Ctx, _ int) error {
		got, err := c.Spawn(fn(t, func(*task.Ctx, int) error { return nil }), 1, task.OnHost("h3"))
		if err == nil && (got[0].Host() != 3 || got[0].Num() <= used) {
			err = fmt.Errorf("spawned %v, want it on h3, numbered above %d (numbers in use)", got, used)
		}
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	if tid.Host() != MasterID || tid.Num() <= root.Num() {
		t.Fatalf("the new master's task %v reuses a number the old one gave (%v)", tid, root)
	}
	if info, err := m2.Wait(ctx, tid); err != nil || info.Status != 0 {
		t.Fatalf("spawn after recovery: %+v %v", info, err)
	}
	// Migration works: the ponger moves back to h2 and the ping-pong goes on.
	if _, err := m2.Migrate(ctx, po, "h2", Direct); err != nil {
		t.Fatal(err)
	}
	last := next(20)
	t.Logf("%d pings answered in order through the master's loss and recovery", last+1)
}

// TestRecoveryResolvesHalfDoneMoves: the master dies in the middle of a
// migration — after the checkpoint has left the origin, or after the
// destination has restored the task — and a recovered master undoes the
// move (the task runs at its origin again) or commits it (the origin
// forgets it); either way the ping-pong through the moving task goes on,
// in order.
func TestRecoveryResolvesHalfDoneMoves(t *testing.T) {
	for _, c := range []struct {
		point string
		at    task.HostID
	}{{"migrate:sent", 2}, {"migrate:restored", 4}} {
		t.Run(c.point, func(t *testing.T) {
			var m *Daemon
			cfg := Config{Heartbeat: 50 * time.Millisecond, DeadAfter: 500 * time.Millisecond, MasterGrace: 30 * time.Second}
			cfg.FaultHook = func(point string) {
				if point == c.point {
					m.crash()
				}
			}
			vm := startVM(t, 4, cfg)
			m = vm.Master()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			po, _, _, next := pingPong(t, ctx, m, "h2", "h3")
			next(10)
			_, err := m.Migrate(ctx, po, "h4", Direct)
			if err == nil && c.point == "migrate:sent" {
				t.Fatal("the move completed without its master")
			}
			select {
			case <-m.Done():
			case <-ctx.Done():
				t.Fatalf("the master did not fail at %s: the move ended with %v", c.point, err)
			}
			m2 := startRecoveredMaster(ctx, t, m.Addr(), vm.Cluster, cfg)
			for len(m2.Hosts()) < 4 {
				next(1) // each pong is a moment for the hosts to register again
			}
			// The move is resolved: the origin lets go of it, or runs the
			// task again.
			origin := vm.Daemons[1]
			for {
				origin.ht.mu.Lock()
				_, moving := origin.ht.moving[po]
				origin.ht.mu.Unlock()
				if !moving {
					break
				}
				next(1)
			}
			next(30) // and the ponger answers from where it is
			if h := m2.routeHost(po); h != c.at {
				t.Fatalf("the ponger is routed to %v, want %v", h, c.at)
			}
		})
	}
}

// TestMigrateUnwritableSharedDirAndUnknownType: an indirect move whose
// origin cannot write the shared directory (a full or read-only disk acts
// the same: the write fails) aborts, and the task runs on at its origin
// with every message; a destination whose binary lacks the task's type
// refuses to prepare, and the task stays where it was.
func TestMigrateUnwritableSharedDirAndUnknownType(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The origin's shared directory is a path under a regular file.
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	vm := startVM(t, 2, Config{SharedDir: t.TempDir()})
	m := vm.Master()
	bad, err := Start(ctx, Config{Listen: "127.0.0.1:0", Join: m.Addr(), Credential: hostCred(t, vm, "bad"), Output: &syncBuffer{}, SharedDir: filepath.Join(file, "shared")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bad.Halt(context.Background()) })
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		mv, err := c.Spawn(&movingTask{}, 1, task.OnHost(bad.Name()))
		if err != nil {
			return err
		}
		sent := 0
		send := func(n int) error {
			for range n {
				if err := c.Send(mv[0], 1, sent); err != nil {
					return err
				}
				sent++
			}
			return nil
		}
		if err := send(100); err != nil {
			return err
		}
		if _, err := m.Migrate(ctx, mv[0], "h2", Indirect); err == nil || !strings.Contains(err.Error(), "aborted") {
			return fmt.Errorf("an indirect move from a host that cannot write: %v", err)
		}
		if err := send(100); err != nil {
			return err
		}
		if err := stopMover(c, mv[0], sent); err != nil {
			return fmt.Errorf("after the failed move: %w", err)
		}
		return nil
	})
	// Version skew: a destination without the type refuses it.
	if err := vm.Daemons[1].prepareArrival(migStep{TID: task.NewTID(1, 99), Type: "a.type.this.binary.lacks", Host: 1, Epoch: 2}); !errors.Is(err, task.ErrUnknownType) {
		t.Fatalf("preparing a task of an unknown type: %v", err)
	}
}

// pingPong starts a ponger on host a and a pinger on host b, from a root
// task on m, and returns their TIDs, the root's, and next, which waits for
// n more answers in order (failing the test when ctx ends first) and
// returns the last.
func pingPong(t *testing.T, ctx context.Context, m *Daemon, a, b string) (po, pi, root task.TID, next func(n int) int) {
	t.Helper()
	pongs := make(chan int, 1<<16)
	pinger := fn(t, func(c *task.Ctx, _ int) error {
		var to task.TID
		if _, err := c.Recv(c.Parent(), 1, &to, task.Safe()); err != nil {
			return err
		}
		for i := 0; ; i++ {
			if err := c.Send(to, 1, i); err != nil {
				return err
			}
			var r int
			if _, err := c.Recv(to, 2, &r, task.Safe()); err != nil {
				return err
			}
			if r != i {
				return fmt.Errorf("pong %d for ping %d", r, i)
			}
			pongs <- r
		}
	})
	info := runRoot(t, m, func(c *task.Ctx, _ int) error {
		x, err := c.Spawn(&ponger{}, 1, task.OnHost(a))
		if err != nil {
			return err
		}
		y, err := c.Spawn(pinger, 1, task.OnHost(b))
		if err != nil {
			return err
		}
		po, pi = x[0], y[0]
		return c.Send(pi, 1, po)
	})
	next = func(n int) int {
		t.Helper()
		last := -1
		for range n {
			select {
			case last = <-pongs:
			case <-ctx.Done():
				t.Fatal("the ping-pong stopped")
			}
		}
		return last
	}
	return po, pi, info.TID, next
}

// startRecoveredMaster starts a master with --recover on addr, with the
// heartbeat of cfg, halted when the test ends.
func startRecoveredMaster(ctx context.Context, t *testing.T, addr string, cl *pki.Cluster, cfg Config) *Daemon {
	t.Helper()
	m, err := Start(ctx, Config{Listen: addr, Master: true, Recover: true, Credential: cl.Master, Secret: cl.Secret, Output: &syncBuffer{},
		Heartbeat: cfg.Heartbeat, DeadAfter: cfg.DeadAfter})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Halt(hctx)
	})
	return m
}

// TestAdmitAgainIsIdempotent: a recovered master that admitted a host
// registering again answers that host's next try (its answer was lost) as
// the first, with the same host ID, and still refuses another host (by
// its certificate's name) claiming that ID.
func TestAdmitAgainIsIdempotent(t *testing.T) {
	cfg := Config{Heartbeat: 50 * time.Millisecond, DeadAfter: 500 * time.Millisecond}
	vm := startVM(t, 1, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := startRecoveredMaster(ctx, t, "127.0.0.1:0", vm.Cluster, cfg)
	h := func(name string) *hello {
		return &hello{Host: 2, Name: name, Addr: "127.0.0.1:9", Rejoin: true, Report: &rejoinReport{}, Info: HostInfo{Build: ThisBuild()}}
	}
	first, _, _, err := m.admitAgain(h("h2"), "127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	again, _, _, err := m.admitAgain(h("h2"), "127.0.0.1:9")
	if err != nil {
		t.Fatalf("the same host registering again: %v", err)
	}
	// The registry, not the host list: a host goes on the list the
	// others hear of once its registration is answered.
	hosts := m.Hosts()
	if again.ID != first.ID || again.Name != first.Name || again.Addr != first.Addr {
		t.Fatalf("answered %+v the second time, %+v the first", again, first)
	}
	if len(hosts) != 2 {
		t.Fatalf("hosts after the second try: %+v, want the master and h2", hosts)
	}
	if _, _, _, err := m.admitAgain(h("h3"), "127.0.0.1:9"); err == nil {
		t.Fatal("another host took h2's ID")
	}
}

// TestReadmitWhileRejoining: a host the master deleted registers again,
// and then once more before it has said that it stopped its tasks (the
// master's first answer was lost or late). It is told both times that
// its tasks were given up, and is announced only once it says it stopped
// them. Before, the second registration was taken as that of a member
// with nothing lost: the host never said it had stopped anything, and the
// master showed it rejoining for good.
func TestReadmitWhileRejoining(t *testing.T) {
	cfg := Config{Heartbeat: 50 * time.Millisecond, DeadAfter: 500 * time.Millisecond}
	vm := startVM(t, 1, cfg)
	m := vm.Master()
	m.nw.mu.Lock()
	m.nw.mem.m.Step(time.Now(), member.Event{Kind: member.Forget, Host: 2, Name: "h2", Silent: true})
	m.nw.mu.Unlock()
	tid := task.NewTID(2, 1)
	h := &hello{Host: 2, Name: "h2", Addr: "127.0.0.1:9", Rejoin: true, Info: HostInfo{Build: ThisBuild()},
		Report: &rejoinReport{Tasks: []rejoinTask{{TID: tid}}}}
	for try := 1; try <= 2; try++ {
		_, lost, announce, err := m.admitAgain(h, "127.0.0.1:9")
		if err != nil {
			t.Fatalf("registration %d: %v", try, err)
		}
		if announce || !slices.Equal(lost, []task.TID{tid}) {
			t.Fatalf("registration %d: announce %v, lost %v; want its task given up and no announcement yet", try, announce, lost)
		}
	}
	if err := m.rejoined(2); err != nil {
		t.Fatal(err)
	}
	_, lost, announce, err := m.admitAgain(h, "127.0.0.1:9")
	if err != nil || !announce || len(lost) != 0 {
		t.Fatalf("a member registering again: announce %v, lost %v, %v; want taken back as it is", announce, lost, err)
	}
}
