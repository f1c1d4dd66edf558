package daemon

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/task"
)

// TestWindowFreedWhenReceiverArrives: a sender whose window is full of
// messages held for a receiver moving onto the sender's own daemon goes
// on once the receiver is restored there, which takes them in and
// acknowledges them on the spot. Before, that acknowledgement woke no
// sender waiting for its window: with nothing else unacknowledged, the
// sender waited for ever (TestLocalPairAcrossMoves hung so under load).
func TestWindowFreedWhenReceiverArrives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &slowTransfer{delay: 300 * time.Millisecond, sent: make(chan struct{})}
		// A window of a few messages: the held ones fill it.
		vm := startMemVMWith(t, 3, s, Config{MoveTransferTimeout: 5 * time.Second, Window: 64})
		m, h2 := vm.Daemons[0], vm.Daemons[1]
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const n = 50
		got := make(chan int, n)
		recv := spawnOn(t, m, h2.Name(), fn(t, func(c *task.Ctx, _ int) error {
			for {
				var x int
				if _, err := c.Recv(task.AnyTask, 1, &x, task.Safe()); err != nil {
					return err
				}
				got <- x
			}
		}))
		moved := make(chan error, 1)
		go func() {
			_, err := m.Migrate(ctx, recv, m.Name(), Direct)
			moved <- err
		}()
		// The receiver's checkpoint is on its way to the master's daemon:
		// a sender there now has its messages held, and waits for its
		// window.
		<-s.sent
		snd := spawnOn(t, m, m.Name(), fn(t, func(c *task.Ctx, _ int) error {
			for i := range n {
				if err := c.Send(recv, 1, i); err != nil {
					return err
				}
			}
			return nil
		}))
		synctest.Wait()
		m.rt.mu.Lock()
		held := m.rt.outbox.Pending(recv)
		m.rt.mu.Unlock()
		if held == 0 {
			t.Fatalf("nothing held for %v while it moves: the test does not fill the window", recv)
		}
		if err := <-moved; err != nil {
			t.Fatalf("the move: %v", err)
		}
		if _, err := m.Wait(ctx, snd); err != nil {
			t.Fatalf("the sender: %v (its window was never freed)", err)
		}
		for i := range n {
			select {
			case x := <-got:
				if x != i {
					t.Fatalf("message %d received as %d", i, x)
				}
			case <-ctx.Done():
				t.Fatalf("message %d never received", i)
			}
		}
	})
}
