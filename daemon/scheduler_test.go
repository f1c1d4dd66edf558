package daemon

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/load"
	"github.com/dpvm/dpvm/sched"
	"github.com/dpvm/dpvm/task"
)

// TestSchedulerEvacuatesBusyHost runs the master's Dynamic-SED loop with a
// short δT: when interactive users arrive on a host (injected), its
// parallel tasks migrate away within about c²max·δT, and they still work.
func TestSchedulerEvacuatesBusyHost(t *testing.T) {
	params := sched.DefaultParams()
	params.C1Max, params.C2Max = 3, 2
	vm := startVM(t, 3, Config{Sched: SchedConfig{Period: 100 * time.Millisecond, Params: &params}})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		movers, err := c.Spawn(&mover{}, 2, task.OnHost("h2"))
		if err != nil {
			return err
		}
		users := 2
		if err := m.injectAt(ctx, "h2", load.Overlay{Users: &users}, false); err != nil {
			return err
		}
		// Poll the task list: real sockets and a real clock give no other
		// signal that the scheduler has acted.
		deadline := time.Now().Add(30 * time.Second)
		for {
			ts, err := m.AllTasks(ctx, false)
			if err != nil {
				return err
			}
			left := 0
			for _, ti := range ts {
				if (ti.TID == movers[0] || ti.TID == movers[1]) && ti.Host == "h2" {
					left++
				}
			}
			if left == 0 && m.SchedStatus().Migrations >= 2 {
				break // moved, and the check that moved them is over
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d tasks still on the busy host after 30 s: %+v", left, m.SchedStatus())
			}
			time.Sleep(20 * time.Millisecond)
		}
		st := m.SchedStatus()
		if st.Migrations < 2 || st.Checks == 0 || len(st.Availability) != len(st.Classes) {
			return fmt.Errorf("status after the evacuation: %+v", st)
		}
		for _, mv := range movers {
			for i := range 5 {
				if err := c.Send(mv, 1, i); err != nil {
					return err
				}
			}
			if err := stopMover(c, mv, 5); err != nil {
				return fmt.Errorf("after the move: %w", err)
			}
		}
		return nil
	})
}

// TestSchedulerQuietChecksSkipListing: while nothing starts, ends or moves
// and no process is counting or a migration candidate, the checks
// go on without listing the hosts' processes (Listings stays, Checks
// grows) and the status keeps the processes of the last listing; when
// users arrive on a host holding a task, the checks list again, count, and
// the task leaves.
func TestSchedulerQuietChecksSkipListing(t *testing.T) {
	vm := startVM(t, 3, Config{Sched: SchedConfig{Period: 20 * time.Millisecond}})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		// One task on each of h2 and h3, the root on h1: delay 2 each,
		// below every class's bound.
		var movers []task.TID
		for _, h := range []string{"h2", "h3"} {
			tids, err := c.Spawn(&mover{}, 1, task.OnHost(h))
			if err != nil {
				return err
			}
			movers = append(movers, tids...)
		}
		listsBoth := func(st SchedStatus) bool {
			n := 0
			for _, p := range st.Processes {
				if p.TID == movers[0] && p.Host == "h2" || p.TID == movers[1] && p.Host == "h3" {
					n++
				}
			}
			return n == 2
		}
		st, err := waitSched(m, "listing both tasks", listsBoth)
		if err != nil {
			return err
		}
		// Ten more checks with nothing happening: none lists.
		st, err = waitSched(m, "ten checks later", func(s SchedStatus) bool { return s.Checks >= st.Checks+10 })
		if err != nil {
			return err
		}
		quiet, err := waitSched(m, "ten quiet checks", func(s SchedStatus) bool { return s.Checks >= st.Checks+10 })
		if err != nil {
			return err
		}
		if quiet.Listings != st.Listings || !listsBoth(quiet) {
			return fmt.Errorf("quiet checks listed: %d listings then %d, status %+v", st.Listings, quiet.Listings, quiet)
		}
		for _, p := range quiet.Processes {
			if p.Counter != 0 || p.Candidate != "" {
				return fmt.Errorf("quiet check: %+v", p)
			}
		}
		users := 2
		if err := m.injectAt(ctx, "h2", load.Overlay{Users: &users}, false); err != nil {
			return err
		}
		moved, err := waitSched(m, "evacuated", func(s SchedStatus) bool { return s.Migrations >= 1 })
		if err != nil {
			return err
		}
		// The four checks that counted (c²max) listed.
		if moved.Listings < quiet.Listings+4 {
			return fmt.Errorf("%d listings before the users, %d after the moves", quiet.Listings, moved.Listings)
		}
		for _, mv := range movers {
			if err := stopMover(c, mv, 0); err != nil {
				return fmt.Errorf("after the move: %w", err)
			}
		}
		return nil
	})
}

// TestSchedulerListsLocalSpawn: a task spawned by a task on its own host
// does not pass through the master, yet the next checks list it, because
// its host reports its new task count at once. The heartbeat, which also
// carries that count, is an hour here, so nothing else could tell.
func TestSchedulerListsLocalSpawn(t *testing.T) {
	vm := startVM(t, 3, Config{Heartbeat: time.Hour, DeadAfter: 2 * time.Hour,
		Sched: SchedConfig{Period: 20 * time.Millisecond}})
	m := vm.Master()
	lists := func(st SchedStatus, tid task.TID, host string) bool {
		for _, p := range st.Processes {
			if p.TID == tid && p.Host == host {
				return true
			}
		}
		return false
	}
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		spawner, err := c.Spawn(fn(t, func(c *task.Ctx, _ int) error {
			var start int
			if _, err := c.Recv(c.Parent(), 1, &start); err != nil {
				return err
			}
			kid, err := c.Spawn(&mover{}, 1, task.OnHost("h3"))
			if err != nil {
				return err
			}
			if err := c.Send(c.Parent(), 2, kid[0]); err != nil {
				return err
			}
			var done int
			_, err = c.Recv(c.Parent(), 3, &done)
			return err
		}), 1, task.OnHost("h3"))
		if err != nil {
			return err
		}
		st, err := waitSched(m, "listing the spawner", func(s SchedStatus) bool { return lists(s, spawner[0], "h3") })
		if err != nil {
			return err
		}
		quiet, err := waitSched(m, "ten checks later", func(s SchedStatus) bool { return s.Checks >= st.Checks+10 })
		if err != nil {
			return err
		}
		if err := c.Send(spawner[0], 1, 0); err != nil {
			return err
		}
		var kid task.TID
		if _, err := c.Recv(spawner[0], 2, &kid); err != nil {
			return err
		}
		if kid.Host() != vm.Daemons[2].cfg.HostID {
			return fmt.Errorf("the kid %v does not run on h3", kid)
		}
		after, err := waitSched(m, "listing the kid", func(s SchedStatus) bool { return lists(s, kid, "h3") })
		if err != nil {
			return err
		}
		if after.Listings <= quiet.Listings {
			return fmt.Errorf("listings %d before the kid, %d after", quiet.Listings, after.Listings)
		}
		return c.Send(spawner[0], 3, 0)
	})
}

// waitSched polls the master's scheduler status until ok holds, for at
// most 30 s: real sockets and a real clock give no other signal of the
// scheduler's checks.
func waitSched(m *Daemon, what string, ok func(SchedStatus) bool) (SchedStatus, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := m.SchedStatus()
		if ok(st) {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("after 30 s, still not %s: %+v", what, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
