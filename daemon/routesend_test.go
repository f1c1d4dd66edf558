package daemon

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/task"
)

// TestRouteCacheEndsWithTasks: with routes on demand and a route cache
// bound of 8, thirty short tasks are each spawned on h2 or h3, moved to
// the other, sent a message by a relay on h4 (which learns the route
// from a refusal) and end. Afterwards the hosts they were born, moved and
// ended on hold no route of them, in the cache or the table (the origin
// was told of the end by the master, the host it ended on saw it), and
// h4, which learnt thirty routes, holds at most 8; the ends each host
// remembers stay within the bound.
func TestRouteCacheEndsWithTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const bound, rounds = 8, 30
		vm := startMemVM(t, 4, &faults{}, Config{Routes: RoutesDemand, MaxRoutes: bound})
		m := vm.Master()
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		var workers []task.TID
		runRoot(t, m, func(c *task.Ctx, _ int) error {
			relay := fn(t, func(c *task.Ctx, _ int) error {
				for {
					var to task.TID
					st, err := c.Recv(c.Parent(), task.AnyTag, &to)
					if err != nil {
						return err
					}
					if st.Tag == 2 {
						return nil
					}
					if err := c.Send(to, 1, 0); err != nil {
						return err
					}
				}
			})
			rl, err := c.Spawn(relay, 1, task.OnHost("h4"))
			if err != nil {
				return err
			}
			worker := fn(t, func(c *task.Ctx, _ int) error {
				if _, err := c.Recv(task.AnyTask, 1, nil, task.Safe()); err != nil {
					return err
				}
				return c.Send(c.Parent(), 4, 0)
			})
			for i := range rounds {
				from, to := fmt.Sprintf("h%d", 2+i%2), fmt.Sprintf("h%d", 3-i%2)
				w, err := c.Spawn(worker, 1, task.OnHost(from))
				if err != nil {
					return err
				}
				if _, err := m.Migrate(ctx, w[0], to, Direct); err != nil {
					return fmt.Errorf("move %v to %s: %w", w[0], to, err)
				}
				if err := c.Send(rl[0], 5, w[0]); err != nil {
					return err
				}
				if _, err := c.Recv(w[0], 4, nil); err != nil {
					return err
				}
				workers = append(workers, w[0])
			}
			return c.Send(rl[0], 2, 0)
		})
		synctest.Wait() // the ends told, the last frames taken
		for _, d := range vm.Daemons[1:] {
			d.rt.mu.Lock()
			cached, tabled, ended := d.routes.c.Len(), d.rt.routes.Len(), d.routes.c.EndedLen()
			d.rt.mu.Unlock()
			t.Logf("%s: %d routes cached, %d in the table, %d ends remembered", d.Name(), cached, tabled, ended)
			want := 0 // h2 and h3: every task they held a route of has ended
			if d.Name() == "h4" {
				want = bound
				if cached == 0 {
					t.Errorf("h4 holds no route: its relay learnt none (the test moves nothing it sends to)")
				}
			}
			if cached > want || tabled > want || ended > bound {
				t.Errorf("%s: %d routes cached, %d in the table, %d ends; want at most %d, %d and %d", d.Name(), cached, tabled, ended, want, want, bound)
			}
		}
		last := workers[len(workers)-1]
		origin := daemonNamed(t, vm, fmt.Sprintf("h%d", last.Host()))
		origin.rt.mu.Lock()
		_, ok := origin.endedLocked(last)
		origin.rt.mu.Unlock()
		if !ok {
			t.Errorf("%v's origin does not know it ended", last)
		}
	})
}

// TestLostTaskSendFails: with routes on demand, a message for a task lost
// for good with its host (deleted, no checkpoint to restore it) is
// dropped once the master's word is in, instead of being held and asked
// about for ever, and a send along a route to the deleted host then
// fails with task.ErrNoSuchTask, as under the broadcast. Both a task born
// on the deleted host (its origin gone: the master answers) and one moved
// there from a live origin (the master tells the origin) are covered.
func TestLostTaskSendFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vm := startMemVM(t, 4, &faults{}, Config{Routes: RoutesDemand})
		m, h2 := vm.Master(), vm.Daemons[1]
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		got := make(chan task.TID, 4)
		sink := fn(t, func(c *task.Ctx, _ int) error {
			for {
				if _, err := c.Recv(task.AnyTask, 1, nil, task.Safe()); err != nil {
					return err
				}
				got <- c.MyTID()
			}
		})
		born := spawnOn(t, m, "h3", sink)  // origin h3, lost with it
		moved := spawnOn(t, m, "h4", sink) // origin h4, moved to h3, lost there
		if _, err := m.Migrate(ctx, moved, "h3", Direct); err != nil {
			t.Fatal(err)
		}
		from := task.NewTID(h2.cfg.HostID, 1<<20) // a sender on h2
		send := func(to task.TID) error {
			return h2.send(ctx, nil, from, to, 1, task.Payload{Data: []byte{0xc0}}, noWait, nil)
		}
		for _, to := range []task.TID{born, moved} {
			if err := send(to); err != nil {
				t.Fatalf("send to %v: %v", to, err)
			}
			if who := <-got; who != to {
				t.Fatalf("%v got the message for %v", who, to)
			}
		}
		if err := m.DeleteHost(ctx, "h3"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for _, to := range []task.TID{born, moved} {
			if err := send(to); err != nil {
				t.Fatalf("send to %v after its host was deleted: %v, want it held or dropped", to, err)
			}
		}
		synctest.Wait()
		time.Sleep(10 * h2.cfg.RTO) // virtual: long enough for queries to be asked again
		synctest.Wait()
		asks := h2.rstats.asks.Load()
		time.Sleep(10 * h2.cfg.RTO)
		synctest.Wait()
		h2.rt.mu.Lock()
		for _, to := range []task.TID{born, moved} {
			if n := h2.rt.outbox.Pending(to); n != 0 || h2.routes.c.Asking(to) {
				t.Errorf("%v, lost for good: %d bytes still held for it, asking %v", to, n, h2.routes.c.Asking(to))
			}
			if _, ok := h2.routes.c.Ended(to); !ok {
				t.Errorf("h2 does not know %v ended", to)
			}
		}
		h2.rt.mu.Unlock()
		if n := h2.rstats.asks.Load(); n != asks {
			t.Errorf("h2 still asks about lost tasks: %d queries more in 10 RTOs", n-asks)
		}
		if err := send(born); !errors.Is(err, task.ErrNoSuchTask) {
			t.Errorf("send to %v, lost with its origin h3: %v, want %v", born, err, task.ErrNoSuchTask)
		}
		// moved's route is its origin h4 again: a send goes there and is
		// refused as to a task that has ended (dropped, as a message to an
		// exited task is).
		if err := send(moved); err != nil {
			t.Errorf("send to %v, whose origin is live: %v", moved, err)
		}
		synctest.Wait()
		h2.rt.mu.Lock()
		n := h2.rt.outbox.Pending(moved)
		h2.rt.mu.Unlock()
		if n != 0 {
			t.Errorf("%d bytes held for %v after its origin's refusal", n, moved)
		}
		h4 := vm.Daemons[3]
		h4.rt.mu.Lock()
		e, ok := h4.endedLocked(moved)
		r := h4.rt.routes.Lookup(moved)
		h4.rt.mu.Unlock()
		if !ok || r.Epoch != 0 {
			t.Errorf("h4, %v's origin: ended %v (e%d), route %v; want its end told and its route forgotten", moved, ok, e, r)
		}
	})
}
