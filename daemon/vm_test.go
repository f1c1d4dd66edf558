package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// startVM starts an in-process virtual machine of n daemons talking QUIC
// over loopback, halted when the test ends.
func startVM(t testing.TB, n int, cfg Config) *LocalVM {
	t.Helper()
	if cfg.Output == nil {
		cfg.Output = &syncBuffer{}
	}
	if cfg.Logger == nil && testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vm, err := StartLocalVM(ctx, n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Halt(10 * time.Second) })
	return vm
}

// adminClient dials vm's master as the cluster's admin; the client is
// closed when the test ends.
func adminClient(t testing.TB, ctx context.Context, vm *LocalVM) *Client {
	t.Helper()
	cl, err := Dial(ctx, vm.Master().Addr(), vm.Cluster.Admin)
	if err != nil {
		t.Fatalf("dial the master as the admin: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// hostCred issues a host certificate named name under vm's CA, for another
// daemon to join it.
func hostCred(t testing.TB, vm *LocalVM, name string) *pki.Credential {
	t.Helper()
	c, err := vm.Cluster.Host(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestVMHostsAndPlacement(t *testing.T) {
	vm := startVM(t, 3, Config{})
	m := vm.Master()
	hosts := m.Hosts()
	if len(hosts) != 3 || hosts[0].ID != 1 || !hosts[0].Master || hosts[2].ID != 3 || hosts[2].Name != "h3" {
		t.Fatalf("hosts %+v", hosts)
	}
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		echo := fn(t, func(c *task.Ctx, _ int) error {
			return c.Send(c.Parent(), 1, c.HostName())
		})
		// Round-robin over the three hosts, in order.
		tids, err := c.Spawn(echo, 6)
		if err != nil {
			return err
		}
		for i, tid := range tids {
			var host string
			if _, err := c.Recv(tid, 1, &host); err != nil {
				return err
			}
			if want := fmt.Sprintf("h%d", (i%3)+1); tid.Host().String() != want || host != want {
				return fmt.Errorf("task %d is %v on %s, want on %s", i, tid, host, want)
			}
		}
		// Explicit placement, by name and by ID.
		for _, h := range []string{"h3", "h2"} {
			tid, err := c.Spawn(echo, 1, task.OnHost(h))
			if err != nil {
				return err
			}
			var host string
			if _, err := c.Recv(tid[0], 1, &host); err != nil || host != h {
				return fmt.Errorf("spawned on %s, ran on %s: %v", h, host, err)
			}
		}
		if _, err := c.Spawn(echo, 1, task.OnHost("h9")); !errors.Is(err, task.ErrNoSuchHost) {
			return fmt.Errorf("spawn on a missing host: %v", err)
		}
		if _, err := c.Spawn(&fnTask{}, 1, task.OnHost("h2")); err != nil {
			return fmt.Errorf("a second spawn on h2: %v", err)
		}
		return nil
	})
}

// TestVMPerPairOrder streams numbered messages between tasks on different
// hosts, many pairs at once, with wildcard receives.
func TestVMPerPairOrder(t *testing.T) {
	vm := startVM(t, 3, Config{})
	pairOrder(t, vm.Master(), 3, 6, 1500)
}

// TestVMSlowReceiverBlocksSender checks flow control: with a small window,
// a sender to a receiver that does not read is held back, and released
// when it reads.
func TestVMSlowReceiverBlocksSender(t *testing.T) {
	vm := startVM(t, 2, Config{Window: 64 << 10, MailboxHigh: 64 << 10})
	runRoot(t, vm.Master(), func(c *task.Ctx, _ int) error {
		sink := fn(t, func(c *task.Ctx, _ int) error {
			if _, err := c.Join("slow"); err != nil {
				return err
			}
			// Wait for the go-ahead, which comes through the group server:
			// messages to this task are held back once its window is full.
			if err := c.Barrier("slow", 2); err != nil {
				return err
			}
			for i := range 200 {
				var b []byte
				if _, err := c.Recv(c.Parent(), 1, &b); err != nil || int(b[0]) != i%256 {
					return fmt.Errorf("message %d: %v %v", i, b[:1], err)
				}
			}
			return c.Send(c.Parent(), 2, nil)
		})
		if _, err := c.Join("slow"); err != nil {
			return err
		}
		peer, err := c.Spawn(sink, 1, task.OnHost("h2"))
		if err != nil {
			return err
		}
		msg := make([]byte, 4<<10)
		blocked := false
		for i := range 200 {
			msg[0] = byte(i)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			err := c.Send(peer[0], 1, msg, task.WithContext(ctx))
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				// Let the receiver drain, then send this message for real.
				if !blocked {
					if err := c.Barrier("slow", 2); err != nil {
						return err
					}
				}
				blocked = true
				if err := c.Send(peer[0], 1, msg); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return err
			}
		}
		if !blocked {
			return errors.New("800 KiB went to a receiver that was not reading, through a 64 KiB window")
		}
		_, err = c.Recv(peer[0], 2, nil)
		return err
	})
}

func TestVMCollectivesAcrossHosts(t *testing.T) {
	vm := startVM(t, 3, Config{})
	collectiveOn(t, vm.Master(), 7, groupComm)
}

func TestVMNotifyKillAndPS(t *testing.T) {
	vm := startVM(t, 3, Config{})
	m := vm.Master()
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		wait := fn(t, func(c *task.Ctx, _ int) error {
			if err := c.Send(c.Parent(), 3, nil); err != nil {
				return err
			}
			_, err := c.Recv(task.AnyTask, 99, nil)
			return err
		})
		done := fn(t, func(c *task.Ctx, _ int) error {
			for i := range 5 {
				if err := c.Send(c.Parent(), 4, i); err != nil {
					return err
				}
			}
			return task.Exit(7)
		})
		w, err := c.Spawn(wait, 1, task.OnHost("h2"))
		if err != nil {
			return err
		}
		if _, err := c.Recv(w[0], 3, nil); err != nil {
			return err
		}
		// ps on the master gathers every host's tasks.
		ts, err := m.AllTasks(context.Background(), false)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(ts, func(ti TaskInfo) bool { return ti.TID == w[0] && ti.Host == "h2" && ti.State == Running }) {
			return fmt.Errorf("ps lacks %v on h2: %+v", w[0], ts)
		}
		if err := c.Notify(task.TaskExit, 50, w[0]); err != nil {
			return err
		}
		if err := c.Kill(w[0]); err != nil {
			return err
		}
		var n task.Notice
		if _, err := c.Recv(w[0], 50, &n); err != nil || n.Status != -1 || n.Err != "killed" {
			return fmt.Errorf("kill notice %+v %v", n, err)
		}
		// The exit notice comes after the task's last messages.
		d, err := c.Spawn(done, 1, task.OnHost("h3"))
		if err != nil {
			return err
		}
		if err := c.Notify(task.TaskExit, 51, d[0]); err != nil {
			return err
		}
		for i := range 5 {
			var v int
			if _, err := c.Recv(d[0], task.AnyTag, &v); err != nil || v != i {
				return fmt.Errorf("message %d from %v: %d %v (a notice overtook it?)", i, d[0], v, err)
			}
		}
		if _, err := c.Recv(d[0], 51, &n); err != nil || n.Status != 7 {
			return fmt.Errorf("exit notice %+v %v", n, err)
		}
		// Sending to the exited remote task fails once its host says so;
		// notify on it answers at once.
		if err := c.Notify(task.TaskExit, 52, d[0]); err != nil {
			return err
		}
		if _, err := c.Recv(task.AnyTask, 52, &n); err != nil || n.Status != 7 {
			return fmt.Errorf("late notice %+v %v", n, err)
		}
		return nil
	})
}

// TestVMHostLoss crashes a host (its socket closed without a word): the
// master deletes it after the heartbeat timeout, watchers get exit notices
// for its tasks and a host-delete notice, and the rest of the machine goes
// on.
func TestVMHostLoss(t *testing.T) {
	vm := startVM(t, 3, Config{Heartbeat: 100 * time.Millisecond, DeadAfter: 2 * time.Second})
	m, victim := vm.Master(), vm.Daemons[2]
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		hang := fn(t, func(c *task.Ctx, _ int) error {
			if err := c.Send(c.Parent(), 3, nil); err != nil {
				return err
			}
			_, err := c.Recv(task.AnyTask, 99, nil)
			return err
		})
		lost, err := c.Spawn(hang, 1, task.OnHost("h3"))
		if err != nil {
			return err
		}
		alive, err := c.Spawn(hang, 1, task.OnHost("h2"))
		if err != nil {
			return err
		}
		for _, t := range append(lost, alive...) {
			if _, err := c.Recv(t, 3, nil); err != nil {
				return err
			}
		}
		if err := c.Notify(task.TaskExit, 60, lost[0]); err != nil {
			return err
		}
		if err := c.Notify(task.HostDelete, 61); err != nil {
			return err
		}
		if err := c.Notify(task.HostAdd, 62); err != nil {
			return err
		}
		victim.crash()
		var n task.Notice
		if _, err := c.Recv(lost[0], 60, &n); err != nil || n.Err != "lost with its host" {
			return fmt.Errorf("loss notice %+v %v", n, err)
		}
		if _, err := c.Recv(task.AnyTask, 61, &n); err != nil || n.Kind != task.HostDelete || n.Host != 3 {
			return fmt.Errorf("host-delete notice %+v %v", n, err)
		}
		if len(m.Hosts()) != 2 {
			return fmt.Errorf("hosts after the loss: %+v", m.Hosts())
		}
		// The survivors go on.
		if err := c.Send(alive[0], 99, nil); err != nil {
			return err
		}
		// A new host joins with a new ID: IDs are never reused.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cred, err := vm.Cluster.Host("h4")
		if err != nil {
			return err
		}
		nd, err := Start(ctx, Config{Listen: "127.0.0.1:0", Join: m.Addr(), Credential: cred, Output: &syncBuffer{}})
		if err != nil {
			return err
		}
		defer nd.Halt(ctx)
		if nd.HostID() != 4 {
			return fmt.Errorf("new host got ID %v, want h4", nd.HostID())
		}
		if _, err := c.Recv(task.AnyTask, 62, &n); err != nil || n.Kind != task.HostAdd || n.Host != 4 {
			return fmt.Errorf("host-add notice %+v %v", n, err)
		}
		return nil
	})
	select {
	case <-victim.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the crashed daemon did not stop")
	}
}

// crash makes the daemon vanish as a killed process would: its socket is
// closed without telling anyone, then it stops.
func (d *Daemon) crash() {
	why := errors.New("crashed")
	d.whyMu.Lock()
	d.why = why
	d.whyMu.Unlock()
	d.nw.tr.Abort()
	go d.stop(why)
}

// TestMasterLossStopsHosts: when the master disappears and none comes
// back within the grace period, every host stops with ErrMasterLost. A
// host finds its master lost by the master detector's silence
// (DeadAfter), and under swim, which sends the master no pings, when its
// QUIC connection to the master times out (here 2 s idle).
func TestMasterLossStopsHosts(t *testing.T) {
	for _, det := range []string{DetectorMaster, DetectorSwim} {
		t.Run(det, func(t *testing.T) {
			vm := startVM(t, 3, Config{Heartbeat: 100 * time.Millisecond, DeadAfter: time.Second, MasterGrace: 300 * time.Millisecond,
				Detector: det, Transport: transport.Config{IdleTimeout: 2 * time.Second}})
			vm.Master().crash()
			for _, d := range vm.Daemons[1:] {
				select {
				case <-d.Done():
				case <-time.After(20 * time.Second):
					t.Fatalf("%s still runs without its master", d.Name())
				}
				if !errors.Is(d.Err(), ErrMasterLost) {
					t.Errorf("%s stopped with %v, want ErrMasterLost", d.Name(), d.Err())
				}
			}
		})
	}
}

// TestRefusesStrangers checks that a daemon or client without the cluster
// key cannot join or control the virtual machine, and that a client cannot
// inject messages.
func TestRefusesStrangers(t *testing.T) {
	vm := startVM(t, 2, Config{})
	m := vm.Master()
	other, err := pki.NewCluster(time.Now(), "h1", "admin")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	otherHost, err := other.Host("h3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Start(ctx, Config{Listen: "127.0.0.1:0", Join: m.Addr(), Credential: otherHost, Transport: transport.Config{HandshakeTimeout: time.Second}}); err == nil {
		t.Fatal("a daemon with another key joined")
	}
	if _, err := Dial(ctx, m.Addr(), other.Admin); err == nil {
		t.Fatal("a client with another key connected")
	}
	cl := adminClient(t, ctx, vm)
	if hs, err := cl.Hosts(ctx); err != nil || len(hs) != 2 {
		t.Fatalf("client conf: %v %v", hs, err)
	}
	// A client may not call daemon-only methods...
	if err := cl.call(ctx, mJoin, groupArgs{Group: "g", TID: task.NewTID(1, 1)}, nil); err == nil {
		t.Fatal("a client joined a group")
	}
	// ...nor send messages: the connection is closed and nothing arrives.
	victim := make(chan task.TID, 1)
	got := make(chan error, 1)
	tid, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error {
		victim <- c.MyTID()
		_, err := c.Recv(task.AnyTask, task.AnyTag, nil, task.Timeout(time.Second))
		got <- err
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	to := <-victim
	e := routing.Envelope{From: task.NewTID(2, 1), To: to, Seq: 1, Tag: 1, Body: task.Payload{Enc: task.EncBytes, Data: []byte("forged")}}
	cl.wmu.Lock()
	_, _ = cl.st.Write(routing.AppendFrame(nil, routing.KindMsgs, routing.AppendEnvelope(nil, &e)))
	cl.wmu.Unlock()
	select {
	case <-cl.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the master kept a client connection that sent a message frame")
	}
	if err := <-got; !errors.Is(err, task.ErrTimeout) {
		t.Fatalf("the forged message was delivered (recv: %v)", err)
	}
	if _, err := m.Wait(ctx, tid); err != nil {
		t.Fatal(err)
	}
	// The master still serves others.
	cl2 := adminClient(t, ctx, vm)
	if err := cl2.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// movingTask is a task that receives numbered messages and checks their order;
// it waits in a Recv with task.Safe, so it can be moved at any time. Told to stop (tag
// 2) with a count, it reports what it got to its parent once it has that
// many (messages from other tasks may overtake its senders').
type movingTask struct {
	Next, Bad int
	Want      int
	Stopping  bool
}

func init() { task.Register("daemon.test.mover", &movingTask{}) }

func (m *movingTask) Run(c *task.Ctx) error {
	for {
		var n int
		st, err := c.Recv(task.AnyTask, task.AnyTag, &n, task.Safe())
		if err != nil {
			return err
		}
		if st.Tag == 2 {
			m.Stopping, m.Want = true, n
		} else {
			if n != m.Next {
				m.Bad++
			}
			m.Next = n + 1
		}
		if m.Stopping && m.Next >= m.Want {
			return c.Send(c.Parent(), 3, [2]int{m.Next, m.Bad})
		}
	}
}

// stopMover tells mover mv to stop once it has seen want messages and
// checks its answer: want messages, none out of order.
func stopMover(c *task.Ctx, mv task.TID, want int) error {
	if err := c.Send(mv, 2, want); err != nil {
		return err
	}
	var got [2]int
	if _, err := c.Recv(mv, 3, &got); err != nil {
		return fmt.Errorf("mover %v: %w", mv, err)
	}
	if got != [2]int{want, 0} {
		return fmt.Errorf("mover %v: next %d with %d out of order, want %d and 0", mv, got[0], got[1], want)
	}
	return nil
}

// spinner never reaches a safe point while it waits.
type spinner struct{}

func init() { task.Register("daemon.test.spinner", &spinner{}) }

func (*spinner) Run(c *task.Ctx) error {
	_, err := c.Recv(task.AnyTask, task.AnyTag, nil)
	return err
}

func TestMigrateFailures(t *testing.T) {
	vm := startVM(t, 3, Config{MoveTimeout: 200 * time.Millisecond})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		sp, err := c.Spawn(&spinner{}, 1, task.OnHost("h2"))
		if err != nil {
			return err
		}
		// No safe point in time: the move fails and the task runs on.
		if _, err := m.Migrate(ctx, sp[0], "h3", Direct); !errors.Is(err, ErrNoSafePoint) {
			return fmt.Errorf("migrate a spinner: %v", err)
		}
		if err := c.Send(sp[0], 1, nil); err != nil {
			return fmt.Errorf("the spinner is gone after the failed move: %v", err)
		}
		// Indirect without a shared directory, a missing host, a missing
		// task, a move to where it is.
		mv, err := c.Spawn(&movingTask{}, 1, task.OnHost("h2"))
		if err != nil {
			return err
		}
		if _, err := m.Migrate(ctx, mv[0], "h3", Indirect); !errors.Is(err, ErrNoSharedDir) {
			return fmt.Errorf("indirect without a shared directory: %v", err)
		}
		if _, err := m.Migrate(ctx, mv[0], "h9", Direct); !errors.Is(err, task.ErrNoSuchHost) {
			return fmt.Errorf("to a missing host: %v", err)
		}
		if _, err := m.Migrate(ctx, task.NewTID(2, 999), "h3", Direct); !errors.Is(err, task.ErrNoSuchTask) {
			return fmt.Errorf("a missing task: %v", err)
		}
		if _, err := m.Migrate(ctx, mv[0], "h2", Direct); err == nil {
			return errors.New("moved a task to where it is")
		}
		// It still works after all that.
		for i := range 10 {
			if err := c.Send(mv[0], 1, i); err != nil {
				return err
			}
		}
		if err := stopMover(c, mv[0], 10); err != nil {
			return fmt.Errorf("after failed moves: %w", err)
		}
		return nil
	})
}

// TestMigrateAbortRestoresAtOrigin makes the destination fail to read an
// indirect checkpoint (its shared directory is not the origin's): the move
// aborts, the task runs at its origin again, and no message sent around the
// attempt is lost or reordered.
func TestMigrateAbortRestoresAtOrigin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	vm := startVM(t, 2, Config{SharedDir: t.TempDir()})
	m := vm.Master()
	odd, err := Start(ctx, Config{Listen: "127.0.0.1:0", Join: m.Addr(), Credential: hostCred(t, vm, "odd"), Output: &syncBuffer{}, SharedDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { odd.Halt(context.Background()) })
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		mv, err := c.Spawn(&movingTask{}, 1, task.OnHost("h2"))
		if err != nil {
			return err
		}
		sent := 0
		for range 200 {
			if err := c.Send(mv[0], 1, sent); err != nil {
				return err
			}
			sent++
		}
		_, err = m.Migrate(ctx, mv[0], odd.Name(), Indirect)
		if err == nil || !strings.Contains(err.Error(), "aborted") {
			return fmt.Errorf("a move to a host that cannot read the checkpoint: %v", err)
		}
		for range 200 {
			if err := c.Send(mv[0], 1, sent); err != nil {
				return err
			}
			sent++
		}
		// And a good move afterwards, both ways.
		if _, err := m.Migrate(ctx, mv[0], "h1", Indirect); err != nil {
			return err
		}
		if _, err := m.Migrate(ctx, mv[0], "h2", Direct); err != nil {
			return err
		}
		if err := stopMover(c, mv[0], sent); err != nil {
			return fmt.Errorf("after the abort: %w", err)
		}
		return nil
	})
}

// holdAt returns a fault hook (Config.FaultHook) that holds the first
// caller at point until release is called, a channel closed once it holds
// one, and release, which may be called more than once.
func holdAt(point string) (hook func(string), held <-chan struct{}, release func()) {
	h, r := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	var freed sync.Once
	hook = func(p string) {
		// Not a sync.Once: the callers after the first go on at once.
		if p == point && first.CompareAndSwap(false, true) {
			close(h)
			<-r
		}
	}
	return hook, h, func() { freed.Do(func() { close(r) }) }
}
