package task

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// TestNonBlockingOrder: at np = 2..5, with and without checkpoints in the
// waits, receive requests take matching messages in the order they were
// started whatever order they are waited for in (MPI's rule), wildcards
// included, and every request completes with the right data.
func TestNonBlockingOrder(t *testing.T) {
	const k = 4
	for n := 2; n <= 5; n++ {
		for _, every := range []int{0, 2, 3} {
			t.Run(fmt.Sprintf("np%d/every%d", n, every), func(t *testing.T) {
				runScript(t, n, every, func(c *Ctx, s *scriptTask) error {
					m := &s.C
					r := m.Rank
					// Every rank sends k messages on tag 1 and one on tag 2
					// to every other rank, the tag-2 one first.
					for _, q := range m.others(r) {
						if _, err := m.Isend(c, q, 2, []int64{int64(r), -1}); err != nil {
							return err
						}
						for i := range k {
							if _, err := m.Isend(c, q, 1, []int64{int64(r), int64(i)}); err != nil {
								return err
							}
						}
					}
					// From each other rank: k receives on tag 1, started in
					// order, waited for last first.
					got := make([][]int64, n*k)
					var reqs []Request
					for _, q := range m.others(r) {
						for i := range k {
							rq, err := m.Irecv(c, q, 1, &got[q*k+i])
							if err != nil {
								return err
							}
							reqs = append(reqs, rq)
						}
					}
					slices.Reverse(reqs)
					if err := m.Waitall(c, reqs...); err != nil {
						return err
					}
					for _, q := range m.others(r) {
						for i := range k {
							if want := []int64{int64(q), int64(i)}; !slices.Equal(got[q*k+i], want) {
								return fmt.Errorf("rank %d: receive %d from %d got %v, want %v", r, i, q, got[q*k+i], want)
							}
						}
					}
					// The tag-2 messages, with both wildcards: any member,
					// any tag, each from a different member.
					from := map[int]bool{}
					for range n - 1 {
						var v []int64
						rq, err := m.Irecv(c, AnyRank, AnyTag, &v)
						if err != nil {
							return err
						}
						st, err := m.Wait(c, rq)
						if err != nil {
							return err
						}
						if st.Tag != 2 || st.From == r || from[st.From] || !slices.Equal(v, []int64{int64(st.From), -1}) {
							return fmt.Errorf("rank %d: wildcard receive %+v %v (seen %v)", r, st, v, from)
						}
						from[st.From] = true
					}
					return nil
				})
			})
		}
	}
}

// TestWaitanyAndTest: Waitany reports each request once, the message from
// the rank its status names, then -1; Test says false for a message not
// yet sent (the sender sends only after a barrier the receiver has not
// reached) and true, with the data, once it is there.
func TestWaitanyAndTest(t *testing.T) {
	for n := 2; n <= 5; n++ {
		for _, every := range []int{0, 2} {
			t.Run(fmt.Sprintf("np%d/every%d", n, every), func(t *testing.T) {
				runScript(t, n, every, func(c *Ctx, s *scriptTask) error {
					m := &s.C
					r := m.Rank
					for _, q := range m.others(r) {
						if _, err := m.Isend(c, q, q, float64(100*r+q)); err != nil {
							return err
						}
					}
					vals := make([]float64, n)
					reqs := make([]Request, n) // the zero Request in r's place
					for _, q := range m.others(r) {
						var err error
						if reqs[q], err = m.Irecv(c, q, r, &vals[q]); err != nil {
							return err
						}
					}
					seen := map[int]bool{}
					for {
						i, st, err := m.Waitany(c, reqs...)
						if err != nil {
							return err
						}
						if i < 0 {
							break
						}
						if seen[i] || st.From != i || st.Tag != r || vals[i] != float64(100*i+r) {
							return fmt.Errorf("rank %d: waitany %d %+v value %v", r, i, st, vals[i])
						}
						seen[i] = true
					}
					if len(seen) != n-1 {
						return fmt.Errorf("rank %d: waitany reported %d of %d", r, len(seen), n-1)
					}

					// Test before and after the sender's send.
					var late string
					var rq Request
					if r == 1 {
						var err error
						if rq, err = m.Irecv(c, 0, 9, &late); err != nil {
							return err
						}
						// Test is not replayed: after a restart the message
						// may be there.
						if ok, _, err := m.Test(c, rq); (ok && every == 0) || err != nil {
							return fmt.Errorf("test before the send: %v %v", ok, err)
						}
					}
					if err := m.Barrier(c); err != nil {
						return err
					}
					switch r {
					case 0:
						if _, err := m.Isend(c, 1, 9, "late"); err != nil {
							return err
						}
					case 1:
						if _, err := m.Wait(c, rq); err != nil {
							return err
						}
						if ok, _, err := m.Test(c, rq); !ok || err != nil || late != "late" {
							return fmt.Errorf("test after wait: %v %v %q", ok, err, late)
						}
					}
					return nil
				})
			})
		}
	}
}

// TestSafePointWithReceiveOutstanding: SafePoint while a receive request
// is outstanding takes no checkpoint (the request's destination is a
// local of this run of Run); once it is complete, SafePoint does.
func TestSafePointWithReceiveOutstanding(t *testing.T) {
	runScript(t, 2, 0, func(c *Ctx, s *scriptTask) error {
		m := &s.C
		ep := c.ep.(*worldEP)
		if m.Rank == 1 {
			_, err := m.Isend(c, 0, 3, 42)
			return err
		}
		if s.Step == 1 { // restarted from the checkpoint below
			return nil
		}
		var v int
		rq, err := m.Irecv(c, 1, 3, &v)
		if err != nil {
			return err
		}
		ep.want.Store(true)
		if err := c.SafePoint(); err != nil || ep.ckpts.Load() != 0 {
			return fmt.Errorf("SafePoint with a receive outstanding: %v, %d checkpoints", err, ep.ckpts.Load())
		}
		if _, err := m.Wait(c, rq); err != nil || v != 42 {
			return fmt.Errorf("wait: %v %d", err, v)
		}
		s.Step = 1
		if err := c.SafePoint(); err != ErrSuspended {
			return fmt.Errorf("SafePoint once complete: %v", err)
		}
		return ErrSuspended
	})
}

// barrierEP is a worldEP with a group barrier that passes at once,
// counting the plain and the safe waits.
type barrierEP struct {
	*worldEP
	plain, safe int
}

func (e *barrierEP) Barrier(context.Context, string, int) error { e.plain++; return nil }

func (e *barrierEP) BarrierSafe(context.Context, string, int) (bool, error) {
	e.safe++
	return true, nil
}

// TestSafeBarrierWithReceiveOutstanding: Barrier with Safe waits at a safe
// point, but not while a receive request is outstanding (SafePoint would
// return nil there, so a wait that a pending move interrupts would only
// come round again): it then waits as a plain Barrier.
func TestSafeBarrierWithReceiveOutstanding(t *testing.T) {
	w := newWorld(1, 0)
	ep := &barrierEP{worldEP: w.eps[0]}
	s := &scriptTask{C: Comm{TIDs: w.tids()}}
	c := NewCtx(ep, s)
	if err := c.Barrier("g", 1, Safe()); err != nil || ep.safe != 1 || ep.plain != 0 {
		t.Fatalf("no request outstanding: %v, %d safe waits, %d plain", err, ep.safe, ep.plain)
	}
	var v int
	if _, err := s.C.Irecv(c, 0, 3, &v); err != nil {
		t.Fatal(err)
	}
	if err := c.Barrier("g", 1, Safe()); err != nil || ep.safe != 1 || ep.plain != 1 {
		t.Fatalf("a receive outstanding: %v, %d safe waits, %d plain", err, ep.safe, ep.plain)
	}
}

// TestNonBlockingBadArguments: ranks outside the communicator and tags
// outside 0..MaxCommTag are refused.
func TestNonBlockingBadArguments(t *testing.T) {
	runScript(t, 2, 0, func(c *Ctx, s *scriptTask) error {
		m := &s.C
		for what, f := range map[string]func() error{
			"isend to 2":     func() error { _, err := m.Isend(c, 2, 0, 1); return err },
			"isend to none":  func() error { _, err := m.Isend(c, NoRank, 0, 1); return err },
			"isend tag big":  func() error { _, err := m.Isend(c, 1, MaxCommTag+1, 1); return err },
			"irecv from 7":   func() error { _, err := m.Irecv(c, 7, 0, nil); return err },
			"irecv tag -5":   func() error { _, err := m.Irecv(c, 0, -5, nil); return err },
			"wait for 12345": func() error { _, err := m.Wait(c, 12345); return err },
			"test for 12345": func() error { _, _, err := m.Test(c, 12345); return err },
			"isend no comm":  func() error { var e Comm; _, err := e.Isend(c, 0, 0, 1); return err },
		} {
			if f() == nil {
				return fmt.Errorf("%s: accepted", what)
			}
		}
		return nil
	})
}

// stopEP is a world endpoint whose runtime wants the task at a safe point
// (task.StopAsker) while ask is set.
type stopEP struct {
	*worldEP
	ask bool
}

func (e *stopEP) StopAsked() bool { return e.ask }

// RecvSafe returns at once, with ok == false, while a stop is asked, as
// the daemon's does.
func (e *stopEP) RecvSafe(ctx context.Context, from TID, tag int) (Message, bool, error) {
	if e.ask {
		return Message{}, false, nil
	}
	return e.worldEP.RecvSafe(ctx, from, tag)
}

// TestCollectiveStopsWhenAsked: a collective's receive that finds its
// message already there takes it without a safe wait, but not while the
// runtime asks for a safe point: then the task stops there (its
// checkpoint taken, the message left for the restored task), so that a
// task whose partners are always ahead of it can still be checkpointed.
func TestCollectiveStopsWhenAsked(t *testing.T) {
	w := newWorld(2, 0)
	ep := &stopEP{worldEP: w.eps[0]}
	s := &scriptTask{C: Comm{TIDs: w.tids()}}
	c := NewCtx(ep, s)
	from := w.eps[1].self
	put := func() {
		if err := w.eps[1].Send(context.Background(), ep.self, s.C.collTag(), Payload{Data: []byte{1}}); err != nil {
			t.Fatal(err)
		}
	}
	put()
	if p, err := c.recvComm(&s.C, from); err != nil || len(p.Data) != 1 || ep.ckpts.Load() != 0 {
		t.Fatalf("nothing asked: %v, %v, %d checkpoints", p, err, ep.ckpts.Load())
	}
	put()
	ep.ask = true
	ep.want.Store(true) // the world's SafePoint checkpoints while want is set
	if _, err := c.recvComm(&s.C, from); !errors.Is(err, ErrSuspended) || ep.ckpts.Load() != 1 {
		t.Fatalf("a stop asked, the message there: %v, %d checkpoints; want ErrSuspended at a safe point", err, ep.ckpts.Load())
	}
	if _, ok := ep.Probe(from, s.C.collTag()); !ok {
		t.Fatal("the message was taken by the task that stopped")
	}
}
