package daemon

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/dpvm/dpvm/ckpt"
	"github.com/dpvm/dpvm/task"
)

// groups is the group server: named groups with instance numbers, and
// barriers. A group exists while it has members.
type groups struct {
	mu  sync.Mutex
	m   map[string]*group
	lim groupLimits
}

// groupLimits bound the group server (Config.MaxGroups, MaxGroupName,
// MaxGroupMembers).
type groupLimits struct{ groups, name, members int }

// group is one named group. Every operation on a member costs the same
// whatever the group's size: inst indexes the members by TID and free holds
// the freed instance numbers below len(members), so that a group of
// 100,000 tasks joining and passing a barrier costs the group server
// 100,000 steps, not 100,000².
type group struct {
	members []task.TID // by instance number; zero = free
	inst    map[task.TID]int
	free    freeInsts
	live    int
	barrier *barrier
}

func newGroup() *group { return &group{inst: map[task.TID]int{}} }

// freeInsts is a min-heap of freed instance numbers. It may hold stale
// entries (an instance taken again by rejoin, or cut off the end of
// members): lowest drops them when they come to the top.
type freeInsts []int

func (h freeInsts) Len() int           { return len(h) }
func (h freeInsts) Less(i, j int) bool { return h[i] < h[j] }
func (h freeInsts) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }

// Push implements heap.Interface.
func (h *freeInsts) Push(x any) { *h = append(*h, x.(int)) }

// Pop implements heap.Interface.
func (h *freeInsts) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// lowestFree takes the lowest free instance number of gr, or -1 if every
// instance below len(members) is taken.
func (gr *group) lowestFree() int {
	for gr.free.Len() > 0 {
		i := heap.Pop(&gr.free).(int)
		if i < len(gr.members) && gr.members[i].IsZero() {
			return i
		}
	}
	return -1
}

// barrier is one generation of a group barrier: it releases when count
// members have arrived.
type barrier struct {
	count   int
	arrived map[task.TID]bool
	done    chan struct{}
	// remote are the members waiting on other hosts, released with one
	// message per host.
	remote map[task.HostID][]task.TID
}

func newGroups(lim groupLimits) *groups { return &groups{m: map[string]*group{}, lim: lim} }

// groupLocked returns group name, made if need be within the bounds on
// names and groups.
func (g *groups) groupLocked(name string) (*group, error) {
	if name == "" {
		return nil, fmt.Errorf("empty group name")
	}
	if len(name) > g.lim.name {
		return nil, fmt.Errorf("group name of %d bytes, at most %d: %w", len(name), g.lim.name, ErrLimit)
	}
	gr := g.m[name]
	if gr == nil {
		if len(g.m) >= g.lim.groups {
			return nil, fmt.Errorf("group %q: %d groups exist, at most %d: %w", name, len(g.m), g.lim.groups, ErrLimit)
		}
		gr = newGroup()
		g.m[name] = gr
	}
	return gr, nil
}

// memberTID refuses, with task.ErrBadTID, a TID that names no single task:
// the zero TID, which members uses for a free slot (a zero member would be
// cut off the end of members while inst still held it), and AnyTask.
func memberTID(tid task.TID) error {
	if tid.IsZero() || tid == task.AnyTask {
		return fmt.Errorf("%v as a group member: %w", tid, task.ErrBadTID)
	}
	return nil
}

// join makes tid a member of group name at the lowest free instance,
// which it returns.
func (g *groups) join(name string, tid task.TID) (int, error) {
	if err := memberTID(tid); err != nil {
		return -1, fmt.Errorf("join %q: %w", name, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	gr, err := g.groupLocked(name)
	if err != nil {
		return -1, err
	}
	if i, ok := gr.inst[tid]; ok {
		return -1, fmt.Errorf("%v is already instance %d", tid, i)
	}
	free := gr.lowestFree()
	if free < 0 {
		if len(gr.members) >= g.lim.members {
			return -1, fmt.Errorf("group %q has %d members, at most %d: %w", name, len(gr.members), g.lim.members, ErrLimit)
		}
		free = len(gr.members)
		gr.members = append(gr.members, 0)
	}
	gr.members[free] = tid
	gr.inst[tid] = free
	gr.live++
	return free, nil
}

// memberships lists the groups tid belongs to, with its instance in each,
// by group name.
func (g *groups) memberships(tid task.TID) []ckpt.Membership {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []ckpt.Membership
	for name, gr := range g.m {
		if i, ok := gr.inst[tid]; ok {
			out = append(out, ckpt.Membership{Group: name, Inst: i})
		}
	}
	slices.SortFunc(out, func(a, b ckpt.Membership) int { return strings.Compare(a.Group, b.Group) })
	return out
}

// rejoin makes tid instance inst of the group again (a task restored from
// a job checkpoint), failing if another task holds that instance; an
// instance tid holds besides is freed.
func (g *groups) rejoin(name string, tid task.TID, inst int) error {
	if name == "" || inst < 0 {
		return fmt.Errorf("rejoin %q as instance %d: bad membership", name, inst)
	}
	if err := memberTID(tid); err != nil {
		return fmt.Errorf("rejoin %q as instance %d: %w", name, inst, err)
	}
	if inst >= g.lim.members {
		return fmt.Errorf("rejoin %q as instance %d: at most %d members: %w", name, inst, g.lim.members, ErrLimit)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	gr, err := g.groupLocked(name)
	if err != nil {
		return err
	}
	if t := gr.at(inst); !t.IsZero() && t != tid {
		return fmt.Errorf("group %q instance %d is held by %v", name, inst, t)
	}
	if i, ok := gr.inst[tid]; ok && i != inst {
		// It holds another instance now (it left and joined again since
		// the checkpoint): it goes back to the checkpoint's.
		gr.members[i] = 0
		gr.live--
		heap.Push(&gr.free, i)
	}
	for len(gr.members) <= inst {
		if len(gr.members) < inst {
			heap.Push(&gr.free, len(gr.members)) // a gap below inst
		}
		gr.members = append(gr.members, 0)
	}
	if gr.members[inst].IsZero() {
		gr.live++
	}
	gr.members[inst] = tid
	gr.inst[tid] = inst
	for gr.members[len(gr.members)-1].IsZero() {
		gr.members = gr.members[:len(gr.members)-1]
	}
	return nil
}

// at is the member at instance i, zero if none.
func (gr *group) at(i int) task.TID {
	if i < len(gr.members) {
		return gr.members[i]
	}
	return 0
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
	i, ok := gr.inst[tid]
	if !ok {
		return false
	}
	delete(gr.inst, tid)
	gr.members[i] = 0
	gr.live--
	for len(gr.members) > 0 && gr.members[len(gr.members)-1].IsZero() {
		gr.members = gr.members[:len(gr.members)-1]
	}
	if i < len(gr.members) {
		heap.Push(&gr.free, i)
	}
	if gr.barrier != nil && gr.barrier.arrived[tid] {
		delete(gr.barrier.arrived, tid)
	}
	if gr.live == 0 {
		delete(g.m, name)
	}
	return true
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

// arrive records tid's arrival at the group's barrier. It returns the
// barrier, and whether this arrival completed it (the caller then releases
// the remote waiters). host, when not zero, says tid waits on another host.
func (g *groups) arrive(name string, tid task.TID, host task.HostID, count int) (*barrier, bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gr := g.m[name]
	if gr == nil {
		return nil, false, task.ErrNoSuchGroup
	}
	if _, member := gr.inst[tid]; !member {
		return nil, false, task.ErrNotInGroup
	}
	if count <= 0 {
		count = gr.live
	}
	b := gr.barrier
	if b == nil {
		b = &barrier{count: count, arrived: map[task.TID]bool{}, done: make(chan struct{})}
		gr.barrier = b
	} else if b.count != count {
		return nil, false, fmt.Errorf("barrier count %d differs from the %d already waiting for", count, b.count)
	}
	if b.arrived[tid] {
		return nil, false, fmt.Errorf("%v is already waiting in this barrier", tid)
	}
	b.arrived[tid] = true
	if host != 0 {
		if b.remote == nil {
			b.remote = map[task.HostID][]task.TID{}
		}
		b.remote[host] = append(b.remote[host], tid)
	}
	if len(b.arrived) >= b.count {
		gr.barrier = nil
		close(b.done)
		return b, true, nil
	}
	return b, false, nil
}

// withdraw takes back a remote member's arrival (its wait was cancelled,
// or it goes to a safe point) and reports whether it did: false when the
// member is in no barrier of the group now (the barrier it arrived at has
// completed, and its release has been sent).
func (g *groups) withdraw(name string, tid task.TID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	gr := g.m[name]
	if gr == nil || gr.barrier == nil || !gr.barrier.arrived[tid] {
		return false
	}
	b := gr.barrier
	delete(b.arrived, tid)
	for h, ts := range b.remote {
		for i, t := range ts {
			if t == tid {
				b.remote[h] = append(ts[:i], ts[i+1:]...)
				break
			}
		}
	}
	return true
}

// wait blocks tid in the group's barrier until count members have arrived.
// count <= 0 means all current members. release is called with the
// barrier when this arrival completes it. A signal on kick (nil: none)
// withdraws the arrival and returns errInterrupted, unless the barrier
// completed first (then it returns nil: tid passed).
func (g *groups) wait(ctx context.Context, dead, kick <-chan struct{}, name string, tid task.TID, count int, release func(*barrier)) error {
	b, done, err := g.arrive(name, tid, 0, count)
	if err != nil {
		return err
	}
	if done {
		if release != nil {
			release(b)
		}
		return nil
	}
	return g.await(ctx, dead, kick, b, tid)
}

// await waits for a barrier tid has arrived at (see wait for kick).
func (g *groups) await(ctx context.Context, dead, kick <-chan struct{}, b *barrier, tid task.TID) error {
	var err error
	select {
	case <-b.done:
		return nil
	case <-kick:
		err = errInterrupted
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

// releaseBarrier tells the hosts of a completed barrier's remote members to
// let them go: one message per host (master).
func (d *Daemon) releaseBarrier(b *barrier) {
	for h, tids := range b.remote {
		if len(tids) > 0 {
			d.sendRelease(h, "", tids, nil)
		}
	}
}

func (d *Daemon) sendRelease(h task.HostID, group string, tids []task.TID, failed error) {
	e := &event{Kind: evBarrierRelease, Group: group, TIDs: tids}
	if failed != nil {
		e.Reason, e.Code = failed.Error(), codeOf(failed)
	}
	if err := d.sendEvent(d.ctx, h, e); err != nil {
		d.log.Warn("barrier release", "peer", h, "error", err)
	}
}

// remoteBarrier waits in a barrier of the master's group server for a task
// of this host: its arrival goes to the master as one message, and the
// master releases all of this host's waiting members with one message.
// A signal on kick (nil: none) withdraws the arrival, waiting for the
// master's word, and returns errInterrupted, unless the barrier completed
// first (then it returns nil: the task passed).
func (d *Daemon) remoteBarrier(ctx context.Context, h *hosted, group string, count int, kick <-chan struct{}) error {
	a := arrival{group: group, count: count, tid: h.tid}
	ch := d.arrivals.waitIn(a)
	d.arrive(a)
	var err error
	select {
	case err = <-ch:
		return err
	case <-kick:
		return d.withdrawArrival(ctx, h, group, ch)
	case <-ctx.Done():
		err = ctx.Err()
	case <-h.dead():
		err = task.ErrKilled
	case <-d.ctx.Done():
		err = task.ErrHalted
	}
	d.arrivals.forget(h.tid)
	if !d.unarrive(h.tid) {
		_ = d.sendEvent(d.ctx, MasterID, &event{Kind: evBarrierCancel, Group: group, TIDs: []task.TID{h.tid}})
	}
	select {
	case rerr := <-ch: // released while giving up: it passed
		return rerr
	default:
	}
	return err
}

// withdrawArrival takes back a waiting task's arrival so that it can go to
// a safe point: errInterrupted when it did, the barrier's outcome (nil:
// passed) when the barrier completed first. An arrival not yet sent is
// taken from the queue; one sent is withdrawn at the master, which answers
// errBarrierWithdrawn on ch when it withdrew it and has otherwise already
// sent the release (events on a connection keep their order, so the
// release is then ahead of nothing the task waits for).
func (d *Daemon) withdrawArrival(ctx context.Context, h *hosted, group string, ch chan error) error {
	if d.unarrive(h.tid) {
		d.arrivals.forget(h.tid)
		select {
		case rerr := <-ch: // its send failed meanwhile
			return rerr
		default:
		}
		return errInterrupted
	}
	err := d.sendEvent(d.ctx, MasterID, &event{Kind: evBarrierCancel, Group: group, TIDs: []task.TID{h.tid}})
	if err == nil {
		select {
		case err = <-ch:
			if errors.Is(err, errBarrierWithdrawn) {
				return errInterrupted
			}
			return err
		case <-ctx.Done():
			err = ctx.Err()
		case <-h.dead():
			err = task.ErrKilled
		case <-d.ctx.Done():
			err = task.ErrHalted
		}
	}
	d.arrivals.forget(h.tid)
	select {
	case rerr := <-ch:
		if !errors.Is(rerr, errBarrierWithdrawn) {
			return rerr
		}
	default:
	}
	return fmt.Errorf("withdraw from barrier %q: %w", group, err)
}

// arrive sends an arrival to the master. Arrivals that come while one is
// being sent wait for it and then go together, one event per barrier, so
// a host's members arriving at once cost one message, not one each: the
// first arriving task sends for everyone until nobody is left waiting.
func (d *Daemon) arrive(a arrival) {
	if !d.arrivals.enqueue(a) {
		return
	}
	// Let the members released with this one arrive too.
	runtime.Gosched()
	for {
		batch, flight := d.arrivals.nextBatch()
		if batch == nil {
			return
		}
		for len(batch) > 0 {
			g, c := batch[0].group, batch[0].count
			var tids []task.TID
			rest := batch[:0]
			for _, a := range batch {
				if a.group == g && a.count == c {
					tids = append(tids, a.tid)
				} else {
					rest = append(rest, a)
				}
			}
			batch = rest
			err := d.sendEvent(d.ctx, MasterID, &event{Kind: evBarrier, Group: g, TIDs: tids, Count: c})
			if err != nil {
				d.barrierReleased(tids, err.Error(), codeOf(err))
			}
		}
		close(flight)
	}
}

// unarrive takes back an arrival that has not been sent yet and reports
// whether it did. Otherwise the arrival has been sent, or is in the batch
// being sent, and the withdrawal must follow it to the master (it will: it
// waits until that whole batch has been sent).
func (d *Daemon) unarrive(tid task.TID) bool {
	taken, flight := d.arrivals.unqueue(tid)
	if taken {
		return true
	}
	if flight != nil {
		select {
		case <-flight:
		case <-d.ctx.Done():
		}
	}
	return false
}

// barrierReleased lets this host's members go.
func (d *Daemon) barrierReleased(tids []task.TID, why, code string) {
	var err error
	if why != "" {
		err = &remoteError{msg: why, sentinel: errorCodes[code]}
	}
	d.arrivals.release(tids, err)
}
