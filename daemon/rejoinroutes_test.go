package daemon

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/task"
)

// echoer answers each number (tag 1) with the number plus 1000 (tag 2) to
// its sender, at safe points, so that it can be moved; it ends on tag 9.
func echoer(t *testing.T) task.Task {
	return fn(t, func(c *task.Ctx, _ int) error {
		for {
			var n int
			st, err := c.Recv(task.AnyTask, task.AnyTag, &n, task.Safe())
			if err != nil {
				return err
			}
			if st.Tag == 9 {
				return nil
			}
			if err := c.Send(st.From, 2, n+1000); err != nil {
				return err
			}
		}
	})
}

// TestOnDemandRoutesReachRejoinedHost: with routes on demand, h3 is cut
// off past its deletion (every host's route cache hears that it is
// deleted), then registers again under its old ID (readmit). A task moved
// onto it afterwards and one born on it afterwards are reached by tasks
// on h2 and h4 (which learn the moved one's route from a refusal and the
// origin), and their answers reach the senders (the reverse way): the
// hosts' caches hear of the return (the master's host-back event,
// route.EvHostUp), so routes set since name a host they may send to.
func TestOnDemandRoutesReachRejoinedHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &partitions{}
		vm := memberVM(t, 4, p, Config{Detector: DetectorMaster, Routes: RoutesDemand, SharedDir: t.TempDir()})
		m, h3 := vm.Master(), vm.Daemons[2]
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		old := spawnOn(t, m, "h3", idler(t))
		// A task moved onto h3 before its deletion: its route names h3 at
		// an epoch of the incarnation about to be deleted.
		oldMoved := spawnOn(t, m, "h2", idler(t))
		if _, err := m.Migrate(ctx, oldMoved, "h3", Direct); err != nil {
			t.Fatalf("move %v onto h3: %v", oldMoved, err)
		}
		p.split(false, m.Addr(), h3.Addr())
		waitFor(t, ctx, "h3 deleted", func() bool { _, ok := hostInfo(m, "h3"); return !ok })
		for _, d := range []*Daemon{vm.Daemons[1], vm.Daemons[3]} {
			waitFor(t, ctx, d.cfg.Name+"'s route cache hearing that h3 is deleted", func() bool {
				d.rt.mu.Lock()
				defer d.rt.mu.Unlock()
				return d.routes != nil && d.routes.c.Lost(3)
			})
		}
		// No job rolls back what h3 held: its losses are final at the
		// master, which answers queries about what was there "ended".
		waitFor(t, ctx, "h3's losses final", func() bool {
			m.rt.mu.Lock()
			defer m.rt.mu.Unlock()
			_, ok := m.rt.lostFinal[3]
			return ok
		})
		p.split(true, m.Addr(), h3.Addr())
		if err := waitMembers(vm, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if runsOn(h3, old) {
			t.Fatalf("%v, lost with h3, still runs there", old)
		}

		// One task moved onto the new incarnation, one born on it.
		moved := spawnOn(t, m, "h2", echoer(t))
		if _, err := m.Migrate(ctx, moved, "h3", Direct); err != nil {
			t.Fatalf("move %v onto h3: %v", moved, err)
		}
		born := spawnOn(t, m, "h3", echoer(t))
		if !runsOn(h3, moved) || !runsOn(h3, born) {
			t.Fatalf("%v and %v not on h3", moved, born)
		}

		h4 := vm.Daemons[3]
		for _, d := range []*Daemon{vm.Daemons[1], h4} {
			waitFor(t, ctx, d.cfg.Name+" hearing that h3 is back", func() bool {
				d.rt.mu.Lock()
				defer d.rt.mu.Unlock()
				return !d.routes.c.Lost(3)
			})
		}
		// h4 asks for the route of the task born on h3 (as when it
		// refuses a claim about it): the master, which answers for the
		// tasks of an origin once deleted, answers with its route, not
		// with the end of what h3 held before its deletion.
		h4.verifyRoutes([]task.TID{born})
		waitFor(t, ctx, "the master's answer about "+born.String(), func() bool {
			h4.rt.mu.Lock()
			defer h4.rt.mu.Unlock()
			_, ok := h4.routes.answered[born]
			return ok
		})
		h4.rt.mu.Lock()
		_, ended := h4.routes.c.Ended(born)
		h4.rt.mu.Unlock()
		if ended {
			t.Fatalf("the master answered that %v, born on h3 after its return, has ended", born)
		}
		m.rt.mu.Lock()
		_, oldEnded := m.endedLocked(oldMoved)
		r := m.rt.routes.Lookup(oldMoved)
		m.rt.mu.Unlock()
		if !oldEnded {
			t.Errorf("the master no longer answers that %v, lost with h3's old incarnation, has ended", oldMoved)
		}
		h4.rt.mu.Lock()
		gone := h4.routes.c.Gone(r)
		h4.rt.mu.Unlock()
		if r.Host != 3 || r.Epoch == 0 {
			t.Errorf("%v's route at the master: %+v, want h3 at the epoch of its move", oldMoved, r)
		} else if !gone {
			t.Errorf("h4 takes %v's route from before h3's deletion (%+v) as a way to it", oldMoved, r)
		}

		const rounds = 20
		results := make(chan error, 2)
		for _, on := range []string{"h2", "h4"} {
			spawnOn(t, m, on, fn(t, func(c *task.Ctx, _ int) error {
				err := func() error {
					for i := range rounds {
						for _, to := range []task.TID{moved, born} {
							if err := c.Send(to, 1, i); err != nil {
								return fmt.Errorf("send %d to %v: %w", i, to, err)
							}
							var n int
							if _, err := c.Recv(to, 2, &n); err != nil {
								return fmt.Errorf("answer %d from %v: %w", i, to, err)
							}
							if n != i+1000 {
								return fmt.Errorf("answer %d from %v: %d", i, to, n)
							}
						}
					}
					return nil
				}()
				results <- err
				return err
			}))
		}
		for range 2 {
			select {
			case err := <-results:
				if err != nil {
					t.Error(err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the senders on h2 and h4 did not hear back from the tasks on the rejoined h3")
			}
		}
	})
}
