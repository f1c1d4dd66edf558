package daemon

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/dpvm/dpvm/task"
)

func env(from task.TID, tag int) envelope {
	return envelope{from: from, tag: tag, body: task.Payload{Enc: task.EncBytes, Data: []byte{byte(tag)}}}
}

func TestMailboxMatchingOrder(t *testing.T) {
	var m mailbox
	a, b := task.NewTID(1, 1), task.NewTID(1, 2)
	for i, e := range []envelope{env(a, 1), env(b, 1), env(a, 2), env(b, 2), env(a, 1)} {
		if !m.put(e) {
			t.Fatalf("put %d refused", i)
		}
	}
	if n, bytes := m.stats(); n != 5 || bytes != 5 {
		t.Fatalf("stats = %d, %d", n, bytes)
	}
	steps := []struct {
		from     task.TID
		tag      int
		wantFrom task.TID
		wantTag  int
	}{
		{b, task.AnyTag, b, 1},
		{task.AnyTask, 2, a, 2},
		{a, 1, a, 1},
		{task.AnyTask, task.AnyTag, b, 2},
		{task.AnyTask, task.AnyTag, a, 1},
	}
	for i, s := range steps {
		if st, ok := m.probe(s.from, s.tag); !ok || st.From != s.wantFrom || st.Tag != s.wantTag {
			t.Fatalf("step %d: probe = %+v %v", i, st, ok)
		}
		e, ok, err := m.get(context.Background(), nil, s.from, s.tag, false)
		if !ok || err != nil || e.from != s.wantFrom || e.tag != s.wantTag {
			t.Fatalf("step %d: get(%v,%d) = %v/%d %v %v", i, s.from, s.tag, e.from, e.tag, ok, err)
		}
	}
	if _, ok, _ := m.get(context.Background(), nil, task.AnyTask, task.AnyTag, false); ok {
		t.Fatal("mailbox should be empty")
	}
	m.close()
	if m.put(env(a, 1)) {
		t.Fatal("closed mailbox accepted a message")
	}
	if _, _, err := m.get(context.Background(), nil, task.AnyTask, task.AnyTag, true); !errors.Is(err, task.ErrKilled) {
		t.Fatalf("get on closed mailbox: %v", err)
	}
}

// TestMailboxCompaction drains a long queue from the front and from the
// middle and checks nothing is lost or reordered.
func TestMailboxCompaction(t *testing.T) {
	var m mailbox
	a := task.NewTID(1, 1)
	for i := range 1000 {
		m.put(env(a, i%7))
	}
	var got []int
	for tag := range 7 {
		for {
			e, ok, _ := m.get(context.Background(), nil, a, tag, false)
			if !ok {
				break
			}
			got = append(got, e.tag)
		}
		if tag == 3 {
			// Drain everything else from the front in order.
			last := -1
			for i := 0; ; i++ {
				e, ok, _ := m.get(context.Background(), nil, task.AnyTask, task.AnyTag, false)
				if !ok {
					break
				}
				if e.tag <= 3 || (last >= 0 && e.tag != (last+1)%7 && !(last == 6 && e.tag == 4)) {
					t.Fatalf("front drain %d: tag %d after %d", i, e.tag, last)
				}
				last = e.tag
				got = append(got, e.tag)
			}
		}
	}
	if len(got) != 1000 {
		t.Fatalf("got %d messages, want 1000", len(got))
	}
}

// TestMailboxGiveUpRace cancels blocked receivers while messages arrive
// (every other round; the rest receive normally): every message must end
// up either received or still queued, exactly once. It runs on a new
// mailbox per round and on one mailbox for all rounds, whose waiter is
// reused from receive to receive and must never carry a message into the
// next one.
func TestMailboxGiveUpRace(t *testing.T) {
	a := task.NewTID(1, 1)
	for _, reuse := range []bool{false, true} {
		var shared mailbox
		for i := range 500 {
			m := &shared
			if !reuse {
				m = &mailbox{}
			}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			var got envelope
			var gotOK bool
			wg.Add(2)
			go func() {
				defer wg.Done()
				got, gotOK, _ = m.get(ctx, nil, a, i, true)
			}()
			go func() {
				defer wg.Done()
				m.put(env(a, i))
			}()
			if i%2 == 0 {
				cancel()
			}
			wg.Wait()
			cancel()
			queued, ok, _ := m.get(context.Background(), nil, a, task.AnyTag, false)
			if gotOK == ok {
				t.Fatalf("reuse %v, round %d: received %v and queued %v: the message was lost or duplicated", reuse, i, gotOK, ok)
			}
			if gotOK && got.tag != i || ok && queued.tag != i {
				t.Fatalf("reuse %v, round %d: received tag %d, queued tag %d", reuse, i, got.tag, queued.tag)
			}
			if n, _ := m.stats(); n != 0 || len(m.waiters) != 0 {
				t.Fatalf("reuse %v, round %d: %d messages and %d waiters left", reuse, i, n, len(m.waiters))
			}
		}
	}
}

func BenchmarkMailboxPutGet(b *testing.B) {
	var m mailbox
	a := task.NewTID(1, 1)
	e := env(a, 1)
	for b.Loop() {
		m.put(e)
		if _, ok, _ := m.get(context.Background(), nil, a, 1, false); !ok {
			b.Fatal("lost")
		}
	}
}

// TestMailboxRoom: a mailbox's memory counts payload plus msgOverhead per
// message; room is refused from MailboxHigh on, and the waiter is woken
// when a message leaves. The daemon's gauge counts the mailbox in steps
// and drops it when it is drained.
func TestMailboxRoom(t *testing.T) {
	var total gauge
	m := mailbox{total: &total}
	a := task.NewTID(1, 1)
	high := int64(3 * (1 + msgOverhead))
	for i := range 3 {
		if ch := m.room(high, 0); ch != nil {
			t.Fatalf("no room after %d messages", i)
		}
		m.put(env(a, i))
	}
	ch := m.room(high, 0)
	if ch == nil {
		t.Fatal("room past MailboxHigh")
	}
	if got := total.n.Load(); got != 0 {
		t.Fatalf("the daemon counts %d for a small mailbox, want none before %d bytes", got, reportEvery)
	}
	m.report()
	if got := total.n.Load(); got != totalStep {
		t.Fatalf("the daemon counts %d for a small mailbox, want one step of %d", got, totalStep)
	}
	if ch := m.room(1<<30, totalStep); ch == nil {
		t.Fatal("room past the daemon's budget")
	}
	select {
	case <-ch:
		t.Fatal("woken before a message left")
	default:
	}
	if _, ok, _ := m.get(context.Background(), nil, a, task.AnyTag, false); !ok {
		t.Fatal("no message")
	}
	select {
	case <-ch:
	default:
		t.Fatal("not woken when a message left")
	}
	if ch := m.room(high, 0); ch != nil {
		t.Fatal("no room below MailboxHigh")
	}
	if n := len(m.drain()); n != 2 {
		t.Fatalf("drained %d messages, want 2", n)
	}
	if m.mem.Load() != 0 || total.n.Load() != 0 {
		t.Fatalf("after drain: mailbox %d, daemon %d bytes", m.mem.Load(), total.n.Load())
	}
	m.put(env(a, 1))
	m.close()
	if m.mem.Load() != 0 || total.n.Load() != 0 {
		t.Fatalf("after close: mailbox %d, daemon %d bytes", m.mem.Load(), total.n.Load())
	}
}
