package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

func TestSendRecvWildcards(t *testing.T) {
	d, _ := newTestDaemon(t)
	runRoot(t, d, func(c *task.Ctx, _ int) error {
		kids, err := c.Spawn(fn(t, func(c *task.Ctx, _ int) error {
			// Each child sends tags 1, 2, 3 with its own number.
			for tag := 1; tag <= 3; tag++ {
				if err := c.Send(c.Parent(), tag, fmt.Sprintf("%v/%d", c.MyTID(), tag)); err != nil {
					return err
				}
			}
			return nil
		}), 2)
		if err != nil {
			return err
		}
		a, b := kids[0], kids[1]
		var s string
		// Specific source, specific tag.
		st, err := c.Recv(b, 3, &s)
		if err != nil || st.From != b || st.Tag != 3 || s != b.String()+"/3" {
			return fmt.Errorf("recv(b,3) = %+v %q %v", st, s, err)
		}
		// Specific source, any tag: the oldest from a.
		st, err = c.Recv(a, task.AnyTag, &s)
		if err != nil || st.Tag != 1 || s != a.String()+"/1" {
			return fmt.Errorf("recv(a,*) = %+v %q %v", st, s, err)
		}
		// Any source, specific tag.
		for range 2 {
			st, err = c.Recv(task.AnyTask, 2, &s)
			if err != nil || st.Tag != 2 || !strings.HasSuffix(s, "/2") {
				return fmt.Errorf("recv(*,2) = %+v %q %v", st, s, err)
			}
		}
		// Whatever is left: a/3, b/1.
		got := map[string]bool{}
		for range 2 {
			if _, err := c.Recv(task.AnyTask, task.AnyTag, &s); err != nil {
				return err
			}
			got[s] = true
		}
		if !got[a.String()+"/3"] || !got[b.String()+"/1"] {
			return fmt.Errorf("leftovers = %v", got)
		}
		if _, ok, _ := c.TryRecv(task.AnyTask, task.AnyTag, nil); ok {
			return errors.New("mailbox should be empty")
		}
		return nil
	})
}

func TestTryRecvProbeTimeout(t *testing.T) {
	d, _ := newTestDaemon(t)
	runRoot(t, d, func(c *task.Ctx, _ int) error {
		var v int
		if _, ok, err := c.TryRecv(task.AnyTask, 5, &v); ok || err != nil {
			return fmt.Errorf("TryRecv on empty mailbox = %v, %v", ok, err)
		}
		if _, ok := c.Probe(task.AnyTask, task.AnyTag); ok {
			return errors.New("Probe on empty mailbox found a message")
		}
		if _, err := c.Recv(task.AnyTask, 5, &v, task.Timeout(time.Millisecond)); !errors.Is(err, task.ErrTimeout) {
			return fmt.Errorf("Recv with Timeout = %v, want ErrTimeout", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := c.Recv(task.AnyTask, 5, &v, task.WithContext(ctx)); !errors.Is(err, context.Canceled) {
			return fmt.Errorf("Recv with a cancelled context = %v", err)
		}
		if err := c.Send(c.MyTID(), 5, 77); err != nil {
			return err
		}
		st, ok := c.Probe(task.AnyTask, 5)
		if !ok || st.From != c.MyTID() || st.Tag != 5 || st.Enc != task.EncMsgpack {
			return fmt.Errorf("Probe = %+v, %v", st, ok)
		}
		// Probe leaves the message: TryRecv gets it.
		m, ok, err := c.TryRecv(task.AnyTask, 5, &v)
		if !ok || err != nil || v != 77 || m.Tag != 5 {
			return fmt.Errorf("TryRecv = %+v %v %v %d", m.Status(), ok, err, v)
		}
		if err := c.Send(c.MyTID(), -3, 1); !errors.Is(err, task.ErrBadTag) {
			return fmt.Errorf("negative tag: %v", err)
		}
		return nil
	})
}

// TestPerPairOrder runs many sender/receiver pairs at once, each sender
// streaming numbered messages with two interleaved tags; every receiver
// must see each sender's numbers in order.
func TestPerPairOrder(t *testing.T) {
	const pairs, msgs = 16, 2000
	d, _ := newTestDaemon(t)
	runRoot(t, d, func(c *task.Ctx, _ int) error {
		recvs, err := c.Spawn(fn(t, func(c *task.Ctx, _ int) error {
			// Receive from 2 senders with wildcards, check per-sender order.
			next := map[task.TID]int{}
			for range 2 * msgs {
				var n int
				st, err := c.Recv(task.AnyTask, task.AnyTag, &n)
				if err != nil {
					return err
				}
				if n != next[st.From] {
					return fmt.Errorf("from %v: got %d, want %d", st.From, n, next[st.From])
				}
				if st.Tag != 10+n%2 {
					return fmt.Errorf("message %d has tag %d", n, st.Tag)
				}
				next[st.From]++
			}
			return c.Send(c.Parent(), 1, len(next))
		}), pairs)
		if err != nil {
			return err
		}
		sender := fn(t, func(c *task.Ctx, _ int) error {
			var to task.TID
			if _, err := c.Recv(c.Parent(), 2, &to); err != nil {
				return err
			}
			for i := range msgs {
				if err := c.Send(to, 10+i%2, i); err != nil {
					return err
				}
			}
			return nil
		})
		sends, err := c.Spawn(sender, 2*pairs)
		if err != nil {
			return err
		}
		for i, s := range sends {
			if err := c.Send(s, 2, recvs[i%pairs]); err != nil {
				return err
			}
		}
		for range recvs {
			var n int
			if _, err := c.Recv(task.AnyTask, 1, &n); err != nil {
				return err
			}
			if n != 2 {
				return fmt.Errorf("a receiver heard from %d senders, want 2", n)
			}
		}
		return nil
	})
}

// TestSendToMissingTask: a message to a task that has exited (or never
// started) on a host of the virtual machine is dropped and Send succeeds,
// as it does for a receiver on another host; a TID no task can have fails
// with ErrNoSuchTask.
func TestSendToMissingTask(t *testing.T) {
	d, _ := newTestDaemon(t)
	runRoot(t, d, func(c *task.Ctx, _ int) error {
		if err := c.Send(task.NewTID(1, 999), 1, "x"); err != nil {
			return fmt.Errorf("send to a missing task: %v", err)
		}
		for _, bad := range []task.TID{0, task.NewTID(7, 1)} {
			if err := c.Send(bad, 1, "x"); !errors.Is(err, task.ErrNoSuchTask) {
				return fmt.Errorf("send to %v: %v", bad, err)
			}
		}
		// Mcast: a missing receiver is no error, and the caller, listed,
		// gets nothing (pvm_mcast).
		err := c.Mcast([]task.TID{task.NewTID(1, 999), c.MyTID()}, 1, "y")
		if err != nil {
			return fmt.Errorf("mcast with a missing receiver: %v", err)
		}
		if st, ok, err := c.TryRecv(task.AnyTask, 1, nil); ok || err != nil {
			return fmt.Errorf("mcast delivered to its caller: %+v %v", st, err)
		}
		return nil
	})
}

func TestMcastBytesAreNotShared(t *testing.T) {
	d, _ := newTestDaemon(t)
	runRoot(t, d, func(c *task.Ctx, _ int) error {
		kids, err := c.Spawn(fn(t, func(c *task.Ctx, _ int) error {
			var b []byte
			if _, err := c.Recv(c.Parent(), 1, &b); err != nil {
				return err
			}
			if string(b) != "abc" {
				return fmt.Errorf("got %q", b)
			}
			b[0] = 'X' // a receiver owns its bytes
			return c.Send(c.Parent(), 2, b)
		}), 3)
		if err != nil {
			return err
		}
		if err := c.Mcast(kids, 1, []byte("abc")); err != nil {
			return err
		}
		for range kids {
			var b []byte
			if _, err := c.Recv(task.AnyTask, 2, &b); err != nil {
				return err
			}
			if string(b) != "Xbc" {
				return fmt.Errorf("a receiver saw another's write: %q", b)
			}
		}
		return nil
	})
}

func TestSpawnErrors(t *testing.T) {
	d, _ := newTestDaemon(t)
	if _, err := d.Spawn(context.Background(), 0, task.SpawnRequest{Type: "no.such.type", Count: 1}); !errors.Is(err, task.ErrUnknownType) {
		t.Errorf("unknown type: %v", err)
	}
	if _, err := d.Spawn(context.Background(), 0, task.SpawnRequest{Type: "daemon.test.fn", Count: 1, Host: "elsewhere"}); !errors.Is(err, task.ErrNoSuchHost) {
		t.Errorf("unknown host: %v", err)
	}
	if _, err := d.Spawn(context.Background(), 0, task.SpawnRequest{Type: "daemon.test.fn", Count: 0}); err == nil {
		t.Error("count 0 accepted")
	}
	runRoot(t, d, func(c *task.Ctx, _ int) error {
		ids, err := c.Spawn(fn(t, func(c *task.Ctx, _ int) error {
			return c.Send(c.Parent(), 1, c.HostName())
		}), 1, task.OnHost("h1"))
		if err != nil {
			return err
		}
		here := fn(t, func(c *task.Ctx, _ int) error { return c.Send(c.Parent(), 1, c.HostName()) })
		ids2, err := c.Spawn(here, 2, task.Here())
		if err != nil {
			return err
		}
		for _, id := range append(ids, ids2...) {
			var host string
			if _, err := c.Recv(id, 1, &host); err != nil || host != c.HostName() {
				return fmt.Errorf("%v runs on %q (%v), want %q", id, host, err, c.HostName())
			}
		}
		return nil
	})
}

func TestSpawnCopiesState(t *testing.T) {
	d, _ := newTestDaemon(t)
	runRoot(t, d, func(c *task.Ctx, _ int) error {
		proto := fn(t, func(c *task.Ctx, arg int) error { return c.Send(c.Parent(), 1, arg) })
		proto.Arg = 7
		if _, err := c.Spawn(proto, 3); err != nil {
			return err
		}
		for range 3 {
			var a int
			if _, err := c.Recv(task.AnyTask, 1, &a); err != nil || a != 7 {
				return fmt.Errorf("child got arg %d: %v", a, err)
			}
		}
		return nil
	})
}

func TestExitStatusPanicAndNotify(t *testing.T) {
	d, _ := newTestDaemon(t)
	runRoot(t, d, func(c *task.Ctx, _ int) error {
		ok := fn(t, func(*task.Ctx, int) error { return nil })
		fail := fn(t, func(*task.Ctx, int) error { return errors.New("bad input") })
		status := fn(t, func(*task.Ctx, int) error { return task.Exit(9) })
		exit := fn(t, func(c *task.Ctx, _ int) error { c.Exit(5); return errors.New("not reached") })
		boom := fn(t, func(*task.Ctx, int) error { panic("boom") })
		hang := fn(t, func(c *task.Ctx, _ int) error {
			_, err := c.Recv(task.AnyTask, 99, nil)
			return err
		})
		type want struct {
			status int
			err    string
		}
		wants := map[task.TID]want{}
		for _, k := range []struct {
			p *fnTask
			w want
		}{{ok, want{0, ""}}, {fail, want{1, "bad input"}}, {status, want{9, "exit status 9"}},
			{exit, want{5, ""}}, {boom, want{2, "panic: boom"}}, {hang, want{-1, "killed"}}} {
			ids, err := c.Spawn(k.p, 1)
			if err != nil {
				return err
			}
			wants[ids[0]] = k.w
			if err := c.Notify(task.TaskExit, 50, ids[0]); err != nil {
				return err
			}
			if k.p == hang {
				if err := c.Kill(ids[0]); err != nil {
					return err
				}
			}
		}
		for range wants {
			var n task.Notice
			st, err := c.Recv(task.AnyTask, 50, &n)
			if err != nil {
				return err
			}
			w := wants[n.TID]
			if st.From != n.TID || n.Kind != task.TaskExit || n.Status != w.status || n.Err != w.err {
				return fmt.Errorf("notice %+v from %v, want %+v", n, st.From, w)
			}
		}
		// Notify for a task that is already gone fires at once.
		if err := c.Notify(task.TaskExit, 51, task.NewTID(1, 12345)); err != nil {
			return err
		}
		var n task.Notice
		if _, err := c.Recv(task.AnyTask, 51, &n); err != nil || n.Status != -1 {
			return fmt.Errorf("notice for a missing task: %+v %v", n, err)
		}
		return nil
	})
	// The daemon lives on after the panic, and ps -a shows each ending.
	states := map[TaskState]int{}
	for _, ti := range d.Tasks(true) {
		states[ti.State]++
	}
	if states[Failed] != 1 || states[Killed] != 1 || states[Exited] != 5 {
		t.Errorf("task states %v, want 1 failed, 1 killed, 5 exited", states)
	}
	if len(d.Tasks(false)) != 0 {
		t.Errorf("tasks still running: %v", d.Tasks(false))
	}
}

// TestKillUnblocks checks that a task blocked in Recv, in a barrier or in
// a computation loop with safe points ends when killed, and that Halt
// leaves no task goroutine behind.
func TestKillUnblocks(t *testing.T) {
	d, _ := newTestDaemon(t)
	blocked := make(chan task.TID, 3)
	runRoot(t, d, func(c *task.Ctx, _ int) error {
		recv := fn(t, func(c *task.Ctx, _ int) error {
			blocked <- c.MyTID()
			_, err := c.Recv(task.AnyTask, task.AnyTag, nil)
			if !errors.Is(err, task.ErrKilled) {
				return fmt.Errorf("recv after kill: %v", err)
			}
			return err
		})
		barrier := fn(t, func(c *task.Ctx, _ int) error {
			if _, err := c.Join("kb"); err != nil {
				return err
			}
			blocked <- c.MyTID()
			return c.Barrier("kb", 2)
		})
		spin := fn(t, func(c *task.Ctx, _ int) error {
			blocked <- c.MyTID()
			for {
				if err := c.SafePoint(); err != nil {
					return err
				}
			}
		})
		for _, p := range []*fnTask{recv, barrier, spin} {
			if _, err := c.Spawn(p, 1); err != nil {
				return err
			}
		}
		return nil
	})
	for range 3 {
		tid := <-blocked
		if err := d.Kill(tid); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Halt(ctx); err != nil {
		t.Fatalf("goroutines left after kill: %v", err)
	}
	if err := d.Kill(task.NewTID(1, 999)); !errors.Is(err, task.ErrNoSuchTask) {
		t.Errorf("kill of a missing task: %v", err)
	}
	if _, err := d.SpawnTask(fn(t, func(*task.Ctx, int) error { return nil })); !errors.Is(err, task.ErrHalted) {
		t.Errorf("spawn after halt: %v", err)
	}
}

func TestPrintf(t *testing.T) {
	d, out := newTestDaemon(t)
	runRoot(t, d, func(c *task.Ctx, _ int) error {
		c.Printf("one %d", 1)
		c.Printf("two\n")
		return nil
	})
	if got := out.String(); got != "one 1\ntwo\n" {
		t.Errorf("output %q", got)
	}
}

func TestCriticalSafePoint(t *testing.T) {
	d, _ := newTestDaemon(t)
	runRoot(t, d, func(c *task.Ctx, _ int) error {
		if err := c.SafePoint(); err != nil {
			return err
		}
		return c.Critical(func() error {
			return c.SafePoint()
		})
	})
}

func TestRunExitStatus(t *testing.T) {
	err := Run(context.Background(), fn(t, func(*task.Ctx, int) error { return task.Exit(4) }), RunOptions{})
	var ee *task.ExitError
	if !errors.As(err, &ee) || ee.Status != 4 {
		t.Errorf("Run = %v, want exit status 4", err)
	}
	if err := Run(context.Background(), fn(t, func(*task.Ctx, int) error { return nil }), RunOptions{}); err != nil {
		t.Errorf("Run of a clean task = %v", err)
	}
	if err := Run(context.Background(), fn(t, func(*task.Ctx, int) error { return nil }), RunOptions{Hosts: -1}); err == nil {
		t.Errorf("Run on -1 hosts succeeded")
	}
}
