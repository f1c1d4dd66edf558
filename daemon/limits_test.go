package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/task"
)

// TestGroupLimits: a group name too long, one group too many and one
// member too many fail with ErrLimit; the server keeps serving.
func TestGroupLimits(t *testing.T) {
	g := newGroups(groupLimits{groups: 2, name: 8, members: 2})
	if _, err := g.join(strings.Repeat("g", 9), 1); !errors.Is(err, ErrLimit) {
		t.Fatalf("a 9-byte name: %v", err)
	}
	for i, name := range []string{"a", "b"} {
		if _, err := g.join(name, task.TID(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.join("c", 3); !errors.Is(err, ErrLimit) {
		t.Fatalf("a third group: %v", err)
	}
	if n, err := g.join("a", 2); err != nil || n != 1 {
		t.Fatalf("a second member: %d %v", n, err)
	}
	if _, err := g.join("a", 3); !errors.Is(err, ErrLimit) {
		t.Fatalf("a third member: %v", err)
	}
	if err := g.rejoin("b", 4, 1<<30); !errors.Is(err, ErrLimit) {
		t.Fatalf("rejoin as instance 2^30: %v", err)
	}
	if err := g.rejoin("d", 4, 0); !errors.Is(err, ErrLimit) {
		t.Fatalf("rejoin into a third group: %v", err)
	}
	// Leaving frees the room.
	if err := g.leave("b", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := g.join("c", 3); err != nil {
		t.Fatalf("a group after one was emptied: %v", err)
	}
}

// TestNotifyLimits: through the task API, a notify naming too many tasks
// and more registrations on one task than allowed fail with ErrLimit.
func TestNotifyLimits(t *testing.T) {
	d := New(Config{Output: &syncBuffer{}, MaxNotify: 3, MaxWatchers: 2, MaxGroups: 4, MaxGroupName: 40})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Halt(ctx)
	})
	runRoot(t, d, func(c *task.Ctx, _ int) error {
		kids, err := c.Spawn(fn(t, func(c *task.Ctx, _ int) error {
			_, err := c.Recv(task.AnyTask, 1, nil)
			return err
		}), 4)
		if err != nil {
			return err
		}
		defer func() {
			for _, k := range kids {
				_ = c.Send(k, 1, nil)
			}
		}()
		if err := c.Notify(task.TaskExit, 7, kids...); !errors.Is(err, ErrLimit) {
			t.Errorf("notify on 4 tasks, at most 3: %v", err)
		}
		for i := range 2 {
			if err := c.Notify(task.TaskExit, 7, kids[0]); err != nil {
				t.Errorf("registration %d: %v", i, err)
			}
		}
		if err := c.Notify(task.TaskExit, 7, kids[0]); !errors.Is(err, ErrLimit) {
			t.Errorf("a third registration on one task: %v", err)
		}
		for i := range 2 {
			if err := c.Notify(task.HostAdd, 8); err != nil {
				t.Errorf("host registration %d: %v", i, err)
			}
		}
		if err := c.Notify(task.HostAdd, 8); !errors.Is(err, ErrLimit) {
			t.Errorf("a third host registration: %v", err)
		}
		if _, err := c.Join(strings.Repeat("x", 64)); !errors.Is(err, ErrLimit) {
			t.Errorf("a 64-byte group name: %v", err)
		}
		return nil
	})
}

// TestConnCount: connections past the total or per-certificate bound are
// refused with a reason; ended ones free their place.
func TestConnCount(t *testing.T) {
	var c connCount
	if why := c.take("user alice", 3, 2); why != "" {
		t.Fatal(why)
	}
	if why := c.take("user alice", 3, 2); why != "" {
		t.Fatal(why)
	}
	if why := c.take("user alice", 3, 2); !strings.Contains(why, "of user alice") {
		t.Fatalf("a third of one peer: %q", why)
	}
	if why := c.take("user bob", 3, 2); why != "" {
		t.Fatal(why)
	}
	if why := c.take("daemon h2", 3, 2); !strings.Contains(why, "too many connections: 3") {
		t.Fatalf("a fourth in all: %q", why)
	}
	c.put("user alice")
	if why := c.take("daemon h2", 3, 2); why != "" {
		t.Fatalf("after one ended: %q", why)
	}
}

// TestMessageSizeLimit: a message to a task on another daemon larger than
// a frame fails with ErrLimit; one that fits arrives.
func TestMessageSizeLimit(t *testing.T) {
	vm := startVM(t, 2, Config{MaxFrame: 4096})
	runRoot(t, vm.Master(), func(c *task.Ctx, _ int) error {
		kids, err := c.Spawn(fn(t, func(c *task.Ctx, _ int) error {
			var b []byte
			_, err := c.Recv(task.AnyTask, 1, &b)
			if err == nil && len(b) != 1000 {
				t.Errorf("received %d bytes", len(b))
			}
			return err
		}), 1, task.OnHost("h2"))
		if err != nil {
			return err
		}
		if err := c.Send(kids[0], 1, make([]byte, 8192)); !errors.Is(err, ErrLimit) {
			t.Errorf("an 8 KiB message with 4 KiB frames: %v, want ErrLimit", err)
		}
		return c.Send(kids[0], 1, make([]byte, 1000))
	})
}

// TestConnsPerPeer: a daemon holding MaxConnsPerPeer connections made with
// one certificate refuses one more of it, still takes others', and takes
// it again once one has ended.
func TestConnsPerPeer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vm := startVM(t, 1, Config{MaxConnsPerPeer: 2})
	m := vm.Master()
	var cls []*Client
	for range 2 {
		cl := adminClient(t, ctx, vm)
		cls = append(cls, cl)
	}
	if cl, err := Dial(ctx, m.Addr(), vm.Cluster.Admin); err == nil {
		cl.Close()
		t.Fatal("a third connection of the admin was accepted, at most 2")
	}
	alice, err := vm.Cluster.User("alice", pki.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := Dial(ctx, m.Addr(), alice)
	if err != nil {
		t.Fatalf("another certificate refused: %v", err)
	}
	cl.Close()
	cls[0].Close()
	for {
		cl, err := Dial(ctx, m.Addr(), vm.Cluster.Admin)
		if err == nil {
			cl.Close()
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the admin refused after one connection ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
