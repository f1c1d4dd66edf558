package daemon

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

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

// fillToHigh puts three one-byte messages from a into m, checking that
// there was room for each under the limit it returns: m then holds
// exactly that limit.
func fillToHigh(t *testing.T, m *mailbox, a task.TID) (high int64) {
	t.Helper()
	high = int64(3 * (1 + msgOverhead))
	for i := range 3 {
		if ch := m.room(high, 0); ch != nil {
			t.Fatalf("no room after %d messages", i)
		}
		m.put(env(a, i))
	}
	return high
}

// TestMailboxRoom: a mailbox's memory counts payload plus msgOverhead per
// message; room is refused from MailboxHigh on, and the waiter is woken
// when a message leaves. The daemon's gauge counts the mailbox in steps
// and drops it when it is drained.
func TestMailboxRoom(t *testing.T) {
	var total gauge
	m := mailbox{total: &total}
	a := task.NewTID(1, 1)
	high := fillToHigh(t, &m, a)
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
	if m.memory() != 0 || total.n.Load() != 0 {
		t.Fatalf("after drain: mailbox %d, daemon %d bytes", m.memory(), total.n.Load())
	}
	m.put(env(a, 1))
	m.close()
	if m.memory() != 0 || total.n.Load() != 0 {
		t.Fatalf("after close: mailbox %d, daemon %d bytes", m.memory(), total.n.Load())
	}
}

// TestMailboxRoomAfterATakeUnseen: a sender that filled a mailbox to its
// limit without ever waiting, then asks for room after a receiver took a
// message, finds room. Before, receivers told senders what they took
// only every 4 KiB, when a sender already waited, or before they waited
// themselves: the sender waited for room the mailbox had, until the
// receiver's next receive, which could hang on the sender itself.
func TestMailboxRoomAfterATakeUnseen(t *testing.T) {
	var m mailbox
	a := task.NewTID(1, 1)
	high := fillToHigh(t, &m, a)
	if _, ok, _ := m.get(context.Background(), nil, a, task.AnyTag, false); !ok {
		t.Fatal("no message")
	}
	if ch := m.room(high, 0); ch != nil {
		t.Fatalf("no room with %d bytes held, below the limit of %d", 2*(1+msgOverhead), high)
	}
}

// TestMailboxAgainstModel runs seeded sequences of puts, receives with
// and without wildcards, probes, snapshots and drains on a mailbox and on
// a model of it, one queue searched from the oldest message, and checks
// that they agree at every step: the mailbox's two sides (senders'
// messages not yet taken by a receiver, and the older ones a receiver has
// taken) keep arrival order for every pattern, and its memory counts what
// it holds.
func TestMailboxAgainstModel(t *testing.T) {
	tids := []task.TID{task.NewTID(1, 1), task.NewTID(1, 2), task.NewTID(2, 1)}
	pick := func(r *rand.Rand) (task.TID, int) {
		from, tag := task.AnyTask, task.AnyTag
		if r.IntN(2) == 0 {
			from = tids[r.IntN(len(tids))]
		}
		if r.IntN(2) == 0 {
			tag = r.IntN(3)
		}
		return from, tag
	}
	for seed := range uint64(30) {
		r := rand.New(rand.NewPCG(seed, 0x6d61696c))
		var m mailbox
		var model []envelope
		next := 0 // a serial number in each message's body, to tell them apart
		for step := range 3000 {
			where := fmt.Sprintf("seed %d step %d", seed, step)
			switch op := r.IntN(10); {
			case op < 4:
				e := envelope{from: tids[r.IntN(len(tids))], tag: r.IntN(3),
					body: task.Payload{Enc: task.EncBytes, Data: []byte{byte(next), byte(next >> 8)}}}
				next++
				m.put(e)
				model = append(model, e)
			case op < 8:
				from, tag := pick(r)
				got, ok, err := m.get(context.Background(), nil, from, tag, false)
				i := slices.IndexFunc(model, func(e envelope) bool { return e.matches(from, tag) })
				if err != nil || ok != (i >= 0) {
					t.Fatalf("%s: get(%v, %d) = ok %v, %v; the model has it at %d", where, from, tag, ok, err, i)
				}
				if ok {
					if want := model[i]; got.from != want.from || got.tag != want.tag || string(got.body.Data) != string(want.body.Data) {
						t.Fatalf("%s: get(%v, %d) = %v/%d/%v, want %v/%d/%v", where, from, tag, got.from, got.tag, got.body.Data, want.from, want.tag, want.body.Data)
					}
					model = slices.Delete(model, i, i+1)
				}
			case op < 9:
				from, tag := pick(r)
				st, ok := m.probe(from, tag)
				i := slices.IndexFunc(model, func(e envelope) bool { return e.matches(from, tag) })
				if ok != (i >= 0) || ok && (st.From != model[i].from || st.Tag != model[i].tag) {
					t.Fatalf("%s: probe(%v, %d) = %+v %v; the model has it at %d", where, from, tag, st, ok, i)
				}
			default:
				drain := r.IntN(4) == 0
				var got []envelope
				if drain {
					got = m.drain()
				} else {
					got = m.snapshot()
				}
				if len(got) != len(model) {
					t.Fatalf("%s: %d messages queued, the model %d", where, len(got), len(model))
				}
				for i := range got {
					if string(got[i].body.Data) != string(model[i].body.Data) {
						t.Fatalf("%s: message %d is %v, the model's %v", where, i, got[i].body.Data, model[i].body.Data)
					}
				}
				if drain {
					model = model[:0]
				}
			}
			n, bytes := m.stats()
			if n != len(model) || bytes != 2*len(model) {
				t.Fatalf("%s: stats %d messages, %d bytes; the model %d", where, n, bytes, len(model))
			}
			if mem, want := m.memory(), int64(len(model))*(2+msgOverhead); mem != want {
				t.Fatalf("%s: memory %d, the model's %d", where, mem, want)
			}
		}
	}
}

// TestMailboxConcurrentReceivers: a sender puts numbered messages on two
// tags while a receiver for each tag and a third with wildcards block in
// get; every message is received once, and each receiver gets its
// messages in the order they were put. An end mark on each tag, put back
// by whoever takes it, ends each receiver.
func TestMailboxConcurrentReceivers(t *testing.T) {
	var m mailbox
	a := task.NewTID(1, 1)
	const n = 20000
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	msg := func(i, tag int) envelope {
		return envelope{from: a, tag: tag, body: task.Payload{Enc: task.EncBytes, Data: []byte{byte(i), byte(i >> 8), byte(i >> 16)}}}
	}
	var wg sync.WaitGroup
	got := make([][]int, 3)
	for k, tag := range []int{0, 1, task.AnyTag} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				e, ok, err := m.get(ctx, nil, a, tag, true)
				if err != nil || !ok {
					t.Errorf("receiver %d: ok %v, %v", k, ok, err)
					return
				}
				v := int(e.body.Data[0]) | int(e.body.Data[1])<<8 | int(e.body.Data[2])<<16
				if v == n {
					m.put(e)
					return
				}
				got[k] = append(got[k], v)
			}
		}()
	}
	for i := range n {
		m.put(msg(i, i%2))
	}
	m.put(msg(n, 0))
	m.put(msg(n, 1))
	wg.Wait()
	seen := make([]bool, n)
	for k, vs := range got {
		if !slices.IsSorted(vs) {
			t.Fatalf("receiver %d got its messages out of order", k)
		}
		for _, v := range vs {
			if seen[v] {
				t.Fatalf("message %d received twice", v)
			}
			seen[v] = true
		}
	}
	if i := slices.Index(seen, false); i >= 0 {
		t.Fatalf("message %d never received", i)
	}
}

// BenchmarkMailboxStream is one goroutine putting 8 B messages into a
// mailbox and another taking them, blocking when it is empty: the
// mailbox's share of the local message rate, without the task API and
// routing. ns/op is per message.
func BenchmarkMailboxStream(b *testing.B) {
	var total gauge
	m := mailbox{total: &total}
	a := task.NewTID(1, 1)
	body := task.Payload{Enc: task.EncBytes, Data: make([]byte, 8)}
	done := make(chan error, 1)
	b.ResetTimer()
	go func() {
		for i := range b.N {
			e, ok, err := m.get(context.Background(), nil, a, task.AnyTag, true)
			if err != nil || !ok || e.tag != i {
				done <- fmt.Errorf("message %d: tag %d, ok %v, %v", i, e.tag, ok, err)
				return
			}
		}
		done <- nil
	}()
	for i := range b.N {
		m.put(envelope{from: a, tag: i, body: body})
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
