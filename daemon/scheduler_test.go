package daemon

import (
	"context"
	"fmt"
	"testing"
	"time"

	"dpvm/daemon/load"
	"dpvm/sched"
	"dpvm/task"
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
			if err := c.Send(mv, 2, 0); err != nil {
				return err
			}
			var got [2]int
			if _, err := c.Recv(mv, 3, &got); err != nil || got != [2]int{5, 0} {
				return fmt.Errorf("mover %v after the move: %v %v", mv, got, err)
			}
		}
		return nil
	})
}
