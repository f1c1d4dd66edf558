package task

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// world is an in-memory runtime for tests of the communicator API: one
// mailbox per task, matching as the daemon's does, and checkpoints that
// encode a task's state at a safe point and run it again from the decoded
// copy (a move or rollback to the last safe point, with the mailbox kept).
type world struct {
	eps []*worldEP
}

// worldEP is one task's endpoint. The Endpoint methods it does not
// implement are the embedded nil interface's: calling one panics.
type worldEP struct {
	Endpoint
	w    *world
	self TID

	mu  sync.Mutex
	cnd *sync.Cond
	q   []Message

	// every > 0 asks for a checkpoint at every every-th safe wait;
	// waits counts them; want is set while one is asked for.
	every, waits int
	want         atomic.Bool
	ckpts        atomic.Int64
}

// newWorld makes a world of n tasks; every > 0 checkpoints each at every
// every-th wait that is a safe point.
func newWorld(n, every int) *world {
	w := &world{}
	for i := range n {
		ep := &worldEP{w: w, self: NewTID(1, uint32(i+1)), every: every}
		ep.cnd = sync.NewCond(&ep.mu)
		w.eps = append(w.eps, ep)
	}
	return w
}

func (w *world) tids() []TID {
	out := make([]TID, len(w.eps))
	for i, ep := range w.eps {
		out[i] = ep.self
	}
	return out
}

func (w *world) ep(t TID) *worldEP {
	for _, ep := range w.eps {
		if ep.self == t {
			return ep
		}
	}
	return nil
}

func (e *worldEP) Self() TID                { return e.self }
func (e *worldEP) Parent() TID              { return 0 }
func (e *worldEP) Siblings() []TID          { return e.w.tids() }
func (e *worldEP) Context() context.Context { return context.Background() }
func (e *worldEP) Output() io.Writer        { return io.Discard }
func (e *worldEP) Logger() *slog.Logger     { return slog.New(slog.DiscardHandler) }

func (e *worldEP) Send(_ context.Context, to TID, tag int, p Payload) error {
	dst := e.w.ep(to)
	if dst == nil {
		return ErrNoSuchTask
	}
	p.Data = append([]byte(nil), p.Data...)
	dst.mu.Lock()
	dst.q = append(dst.q, Message{From: e.self, Tag: tag, Payload: p})
	dst.cnd.Broadcast()
	dst.mu.Unlock()
	return nil
}

func (e *worldEP) Mcast(ctx context.Context, to []TID, tag int, p Payload) error {
	for _, t := range to {
		if err := e.Send(ctx, t, tag, p); err != nil {
			return err
		}
	}
	return nil
}

func (e *worldEP) Recv(ctx context.Context, from TID, tag int, wait bool) (Message, bool, error) {
	return e.RecvFunc(ctx, from, tag, nil, wait)
}

func (e *worldEP) RecvSafe(ctx context.Context, from TID, tag int) (Message, bool, error) {
	return e.RecvFuncSafe(ctx, from, tag, nil)
}

func (e *worldEP) RecvFunc(_ context.Context, from TID, tag int, match func(Status) bool, wait bool) (Message, bool, error) {
	return e.take(from, tag, match, wait, false)
}

// RecvFuncSafe asks for a checkpoint (returning ok == false) at every
// every-th call, before looking at the mailbox.
func (e *worldEP) RecvFuncSafe(_ context.Context, from TID, tag int, match func(Status) bool) (Message, bool, error) {
	if e.every > 0 {
		e.waits++
		if e.waits%e.every == 0 {
			e.want.Store(true)
			return Message{}, false, nil
		}
	}
	return e.take(from, tag, match, true, true)
}

func (e *worldEP) take(from TID, tag int, match func(Status) bool, wait, _ bool) (Message, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		for i, m := range e.q {
			if (from == AnyTask || from == m.From) && (tag == AnyTag || tag == m.Tag) && (match == nil || match(m.Status())) {
				e.q = append(e.q[:i], e.q[i+1:]...)
				return m, true, nil
			}
		}
		if !wait {
			return Message{}, false, nil
		}
		e.cnd.Wait()
	}
}

func (e *worldEP) Probe(from TID, tag int) (Status, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range e.q {
		if (from == AnyTask || from == m.From) && (tag == AnyTag || tag == m.Tag) {
			return m.Status(), true
		}
	}
	return Status{}, false
}

// SafePoint checkpoints t when a checkpoint is asked for: run restarts it
// from its encoded state.
func (e *worldEP) SafePoint(Task) error {
	if e.want.Swap(false) {
		e.ckpts.Add(1)
		return ErrSuspended
	}
	return nil
}

// runWorld runs proto(rank) on every task of w, each with C set to the
// world's communicator, restarting a task from its state encoded at the
// checkpoint each time Run returns ErrSuspended; it returns the tasks'
// errors joined and their final states.
func runWorld[T interface {
	Task
	comm() *Comm
}](t testing.TB, w *world, proto func(rank int) T) ([]T, error) {
	t.Helper()
	n := len(w.eps)
	out := make([]T, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		tk := proto(r)
		*tk.comm() = Comm{Rank: r, TIDs: w.tids()}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				err := tk.Run(NewCtx(w.eps[r], tk))
				if !errors.Is(err, ErrSuspended) {
					out[r], errs[r] = tk, err
					if err != nil {
						errs[r] = fmt.Errorf("rank %d: %w", r, err)
					}
					return
				}
				typ, state, err := EncodeState(tk)
				if err != nil {
					errs[r] = err
					return
				}
				nt, err := New(typ, state)
				if err != nil {
					errs[r] = err
					return
				}
				tk = nt.(T)
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// fnBodies holds test bodies by key, so that registered test tasks can
// run functions of the test that made them.
var (
	fnBodiesMu sync.Mutex
	fnBodies   = map[string]func(c *Ctx, t *scriptTask) error{}
	fnNext     atomic.Int64
)

// scriptTask runs a test body named by Fn, with its state in the fields.
type scriptTask struct {
	C    Comm
	D    Comm
	E    Comm
	Fn   string
	Step int
	Reqs []Request
	Got  []float64
	Ints []int64
}

func init() { Register("task.test.script", &scriptTask{}) }

func (s *scriptTask) comm() *Comm { return &s.C }

func (s *scriptTask) Run(c *Ctx) error {
	fnBodiesMu.Lock()
	f := fnBodies[s.Fn]
	fnBodiesMu.Unlock()
	return f(c, s)
}

// script registers body and returns the key that names it.
func script(t testing.TB, body func(c *Ctx, s *scriptTask) error) string {
	key := strconv.FormatInt(fnNext.Add(1), 10)
	fnBodiesMu.Lock()
	fnBodies[key] = body
	fnBodiesMu.Unlock()
	t.Cleanup(func() {
		fnBodiesMu.Lock()
		delete(fnBodies, key)
		fnBodiesMu.Unlock()
	})
	return key
}

// runScript runs body on n tasks, checkpointing each at every every-th
// safe wait (none for 0), and returns the final states.
func runScript(t testing.TB, n, every int, body func(c *Ctx, s *scriptTask) error) ([]*scriptTask, *world) {
	t.Helper()
	key := script(t, body)
	w := newWorld(n, every)
	out, err := runWorld(t, w, func(int) *scriptTask { return &scriptTask{Fn: key} })
	if err != nil {
		t.Fatalf("np %d, checkpoint every %d waits: %v", n, every, err)
	}
	if every > 0 && n > 1 {
		var ckpts int64
		for _, ep := range w.eps {
			ckpts += ep.ckpts.Load()
		}
		if ckpts == 0 {
			t.Fatalf("np %d, checkpoint every %d waits: no checkpoint was taken", n, every)
		}
	}
	return out, w
}
