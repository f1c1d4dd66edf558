package daemon

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/dpvm/dpvm/task"
)

func TestGroupMembership(t *testing.T) {
	d, _ := newTestDaemon(t)
	runRoot(t, d, func(c *task.Ctx, _ int) error {
		if _, err := c.Members("g"); !errors.Is(err, task.ErrNoSuchGroup) {
			return fmt.Errorf("members of an empty group: %v", err)
		}
		inst, err := c.Join("g")
		if err != nil || inst != 0 {
			return fmt.Errorf("first join = %d, %v", inst, err)
		}
		if _, err := c.Join("g"); err == nil {
			return errors.New("joining twice succeeded")
		}
		// Three children join as 1, 2, 3; the middle one leaves; a fourth
		// takes the freed instance.
		joiner := fn(t, func(c *task.Ctx, _ int) error {
			inst, err := c.Join("g")
			if err != nil {
				return err
			}
			if err := c.Send(c.Parent(), 1, inst); err != nil {
				return err
			}
			var leave bool
			if _, err := c.Recv(c.Parent(), 2, &leave); err != nil {
				return err
			}
			if leave {
				if err := c.Leave("g"); err != nil {
					return err
				}
				if err := c.Leave("g"); !errors.Is(err, task.ErrNotInGroup) {
					return fmt.Errorf("second leave: %v", err)
				}
			}
			return c.Send(c.Parent(), 3, nil)
		})
		var kids []task.TID
		for want := 1; want <= 3; want++ {
			id, err := c.Spawn(joiner, 1)
			if err != nil {
				return err
			}
			var got int
			if _, err := c.Recv(id[0], 1, &got); err != nil || got != want {
				return fmt.Errorf("child joined as %d, want %d (%v)", got, want, err)
			}
			kids = append(kids, id[0])
		}
		if m, err := c.Members("g"); err != nil || !slices.Equal(m, append([]task.TID{c.MyTID()}, kids...)) {
			return fmt.Errorf("members = %v, %v; want the root and %v", m, err, kids)
		}
		if err := c.Send(kids[1], 2, true); err != nil {
			return err
		}
		if _, err := c.Recv(kids[1], 3, nil); err != nil {
			return err
		}
		if m, err := c.Members("g"); err != nil || len(m) != 4 || !m[2].IsZero() {
			return fmt.Errorf("members after instance 2 left = %v, %v; want it free", m, err)
		}
		id, err := c.Spawn(joiner, 1)
		if err != nil {
			return err
		}
		var got int
		if _, err := c.Recv(id[0], 1, &got); err != nil || got != 2 {
			return fmt.Errorf("new member joined as %d, want the freed 2 (%v)", got, err)
		}
		// Exiting members leave their groups.
		for _, k := range []task.TID{kids[0], kids[2], id[0]} {
			if err := c.Notify(task.TaskExit, 9, k); err != nil {
				return err
			}
			if err := c.Send(k, 2, false); err != nil {
				return err
			}
			if _, err := c.Recv(k, 9, nil); err != nil {
				return err
			}
		}
		m, err := c.Members("g")
		if err != nil || !slices.Equal(m, []task.TID{c.MyTID()}) {
			return fmt.Errorf("members after exits = %v, %v", m, err)
		}
		return nil
	})
}

// collectiveOn runs the collective scenario on daemon d (a standalone one,
// or the master of a virtual machine, which places the members round
// robin). body gets the member's instance and the group's size.
func collectiveOn(t *testing.T, d *Daemon, n int, body func(c *task.Ctx, inst, n int) error) {
	t.Helper()
	member := fn(t, func(c *task.Ctx, _ int) error {
		inst, err := c.Join("c")
		if err != nil {
			return err
		}
		if err := c.Barrier("c", n); err != nil {
			return err
		}
		err = body(c, inst, n)
		if err == nil {
			err = c.Barrier("c", n)
		}
		return c.Send(c.Parent(), 2, fmt.Sprint(err))
	})
	runRoot(t, d, func(c *task.Ctx, _ int) error {
		kids, err := c.Spawn(member, n)
		if err != nil {
			return err
		}
		var errs []error
		for range kids {
			var s string
			st, err := c.Recv(task.AnyTask, 2, &s)
			if err != nil {
				return err
			}
			if s != "<nil>" {
				errs = append(errs, fmt.Errorf("member %v: %s", st.From, s))
			}
		}
		return errors.Join(errs...)
	})
}

func TestBarrierGenerations(t *testing.T) {
	d, _ := newTestDaemon(t)
	collectiveOn(t, d, 6, barrierRounds)
}

// TestBarrierGenerationsAcrossHosts runs the same over three daemons:
// arrivals from other hosts go to the master's group server as one
// message each, and each host's members are released together.
func TestBarrierGenerationsAcrossHosts(t *testing.T) {
	vm := startVM(t, 3, Config{})
	collectiveOn(t, vm.Master(), 6, barrierRounds)
}

// barrierRounds checks that barriers separate rounds of messages.
func barrierRounds(c *task.Ctx, inst, n int) error {
	const rounds = 50
	{
		// Everyone sends its round number to instance 0 between barriers:
		// instance 0 must never see a message from a later round before
		// it has all of the current one.
		for r := range rounds {
			if inst != 0 {
				m, err := c.Members("c")
				if err != nil {
					return err
				}
				if err := c.Send(m[0], 20, r); err != nil {
					return err
				}
			} else {
				for range n - 1 {
					var got int
					if _, err := c.Recv(task.AnyTask, 20, &got); err != nil {
						return err
					}
					if got != r {
						return fmt.Errorf("round %d: got a message of round %d", r, got)
					}
				}
			}
			if err := c.Barrier("c", 0); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestGroupComm(t *testing.T) {
	d, _ := newTestDaemon(t)
	collectiveOn(t, d, 5, groupComm)
}

// groupComm makes the group "c" a communicator and runs collectives on it:
// ranks follow instance numbers, every member agrees on its ID, and a
// second group's communicator gets another.
func groupComm(c *task.Ctx, inst, n int) error {
	var m, other task.Comm
	if err := c.GroupComm("c", n, &m); err != nil {
		return err
	}
	members, err := c.Members("c")
	if err != nil {
		return err
	}
	if m.Size() != n || m.Rank != inst || !slices.Equal(m.TIDs, members) {
		return fmt.Errorf("instance %d: rank %d of %v, members %v", inst, m.Rank, m.TIDs, members)
	}
	ids := []int64{int64(m.ID)}
	if err := task.AllReduce(c, &m, task.Max[int64], ids); err != nil {
		return err
	}
	if m.ID == 0 || ids[0] != int64(m.ID) {
		return fmt.Errorf("instance %d: communicator ID %d, the highest among the members %d", inst, m.ID, ids[0])
	}
	if err := c.GroupComm("c", n, &m); err != nil || m.Rank != inst { // set: returns at once
		return fmt.Errorf("GroupComm again: rank %d, %v", m.Rank, err)
	}
	const root = 2
	s := ""
	if inst == root {
		s = "hi"
	}
	if err := m.Bcast(c, &s, root); err != nil || s != "hi" {
		return fmt.Errorf("bcast got %q, %v", s, err)
	}
	sum := []float64{float64(inst + 1)}
	if err := task.Reduce(c, &m, task.Sum[float64], sum, root); err != nil {
		return err
	}
	if inst == root && sum[0] != float64(n*(n+1)/2) {
		return fmt.Errorf("reduce at the root: %v", sum)
	}
	all, err := task.Gather(c, &m, []int{inst}, root)
	if err != nil {
		return err
	}
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if inst == root && !slices.Equal(all, want) {
		return fmt.Errorf("gather: %v", all)
	}
	// A group of the even instances: its own communicator, its own ID.
	if inst%2 == 0 {
		evenInst, err := c.Join("even")
		if err != nil {
			return err
		}
		if err := c.GroupComm("even", (n+1)/2, &other); err != nil {
			return err
		}
		if other.Rank != evenInst || other.ID == m.ID {
			return fmt.Errorf("instance %d of the even group: rank %d, ID %d (the whole group's %d)", evenInst, other.Rank, other.ID, m.ID)
		}
		if err := other.Barrier(c); err != nil {
			return err
		}
	}
	return nil
}

func TestCollectiveErrors(t *testing.T) {
	d, _ := newTestDaemon(t)
	runRoot(t, d, func(c *task.Ctx, _ int) error {
		var m task.Comm
		if err := c.GroupComm("none", 1, &m); !errors.Is(err, task.ErrNoSuchGroup) {
			return fmt.Errorf("communicator of a missing group: %v", err)
		}
		if _, err := c.Join("solo"); err != nil {
			return err
		}
		if err := c.Barrier("none", 1); !errors.Is(err, task.ErrNoSuchGroup) {
			return fmt.Errorf("barrier on a missing group: %v", err)
		}
		// A one-member group: collectives complete on their own.
		if err := c.GroupComm("solo", 0, &m); err != nil || m.Size() != 1 {
			return fmt.Errorf("solo communicator %v: %v", m.TIDs, err)
		}
		v := []int{4}
		if err := task.Reduce(c, &m, task.Sum[int], v, 0); err != nil || v[0] != 4 {
			return fmt.Errorf("solo reduce = %v, %v", v, err)
		}
		if err := c.Barrier("solo", 0); err != nil {
			return err
		}
		other := fn(t, func(c *task.Ctx, _ int) error {
			err := c.Barrier("solo", 1)
			var m task.Comm
			err2 := c.GroupComm("solo", 1, &m)
			return c.Send(c.Parent(), 1, errors.Is(err, task.ErrNotInGroup) && errors.Is(err2, task.ErrNotInGroup))
		})
		if _, err := c.Spawn(other, 1); err != nil {
			return err
		}
		var ok bool
		if _, err := c.Recv(task.AnyTask, 1, &ok); err != nil || !ok {
			return fmt.Errorf("barrier or communicator by a non-member was not refused (%v)", err)
		}
		return nil
	})
}

// TestGroupServerIndex holds the group server's indexed operations to the
// rules of a plain scan: the lowest free instance is taken, a leave frees
// its instance and trims the end, rejoin fills gaps and moves a member
// back to its checkpoint's instance, and a group of many members joins,
// passes a barrier and leaves.
func TestGroupServerIndex(t *testing.T) {
	g := newGroups(groupLimits{groups: 8, name: 64, members: 1 << 20})
	tid := func(n int) task.TID { return task.NewTID(2, uint32(n)) }
	for i := range 5 {
		if inst, err := g.join("g", tid(i)); err != nil || inst != i {
			t.Fatalf("join %d = %d, %v", i, inst, err)
		}
	}
	if _, err := g.join("g", tid(2)); err == nil {
		t.Fatal("joining twice succeeded")
	}
	for _, i := range []int{3, 1} {
		if err := g.leave("g", tid(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.leave("g", tid(1)); !errors.Is(err, task.ErrNotInGroup) {
		t.Fatalf("second leave: %v", err)
	}
	// The lowest freed instance first.
	for _, want := range []int{1, 3, 5} {
		if inst, err := g.join("g", tid(10+want)); err != nil || inst != want {
			t.Fatalf("join = %d, %v; want %d", inst, err, want)
		}
	}
	// Leaving the last instances trims the group; a freed instance cut
	// off the end is not handed out again.
	for _, i := range []int{15, 4, 13} {
		if err := g.leave("g", tid(i)); err != nil {
			t.Fatal(err)
		}
	}
	if m, _ := g.members("g"); len(m) != 3 {
		t.Fatalf("members after trimming = %v", m)
	}
	if inst, err := g.join("g", tid(20)); err != nil || inst != 3 {
		t.Fatalf("join after trimming = %d, %v; want 3", inst, err)
	}
	// rejoin: a gap below the instance is free; a member goes back to its
	// checkpoint's instance; another's instance is refused.
	if err := g.rejoin("g", tid(30), 6); err != nil {
		t.Fatal(err)
	}
	if inst, err := g.join("g", tid(31)); err != nil || inst != 4 {
		t.Fatalf("join into a gap = %d, %v; want 4", inst, err)
	}
	if err := g.rejoin("g", tid(30), 5); err != nil {
		t.Fatal(err)
	}
	if ms := g.memberships(tid(30)); len(ms) != 1 || ms[0].Inst != 5 {
		t.Fatalf("memberships after moving back = %v", ms)
	}
	if m, _ := g.members("g"); len(m) != 6 {
		t.Fatalf("members after moving back = %v (the freed last instance is trimmed)", m)
	}
	if err := g.rejoin("g", tid(40), 0); err == nil {
		t.Fatal("rejoin over another member succeeded")
	}
	// A large group: every member joins and arrives once.
	const n = 20000
	for i := range n {
		if inst, err := g.join("big", tid(1000+i)); err != nil || inst != i {
			t.Fatalf("join big %d = %d, %v", i, inst, err)
		}
	}
	released := 0
	for i := range n {
		_, done, err := g.arrive("big", tid(1000+i), 3, 0)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			released++
		}
	}
	if _, _, err := g.arrive("big", tid(5), 3, 0); !errors.Is(err, task.ErrNotInGroup) {
		t.Fatalf("a stranger's arrival: %v", err)
	}
	if released != 1 {
		t.Fatalf("the barrier of %d released %d times", n, released)
	}
	for i := range n {
		g.leaveAll(tid(1000 + i))
	}
	if _, err := g.members("big"); !errors.Is(err, task.ErrNoSuchGroup) {
		t.Fatalf("the emptied group: %v", err)
	}
}

// TestGroupRefusesTheZeroTID: joining or rejoining as the zero TID, or as
// AnyTask, is refused with task.ErrBadTID. The group server once took the
// zero TID: a zero member looks like a free slot, so a later leave trimmed
// it off the end of the members while the index kept it, and leaving all
// groups as the zero TID then indexed past the end (found by
// FuzzControlHandlers: a group.join, then a group.leaveall, each with no
// TID in its body). The test plays that sequence through.
func TestGroupRefusesTheZeroTID(t *testing.T) {
	g := newGroups(groupLimits{groups: 8, name: 64, members: 16})
	for _, bad := range []task.TID{0, task.AnyTask} {
		if _, err := g.join("g", bad); !errors.Is(err, task.ErrBadTID) {
			t.Fatalf("join as %v: %v, want ErrBadTID", bad, err)
		}
		if err := g.rejoin("g", bad, 0); !errors.Is(err, task.ErrBadTID) {
			t.Fatalf("rejoin as %v: %v, want ErrBadTID", bad, err)
		}
	}
	one := task.NewTID(1, 1)
	if inst, err := g.join("g", one); err != nil || inst != 0 {
		t.Fatalf("join = %d, %v; want instance 0 (the refused joins took none)", inst, err)
	}
	if err := g.leave("g", one); err != nil {
		t.Fatal(err)
	}
	g.leaveAll(0) // indexed past the end when the zero TID was a member
	if _, err := g.members("g"); !errors.Is(err, task.ErrNoSuchGroup) {
		t.Fatalf("the group after its one member left: %v, want ErrNoSuchGroup", err)
	}
}
