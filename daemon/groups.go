package daemon

import (
	"context"
	"fmt"
	"sync"

	"dpvm/task"
)

// groups is the group server: named groups with instance numbers, and
// barriers. A group exists while it has members.
type groups struct {
	mu sync.Mutex
	m  map[string]*group
}

type group struct {
	members []task.TID // by instance number; zero = free
	live    int
	barrier *barrier
}

// barrier is one generation of a group barrier: it releases when count
// members have arrived.
type barrier struct {
	count   int
	arrived map[task.TID]bool
	done    chan struct{}
}

func newGroups() *groups { return &groups{m: map[string]*group{}} }

func (g *groups) join(name string, tid task.TID) (int, error) {
	if name == "" {
		return -1, fmt.Errorf("empty group name")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	gr := g.m[name]
	if gr == nil {
		gr = &group{}
		g.m[name] = gr
	}
	free := -1
	for i, t := range gr.members {
		if t == tid {
			return -1, fmt.Errorf("%v is already instance %d", tid, i)
		}
		if t.IsZero() && free < 0 {
			free = i
		}
	}
	if free < 0 {
		free = len(gr.members)
		gr.members = append(gr.members, 0)
	}
	gr.members[free] = tid
	gr.live++
	return free, nil
}

func (g *groups) leave(name string, tid task.TID) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	gr := g.m[name]
	if gr == nil {
		return task.ErrNoSuchGroup
	}
	if !g.removeLocked(name, gr, tid) {
		return task.ErrNotInGroup
	}
	return nil
}

// removeLocked removes tid from gr; it reports whether tid was a member.
func (g *groups) removeLocked(name string, gr *group, tid task.TID) bool {
	for i, t := range gr.members {
		if t != tid {
			continue
		}
		gr.members[i] = 0
		gr.live--
		for len(gr.members) > 0 && gr.members[len(gr.members)-1].IsZero() {
			gr.members = gr.members[:len(gr.members)-1]
		}
		if gr.barrier != nil && gr.barrier.arrived[tid] {
			delete(gr.barrier.arrived, tid)
		}
		if gr.live == 0 {
			delete(g.m, name)
		}
		return true
	}
	return false
}

// leaveAll removes tid from every group (when it exits).
func (g *groups) leaveAll(tid task.TID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for name, gr := range g.m {
		g.removeLocked(name, gr, tid)
	}
}

func (g *groups) members(name string) ([]task.TID, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gr := g.m[name]
	if gr == nil {
		return nil, task.ErrNoSuchGroup
	}
	return append([]task.TID(nil), gr.members...), nil
}

// wait blocks tid in the group's barrier until count members have arrived.
// count <= 0 means all current members.
func (g *groups) wait(ctx context.Context, dead <-chan struct{}, name string, tid task.TID, count int) error {
	g.mu.Lock()
	gr := g.m[name]
	if gr == nil {
		g.mu.Unlock()
		return task.ErrNoSuchGroup
	}
	member := false
	for _, t := range gr.members {
		member = member || t == tid
	}
	if !member {
		g.mu.Unlock()
		return task.ErrNotInGroup
	}
	if count <= 0 {
		count = gr.live
	}
	b := gr.barrier
	if b == nil {
		b = &barrier{count: count, arrived: map[task.TID]bool{}, done: make(chan struct{})}
		gr.barrier = b
	} else if b.count != count {
		g.mu.Unlock()
		return fmt.Errorf("barrier count %d differs from the %d already waiting for", count, b.count)
	}
	if b.arrived[tid] {
		g.mu.Unlock()
		return fmt.Errorf("%v is already waiting in this barrier", tid)
	}
	b.arrived[tid] = true
	if len(b.arrived) >= b.count {
		gr.barrier = nil
		close(b.done)
		g.mu.Unlock()
		return nil
	}
	g.mu.Unlock()
	var err error
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-dead:
		err = task.ErrKilled
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-b.done: // released while we gave up: count it as passed
		return nil
	default:
	}
	delete(b.arrived, tid)
	return err
}

// all lists every task that is a member of some group.
func (g *groups) all() []task.TID {
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[task.TID]bool{}
	var out []task.TID
	for _, gr := range g.m {
		for _, t := range gr.members {
			if !t.IsZero() && !seen[t] {
				seen[t] = true
				out = append(out, t)
			}
		}
	}
	return out
}
