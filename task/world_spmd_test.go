package task

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

// spmdTask is an SPMD program's task: its team comes from World.
type spmdTask struct {
	Tasks int
	C     Comm
	Seen  int // set before World: each copy starts from it
}

func init() { Register("task.test.spmd", &spmdTask{}) }

func (s *spmdTask) Run(c *Ctx) error { return c.World(&s.C, s.Tasks) }

// spawnEP is a world task's endpoint that spawns: it starts the tasks a
// spawn asks for on the world's next free endpoints, from their decoded
// state, each with this task as its parent.
type spawnEP struct {
	*worldEP
	parent TID
	next   *int
	mu     *sync.Mutex
	reqs   *[]SpawnRequest
	wg     *sync.WaitGroup
	out    map[TID]*spmdTask
	errs   map[TID]error
}

func (e *spawnEP) Parent() TID { return e.parent }

func (e *spawnEP) Spawn(_ context.Context, req SpawnRequest) ([]TID, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	*e.reqs = append(*e.reqs, req)
	var tids []TID
	for range req.Count {
		if *e.next >= len(e.w.eps) {
			return tids, errors.New("no room")
		}
		ep := *e
		ep.worldEP, ep.parent = e.w.eps[*e.next], e.self
		*e.next++
		tk, err := New(req.Type, req.State)
		if err != nil {
			return tids, err
		}
		tids = append(tids, ep.self)
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			err := tk.Run(NewCtx(&ep, tk))
			e.mu.Lock()
			e.out[ep.self], e.errs[ep.self] = tk.(*spmdTask), err
			e.mu.Unlock()
		}()
	}
	return tids, nil
}

// TestWorld: World on the first task spawns n-1 copies of its state,
// marked as copies, that join it: one communicator of n ranks, the caller
// rank 0, the copies 1..n-1 in spawn order. Called again it returns at
// once; a count below 1 is refused.
func TestWorld(t *testing.T) {
	for n := 1; n <= 4; n++ {
		w := newWorld(n, 0)
		next := 1
		var reqs []SpawnRequest
		var mu sync.Mutex
		var wg sync.WaitGroup
		root := &spawnEP{worldEP: w.eps[0], next: &next, mu: &mu, reqs: &reqs, wg: &wg, out: map[TID]*spmdTask{}, errs: map[TID]error{}}
		s := &spmdTask{Tasks: n, Seen: 42}
		c := NewCtx(root, s)
		if err := s.Run(c); err != nil {
			t.Fatalf("n=%d: root: %v", n, err)
		}
		wg.Wait()
		all := w.tids()
		if s.C.Rank != 0 || !slices.Equal(s.C.TIDs, all) {
			t.Errorf("n=%d: root's communicator %+v, want rank 0 of %v", n, s.C, all)
		}
		if n > 1 && (len(reqs) != 1 || reqs[0].Count != n-1 || reqs[0].Type != "task.test.spmd") {
			t.Errorf("n=%d: spawned %+v, want one spawn of %d", n, reqs, n-1)
		}
		for r, tid := range all[1:] {
			got := root.out[tid]
			if err := root.errs[tid]; err != nil || got == nil {
				t.Fatalf("n=%d: copy %v: %v", n, tid, err)
			}
			if got.C.Rank != r+1 || !slices.Equal(got.C.TIDs, all) || got.Seen != 42 || got.Tasks != n {
				t.Errorf("n=%d: copy %d: %+v", n, r+1, got)
			}
		}
		if err := s.Run(c); err != nil || len(reqs) > 1 {
			t.Errorf("n=%d: World again: %v, %d spawns", n, err, len(reqs))
		}
	}
	s := &spmdTask{}
	if err := NewCtx(newWorld(1, 0).eps[0], s).World(&s.C, 0); err == nil || s.C.Rank != 0 {
		t.Errorf("World(0) = %v, leaving %+v", err, s.C)
	}
}
