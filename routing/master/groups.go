package master

import (
	"container/heap"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/dpvm/dpvm/task"
)

// ErrLimit: a group operation would pass one of the node's bounds
// (Config.MaxGroups, MaxGroupName, MaxGroupMembers).
var ErrLimit = errors.New("over a configured limit")

// ErrNotWaiting: a withdrawal (EvWithdraw) found the task in no barrier
// of the group: the barrier it arrived at has completed (and its release
// was given), or it never arrived.
var ErrNotWaiting = errors.New("master: not waiting in the barrier")

// Membership is a task's instance in a group.
type Membership struct {
	Group string
	Inst  int
}

// groups is the node's groups part: named groups with instance numbers,
// and one barrier generation per group. A group exists while it has
// members. Every operation on a member costs the same whatever the
// group's size: a group's inst indexes its members by TID and free holds
// the freed instance numbers below len(members), so that a group of
// 100,000 tasks joining and passing a barrier costs 100,000 steps, not
// 100,000².
type groups struct {
	m map[string]*group
	// Bounds (0: none): how many groups, how long a name, how many
	// instances in a group.
	maxGroups, maxName, maxMembers int
}

// group is one named group.
type group struct {
	members []task.TID // by instance number; zero = free
	inst    map[task.TID]int
	free    freeInsts
	live    int
	barrier *barrier
}

// barrier is one generation of a group's barrier: it completes when
// count members have arrived.
type barrier struct {
	count   int
	arrived map[task.TID]bool
	order   []task.TID // arrivals in order; may hold withdrawn ones (arrived says)
}

func newGroups(cfg Config) *groups {
	return &groups{m: map[string]*group{}, maxGroups: cfg.MaxGroups, maxName: cfg.MaxGroupName, maxMembers: cfg.MaxGroupMembers}
}

func newGroup() *group { return &group{inst: map[task.TID]int{}} }

// freeInsts is a min-heap of freed instance numbers. It may hold stale
// entries (an instance taken again by a rejoin, or cut off the end of
// members): lowestFree drops them when they come to the top.
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

// at is the member at instance i, zero if none.
func (gr *group) at(i int) task.TID {
	if i < len(gr.members) {
		return gr.members[i]
	}
	return 0
}

// memberTID refuses, with task.ErrBadTID, a TID that names no single task:
// the zero TID, which members uses for a free instance, and AnyTask.
func memberTID(tid task.TID) error {
	if tid.IsZero() || tid == task.AnyTask {
		return fmt.Errorf("%v as a group member: %w", tid, task.ErrBadTID)
	}
	return nil
}

// get returns group name, made if need be within the bounds on names and
// groups.
func (g *groups) get(name string) (*group, error) {
	if name == "" {
		return nil, fmt.Errorf("empty group name")
	}
	if g.maxName > 0 && len(name) > g.maxName {
		return nil, fmt.Errorf("group name of %d bytes, at most %d: %w", len(name), g.maxName, ErrLimit)
	}
	gr := g.m[name]
	if gr == nil {
		if g.maxGroups > 0 && len(g.m) >= g.maxGroups {
			return nil, fmt.Errorf("group %q: %d groups exist, at most %d: %w", name, len(g.m), g.maxGroups, ErrLimit)
		}
		gr = newGroup()
		g.m[name] = gr
	}
	return gr, nil
}

// join makes tid a member of group name at the lowest free instance,
// which it returns; a member already is refused.
func (g *groups) join(name string, tid task.TID) (int, error) {
	if err := memberTID(tid); err != nil {
		return -1, fmt.Errorf("join %q: %w", name, err)
	}
	gr, err := g.get(name)
	if err != nil {
		return -1, err
	}
	if i, ok := gr.inst[tid]; ok {
		return -1, fmt.Errorf("%v is already instance %d", tid, i)
	}
	free := gr.lowestFree()
	if free < 0 {
		if g.maxMembers > 0 && len(gr.members) >= g.maxMembers {
			g.dropEmpty(name, gr)
			return -1, fmt.Errorf("group %q has %d members, at most %d: %w", name, len(gr.members), g.maxMembers, ErrLimit)
		}
		free = len(gr.members)
		gr.members = append(gr.members, 0)
	}
	gr.members[free] = tid
	gr.inst[tid] = free
	gr.live++
	return free, nil
}

// dropEmpty forgets gr if it has no member (a group made for an operation
// that then failed).
func (g *groups) dropEmpty(name string, gr *group) {
	if gr.live == 0 {
		delete(g.m, name)
	}
}

// rejoin makes tid instance inst of group name again (a task restored
// from a job checkpoint), failing if another task holds that instance;
// an instance tid holds besides is freed.
func (g *groups) rejoin(name string, tid task.TID, inst int) error {
	if name == "" || inst < 0 {
		return fmt.Errorf("rejoin %q as instance %d: bad membership", name, inst)
	}
	if err := memberTID(tid); err != nil {
		return fmt.Errorf("rejoin %q as instance %d: %w", name, inst, err)
	}
	if g.maxMembers > 0 && inst >= g.maxMembers {
		return fmt.Errorf("rejoin %q as instance %d: at most %d members: %w", name, inst, g.maxMembers, ErrLimit)
	}
	gr, err := g.get(name)
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

// leave takes tid out of group name.
func (g *groups) leave(name string, tid task.TID) error {
	gr := g.m[name]
	if gr == nil {
		return task.ErrNoSuchGroup
	}
	if !g.remove(name, gr, tid) {
		return task.ErrNotInGroup
	}
	return nil
}

// remove takes tid out of gr, and its arrival out of gr's barrier; it
// reports whether tid was a member.
func (g *groups) remove(name string, gr *group, tid task.TID) bool {
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
	if gr.barrier != nil {
		delete(gr.barrier.arrived, tid)
	}
	g.dropEmpty(name, gr)
	return true
}

// leaveAll takes tid out of every group.
func (g *groups) leaveAll(tid task.TID) {
	for name, gr := range g.m {
		g.remove(name, gr, tid)
	}
}

// arrive records tid's arrival at group name's barrier of count (count
// <= 0: every member now). When the arrival completes it, it returns the
// others that waited, in their order of arrival, and true.
func (g *groups) arrive(name string, tid task.TID, count int) ([]task.TID, bool, error) {
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
		b = &barrier{count: count, arrived: map[task.TID]bool{}}
		gr.barrier = b
	} else if b.count != count {
		return nil, false, fmt.Errorf("barrier count %d differs from the %d already waiting for", count, b.count)
	}
	if b.arrived[tid] {
		return nil, false, fmt.Errorf("%v is already waiting in this barrier", tid)
	}
	b.arrived[tid] = true
	b.order = append(b.order, tid)
	if len(b.arrived) < b.count {
		return nil, false, nil
	}
	gr.barrier = nil
	var others []task.TID
	for _, t := range b.order {
		if t != tid && b.arrived[t] {
			delete(b.arrived, t) // once each, though it withdrew and came again
			others = append(others, t)
		}
	}
	return others, true, nil
}

// withdraw takes back tid's arrival at group name's barrier; it reports
// whether it did (false: tid waits in no barrier of the group).
func (g *groups) withdraw(name string, tid task.TID) bool {
	gr := g.m[name]
	if gr == nil || gr.barrier == nil || !gr.barrier.arrived[tid] {
		return false
	}
	delete(gr.barrier.arrived, tid)
	return true
}

// members is group name's members by instance (zero: a free instance), a
// copy.
func (g *groups) members(name string) ([]task.TID, error) {
	gr := g.m[name]
	if gr == nil {
		return nil, task.ErrNoSuchGroup
	}
	return slices.Clone(gr.members), nil
}

// memberships lists the groups tid belongs to, with its instance in
// each, by group name.
func (g *groups) memberships(tid task.TID) []Membership {
	var out []Membership
	for name, gr := range g.m {
		if i, ok := gr.inst[tid]; ok {
			out = append(out, Membership{Group: name, Inst: i})
		}
	}
	slices.SortFunc(out, func(a, b Membership) int { return strings.Compare(a.Group, b.Group) })
	return out
}

// all lists every task that is a member of some group, each once, in
// the order of the groups' names and instances.
func (g *groups) all() []task.TID {
	seen := map[task.TID]bool{}
	var out []task.TID
	for _, name := range slices.Sorted(maps.Keys(g.m)) {
		for _, t := range g.m[name].members {
			if !t.IsZero() && !seen[t] {
				seen[t] = true
				out = append(out, t)
			}
		}
	}
	return out
}

// snapshot is every group's members by instance (zero: free), a copy.
func (g *groups) snapshot() map[string][]task.TID {
	out := make(map[string][]task.TID, len(g.m))
	for name, gr := range g.m {
		out[name] = slices.Clone(gr.members)
	}
	return out
}

// reset makes the groups snap's memberships (a rollback's set), with no
// barrier under way.
func (g *groups) reset(snap map[string][]task.TID) {
	g.m = map[string]*group{}
	for _, name := range slices.Sorted(maps.Keys(snap)) {
		for i, tid := range snap[name] {
			if !tid.IsZero() {
				// A set's own memberships: no bound or clash to refuse.
				_ = g.rejoin(name, tid, i)
			}
		}
	}
}
