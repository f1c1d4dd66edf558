package daemon

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// flooder sends the numbers Sent.. N-1 to To with Send and task.Safe (without it when
// Plain, Send with task.InPlace when InPlace), one message each: its fields say
// where it is, so it resumes where it stopped after a move.
type flooder struct {
	To      task.TID
	N, Sent int
	Size    int
	Plain   bool
	InPlace bool
}

func init() { task.Register("daemon.test.flooder", &flooder{}) }

func (f *flooder) Run(c *task.Ctx) error {
	for f.Sent < f.N {
		msg := make([]byte, f.Size)
		msg[0] = byte(f.Sent)
		var err error
		if f.InPlace {
			err = c.Send(f.To, 1, msg, task.InPlace())
		} else if f.Plain {
			err = c.Send(f.To, 1, msg)
		} else {
			err = c.Send(f.To, 1, msg, task.Safe())
		}
		if err != nil {
			return err
		}
		f.Sent++
	}
	return nil
}

// gatedReceiver waits until its gate opens (reaching safe points
// meanwhile, when Safe), then receives Arg messages from anyone and
// checks they carry 0, 1, 2… in order.
type gatedReceiver struct {
	Arg  int
	Safe bool
}

var (
	receiverGates   = map[int]chan struct{}{}
	receiverResults = map[int]chan error{}
	receiverMu      sync.Mutex
)

func init() { task.Register("daemon.test.gatedReceiver", &gatedReceiver{}) }

func (g *gatedReceiver) Run(c *task.Ctx) error {
	receiverMu.Lock()
	gate, res := receiverGates[g.Arg], receiverResults[g.Arg]
	receiverMu.Unlock()
	for open := false; !open; {
		select {
		case <-gate:
			open = true
		case <-time.After(10 * time.Millisecond):
		case <-c.Context().Done():
			return task.ErrKilled
		}
		if g.Safe {
			if err := c.SafePoint(); err != nil {
				return err
			}
		}
	}
	var err error
	for i := range g.Arg {
		m, rerr := c.Recv(task.AnyTask, 1, nil)
		if rerr != nil {
			err = rerr
			break
		}
		if got := int(m.Payload.Data[0]); got != i%256 {
			err = fmt.Errorf("message %d carries %d", i, got)
			break
		}
	}
	res <- err
	return err
}

// newGate registers a gated receiver expecting n messages.
func newGate(t testing.TB, n int) (chan struct{}, chan error) {
	gate, res := make(chan struct{}), make(chan error, 1)
	receiverMu.Lock()
	receiverGates[n], receiverResults[n] = gate, res
	receiverMu.Unlock()
	t.Cleanup(func() {
		receiverMu.Lock()
		delete(receiverGates, n)
		delete(receiverResults, n)
		receiverMu.Unlock()
	})
	return gate, res
}

func (d *Daemon) flooderSent(tid task.TID) int {
	d.ht.mu.Lock()
	defer d.ht.mu.Unlock()
	if h := d.ht.tasks[tid]; h != nil {
		return h.t.(*flooder).Sent
	}
	return -1
}

func (d *Daemon) mailboxOf(tid task.TID) *mailbox {
	d.ht.mu.Lock()
	defer d.ht.mu.Unlock()
	return d.ht.tasks[tid].mb
}

// TestLocalSendWaitsForRoom: a task sending forever to one on the same
// daemon that does not receive stops once the receiver's mailbox holds
// MailboxHigh bytes, and goes on, every message delivered once and in
// order, when the receiver takes them; with Send, plain and with task.InPlace,
// whose messages are the sender's slices and are counted the same.
func TestLocalSendWaitsForRoom(t *testing.T) {
	for _, inPlace := range []bool{false, true} {
		t.Run(fmt.Sprintf("in place %v", inPlace), func(t *testing.T) { localSendWaitsForRoom(t, inPlace) })
	}
}

func localSendWaitsForRoom(t *testing.T, inPlace bool) {
	synctest.Test(t, func(t *testing.T) {
		const n, size, fit = 100, 8, 10
		d := New(Config{MailboxHigh: fit * (size + msgOverhead)})
		haltInBubble(t, d)
		gate, res := newGate(t, n)
		rx, err := d.SpawnTask(&gatedReceiver{Arg: n})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := d.SpawnTask(&flooder{To: rx, N: n, Size: size, Plain: true, InPlace: inPlace})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := d.flooderSent(tx); got != fit {
			t.Fatalf("the sender sent %d messages before it waited, want %d", got, fit)
		}
		mb := d.mailboxOf(rx)
		if q, b := mb.stats(); q != fit || b != fit*size {
			t.Fatalf("the mailbox holds %d messages, %d bytes; want %d, %d", q, b, fit, fit*size)
		}
		if mem := mb.memory(); mem != int64(d.cfg.MailboxHigh) {
			t.Fatalf("mailbox memory %d, want %d", mem, d.cfg.MailboxHigh)
		}
		close(gate)
		if err := <-res; err != nil {
			t.Fatal(err)
		}
		if _, err := d.Wait(context.Background(), tx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if total := d.mbMem.n.Load(); total != 0 {
			t.Errorf("the daemon counts %d bytes in mailboxes after they drained", total)
		}
	})
}

// TestDaemonMailboxBudget: two receivers that do not receive, each under
// its own MailboxHigh, together reach the daemon's budget: their senders
// wait, and the daemon's count stays within two steps of the budget.
func TestDaemonMailboxBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, size = 200, 4000
		budget := int64(4 * totalStep)
		d := New(Config{MailboxHigh: 1 << 30, MailboxBudget: budget})
		haltInBubble(t, d)
		var gates []chan struct{}
		var results []chan error
		var senders []task.TID
		for i := range 2 {
			gate, res := newGate(t, n+i) // distinct keys; the receiver expects n+i
			gates, results = append(gates, gate), append(results, res)
			rx, err := d.SpawnTask(&gatedReceiver{Arg: n + i})
			if err != nil {
				t.Fatal(err)
			}
			tx, err := d.SpawnTask(&flooder{To: rx, N: n + i, Size: size, Plain: true})
			if err != nil {
				t.Fatal(err)
			}
			senders = append(senders, tx)
		}
		synctest.Wait()
		total := d.mbMem.n.Load()
		if total < budget || total > budget+2*totalStep {
			t.Fatalf("the daemon counts %d bytes in mailboxes with both senders waiting, budget %d", total, budget)
		}
		for _, tx := range senders {
			if s := d.flooderSent(tx); s < 0 || s >= n {
				t.Fatalf("sender %v sent %d of %d messages: it does not wait", tx, s, n)
			}
		}
		// The budget is shared: both receivers must take their messages
		// for both senders to finish.
		for i := range gates {
			close(gates[i])
		}
		for i := range results {
			if err := <-results[i]; err != nil {
				t.Fatal(err)
			}
		}
		for _, tx := range senders {
			if _, err := d.Wait(context.Background(), tx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestBlockedSafeSenderMoves: a task waiting in Send with task.Safe for room in a
// full mailbox is at a safe point: it suspends for a move; resumed, it
// goes on, and the receiver gets every message once, in order.
func TestBlockedSafeSenderMoves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, size, fit = 50, 8, 5
		d := New(Config{MailboxHigh: fit * (size + msgOverhead)})
		haltInBubble(t, d)
		gate, res := newGate(t, n)
		rx, err := d.SpawnTask(&gatedReceiver{Arg: n})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := d.SpawnTask(&flooder{To: rx, N: n, Size: size})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		ctx := context.Background()
		step := migStep{TID: tx, Move: 3, Host: 2, Epoch: 1, Timeout: time.Minute}
		if err := d.suspendForMove(ctx, step); err != nil {
			t.Fatalf("the sender waiting for room did not suspend: %v", err)
		}
		d.ht.mu.Lock()
		l := d.ht.moving[tx]
		d.ht.mu.Unlock()
		if l == nil || l.h.t.(*flooder).Sent != fit {
			t.Fatalf("suspended sender: %+v", l)
		}
		if err := d.resumeDeparture(ctx, migStep{TID: tx, Move: 3, Route: routing.Route{Host: d.cfg.HostID, Epoch: 2}}); err != nil {
			t.Fatal(err)
		}
		close(gate)
		if err := <-res; err != nil {
			t.Fatal(err)
		}
		if _, err := d.Wait(ctx, tx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestReceiverMovesWhileSenderWaits: a task waits in a plain Send (or a
// Send with task.InPlace) for room in the mailbox of a task on its daemon that does
// not receive but reaches safe points; that task moves to another host,
// its mailbox with it (in place, the queued messages are the sender's
// slices, copied into the checkpoint). The waiting sender must not hold
// the move up, the origin's mailbox gauge falls to nothing, and every
// message arrives once, in order.
func TestReceiverMovesWhileSenderWaits(t *testing.T) {
	for _, inPlace := range []bool{false, true} {
		t.Run(fmt.Sprintf("in place %v", inPlace), func(t *testing.T) { receiverMovesWhileSenderWaits(t, inPlace) })
	}
}

func receiverMovesWhileSenderWaits(t *testing.T, inPlace bool) {
	const n, size, fit = 40, 8, 4
	vm := startMemVM(t, 2, &faults{}, Config{MailboxHigh: fit * (size + msgOverhead)})
	m := vm.Master()
	gate, res := newGate(t, n)
	rx, err := m.SpawnTask(&gatedReceiver{Arg: n, Safe: true})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := m.SpawnTask(&flooder{To: rx, N: n, Size: size, Plain: true, InPlace: inPlace})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for m.flooderSent(tx) != fit {
		if ctx.Err() != nil {
			t.Fatalf("the sender sent %d, want %d before it waits", m.flooderSent(tx), fit)
		}
		time.Sleep(time.Millisecond) // polling a real daemon with a deadline
	}
	if _, err := m.Migrate(ctx, rx, "h2", Direct); err != nil {
		t.Fatalf("the receiver did not move: %v", err)
	}
	if total := m.mbMem.n.Load(); total != 0 {
		t.Errorf("the origin counts %d bytes in mailboxes after the receiver left", total)
	}
	close(gate)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	if _, err := m.Wait(ctx, tx); err != nil {
		t.Fatal(err)
	}
}
