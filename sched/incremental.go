package sched

import (
	"container/heap"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Incremental is a cluster snapshot that the master keeps up to date from
// the hosts' changes (a host joined, left or reported new figures; a
// process was placed, moved, changed or ended) instead of building a fresh
// Snapshot every δT, and whose Check decides what Step would decide on the
// snapshot of the same cluster at a cost that grows with what changed, not
// with hosts × processes.
//
// Between two changes of its host a process's counter moves by a known
// rule: +1 at every check while it is a migration candidate, −1 (down to 0)
// while it is not; candidacy and the counter limit depend on the process and
// its host only. Incremental therefore keeps each counter as a value at a
// check and a direction, and looks at a process only when
//
//   - the process was placed, moved or changed, or its host's figures or
//     processes changed (or a move of the last check touched its host): its
//     candidacy is judged again;
//   - its counter reaches its limit, or falls below it: an event scheduled
//     when the process was last judged;
//   - it is selected and stayed at an earlier check, and a host that
//     changed since could now take it (fast enough, with the memory it
//     needs), or its own host has received or sent a process earlier in
//     the same check. A process that stayed stays otherwise, since no host that
//     refused it has changed.
//
// The hosts are kept in the location policy's preference order between
// checks (a change moves one host to its place), so a selected process is
// placed without sorting every host.
//
// A host's load, as the policy sees it, is the larger of its reported load
// and the processes listed on it (a report may trail the placements), as
// the master has always counted it. Check does not move processes: the
// caller reports each move it carries out with Move, and a move that fails
// leaves the process where it was. Migrated processes' counters are reset
// by Check, as Step resets them.
//
// An Incremental is not safe for concurrent use: its owner (the master's
// scheduler loop) serialises the changes and the checks.
type Incremental struct {
	classes []Class
	params  Params
	epoch   int // checks made
	gen     int // the last judgement's stamp

	hosts []Host // the policy's view: Load is max(reported, listed)
	rep   []float64
	on    []map[string]struct{} // the tids of each host's processes
	sel   []map[string]struct{} // those selected at their last judgement
	slot  map[string]int        // host name → index in hosts
	order hostOrder             // hosts in preference order, over hosts
	procs map[string]*proc
	// events[e] are the processes whose selection changes at check e.
	events map[int][]event
	// dirty are the hosts whose figures or processes changed since the
	// last check, touched the processes placed, moved or changed.
	dirty   map[string]struct{}
	touched map[string]struct{}
}

// proc is a process with its counter as of check e0 and what the policy
// found when it last judged it.
type proc struct {
	Process      // Counter is the counter after check e0
	e0      int  // the check Counter was set at
	rising  bool // a candidate at its last judgement: +1 a check, else −1
	limit   int  // its counter limit then
	reason  Reason
	gen     int // its last judgement's stamp, to drop stale events
}

// counter is p's counter after check e.
func (p *proc) counter(e int) int {
	if p.rising {
		return p.Counter + e - p.e0
	}
	return max(0, p.Counter-(e-p.e0))
}

type event struct {
	tid string
	gen int
}

// CheckResult is what one Check decided: the migrations to carry out and
// the visited selected processes that stay, and a Decision for each
// process the check looked at. Every other process's counter moved by the
// rule of its last judgement; a selected one among them stays (Staying
// counts every selected process that stays).
type CheckResult struct {
	// Migrations are the moves to carry out, in ascending tid order.
	Migrations []Migration
	// Stay lists the visited selected processes with no destination, in
	// ascending tid order.
	Stay []string
	// Staying is how many selected processes stay, visited or not.
	Staying int
	// Decisions has one entry per visited process, in ascending tid order;
	// as in StepResult, a migrated process's Counter is the one before
	// the migration reset it.
	Decisions []Decision
	// DirtyHosts is how many hosts had changed since the last check.
	DirtyHosts int
}

// NewIncremental returns an empty incremental snapshot with the given
// policy configuration; errors wrap ErrInvalid.
func NewIncremental(classes []Class, params Params) (*Incremental, error) {
	if err := validateClasses(classes); err != nil {
		return nil, err
	}
	if err := params.Validate(); err != nil {
		return nil, err
	}
	return &Incremental{
		classes: slices.Clone(classes), params: params,
		slot: map[string]int{}, procs: map[string]*proc{}, events: map[int][]event{},
		dirty: map[string]struct{}{}, touched: map[string]struct{}{},
	}, nil
}

// Len returns the number of hosts and of processes.
func (x *Incremental) Len() (hosts, processes int) { return len(x.hosts), len(x.procs) }

// SetHost records host h's figures: a join when the name is new, a report
// otherwise. h.Load is the reported load; the policy counts at least the
// processes listed on the host. Errors wrap ErrInvalid.
func (x *Incremental) SetHost(h Host) error {
	if err := h.validate(); err != nil {
		return err
	}
	i, ok := x.slot[h.Name]
	if !ok {
		i = len(x.hosts)
		x.slot[h.Name] = i
		x.hosts = append(x.hosts, h)
		x.rep = append(x.rep, h.Load)
		x.on = append(x.on, map[string]struct{}{})
		x.sel = append(x.sel, map[string]struct{}{})
		x.order.hosts = x.hosts
		x.order.pos = append(x.order.pos, len(x.order.idx))
		x.order.idx = append(x.order.idx, i)
		x.order.fix(i)
		x.dirty[h.Name] = struct{}{}
		return nil
	}
	old := x.hosts[i]
	x.rep[i] = h.Load
	h.Load = math.Max(h.Load, float64(len(x.on[i])))
	if h == old {
		return nil
	}
	x.hosts[i] = h
	x.order.fix(i)
	x.dirty[h.Name] = struct{}{}
	return nil
}

// RemoveHost removes host name and the processes listed on it (it left
// the cluster). It reports whether the host was there.
func (x *Incremental) RemoveHost(name string) bool {
	i, ok := x.slot[name]
	if !ok {
		return false
	}
	for tid := range x.on[i] {
		x.dropProcess(tid)
	}
	// Take i out of the preference order.
	p := x.order.pos[i]
	copy(x.order.idx[p:], x.order.idx[p+1:])
	x.order.idx = x.order.idx[:len(x.order.idx)-1]
	for q := p; q < len(x.order.idx); q++ {
		x.order.pos[x.order.idx[q]] = q
	}
	// Move the last slot into i.
	last := len(x.hosts) - 1
	if i != last {
		x.hosts[i], x.rep[i], x.on[i], x.sel[i] = x.hosts[last], x.rep[last], x.on[last], x.sel[last]
		x.slot[x.hosts[i].Name] = i
		x.order.pos[i] = x.order.pos[last]
		x.order.idx[x.order.pos[i]] = i
	}
	x.hosts, x.rep, x.on, x.sel = x.hosts[:last], x.rep[:last], x.on[:last], x.sel[:last]
	x.order.hosts, x.order.pos = x.hosts, x.order.pos[:last]
	delete(x.slot, name)
	delete(x.dirty, name)
	return true
}

// SetProcess records process p: placed when its tid is new, otherwise
// changed (its host, class, memory or counter). Its host must be known.
// Errors wrap ErrInvalid.
func (x *Incremental) SetProcess(p Process) error {
	if p.TID == "" {
		return invalid("process on host %q has an empty tid", p.Host)
	}
	if _, ok := x.slot[p.Host]; !ok {
		return invalid("process %q: unknown host %q", p.TID, p.Host)
	}
	if p.Class < 0 || p.Class > len(x.classes) {
		return invalid("process %q: class %d out of range 1..%d", p.TID, p.Class, len(x.classes))
	}
	if !finite(p.Mem) || p.Mem < 0 {
		return invalid("process %q: mem_mib must be a non-negative number, got %g", p.TID, p.Mem)
	}
	if p.Counter < 0 {
		return invalid("process %q: counter must be non-negative, got %d", p.TID, p.Counter)
	}
	if old, ok := x.procs[p.TID]; ok {
		cur := old.Process
		cur.Counter = old.counter(x.epoch)
		if cur == p {
			return nil
		}
		x.dropProcess(p.TID)
	}
	x.procs[p.TID] = &proc{Process: p, e0: x.epoch}
	x.touched[p.TID] = struct{}{}
	i := x.slot[p.Host]
	x.on[i][p.TID] = struct{}{}
	x.relist(i)
	return nil
}

// Move records that process tid now runs on host to, keeping its class,
// memory and counter. Errors wrap ErrInvalid.
func (x *Incremental) Move(tid, to string) error {
	p, ok := x.Process(tid)
	if !ok {
		return invalid("process %q: unknown", tid)
	}
	p.Host = to
	return x.SetProcess(p)
}

// RemoveProcess forgets process tid (it ended). It reports whether the
// process was there.
func (x *Incremental) RemoveProcess(tid string) bool {
	if _, ok := x.procs[tid]; !ok {
		return false
	}
	x.dropProcess(tid)
	return true
}

func (x *Incremental) dropProcess(tid string) {
	p := x.procs[tid]
	i := x.slot[p.Host]
	delete(x.on[i], tid)
	delete(x.sel[i], tid)
	x.relist(i)
	delete(x.procs, tid)
	delete(x.touched, tid)
}

// relist recomputes host i's load after its process count changed, and
// marks it dirty: its processes' candidacy may have changed with it.
func (x *Incremental) relist(i int) {
	load := math.Max(x.rep[i], float64(len(x.on[i])))
	if load != x.hosts[i].Load {
		x.hosts[i].Load = load
		x.order.fix(i)
	}
	x.dirty[x.hosts[i].Name] = struct{}{}
}

// Process returns process tid as the snapshot holds it, with the counter
// the last check left.
func (x *Incremental) Process(tid string) (Process, bool) {
	p, ok := x.procs[tid]
	if !ok {
		return Process{}, false
	}
	q := p.Process
	q.Counter = p.counter(x.epoch)
	return q, true
}

// Snapshot returns the whole cluster as a Snapshot (hosts in preference
// order, processes in no particular order), on which Step decides what
// Check would. It costs N + M; the master uses it for its status and the
// tests for the reference.
func (x *Incremental) Snapshot() *Snapshot {
	s := &Snapshot{Classes: slices.Clone(x.classes), Params: x.params, Hosts: make([]Host, 0, len(x.hosts)),
		Processes: make([]Process, 0, len(x.procs))}
	for _, i := range x.order.idx {
		s.Hosts = append(s.Hosts, x.hosts[i])
	}
	for _, p := range x.procs {
		q := p.Process
		q.Counter = p.counter(x.epoch)
		s.Processes = append(s.Processes, q)
	}
	return s
}

// admits says whether host h could receive a process from origin under
// the location policy, memory aside: h is in P, and fast enough (below
// d_max with users on the origin, better than the origin by more than α
// without). A process that stayed can leave only for a host that admits
// it.
func (x *Incremental) admits(origin, h Host) bool {
	if h.Name == origin.Name || h.Users != 0 || !(h.MemFree > x.params.MemMin) {
		return false
	}
	if origin.Users > 0 {
		return h.Delay() < x.params.DMax
	}
	return origin.Delay()-origin.Alpha-h.Delay() > origin.Alpha
}

// fits says whether process p on origin could go to one of hosts, which
// admit it: with users on the origin, any (the memory condition has a
// fallback); without, one with the free memory it needs.
func (x *Incremental) fits(origin Host, p Process, hosts []Host) bool {
	if origin.Users > 0 {
		return true
	}
	for _, h := range hosts {
		if origin.MemFree+p.Mem <= h.MemFree {
			return true
		}
	}
	return false
}

// Check runs one check period of Dynamic-SED's selection and location
// policies, deciding what Step decides on the whole snapshot, but visiting
// only the processes the changes since the last check concern (see
// Incremental). It updates the counters (0 for a migrated process) and
// clears the changes; the processes stay on their hosts until Move reports
// them moved.
func (x *Incremental) Check() CheckResult {
	x.epoch++
	e := x.epoch
	res := CheckResult{Migrations: []Migration{}, Stay: []string{}, DirtyHosts: len(x.dirty)}

	// The processes judged again: the touched ones, those of the dirty
	// hosts, those whose selection changes now.
	judge := map[string]bool{}
	for tid := range x.touched {
		judge[tid] = true
	}
	for name := range x.dirty {
		for tid := range x.on[x.slot[name]] {
			judge[tid] = true
		}
	}
	for _, ev := range x.events[e] {
		if p, ok := x.procs[ev.tid]; ok && p.gen == ev.gen {
			judge[ev.tid] = true
		}
	}
	delete(x.events, e)
	dec := make(map[string]*Decision, len(judge))
	for tid := range judge {
		p := x.procs[tid]
		h := x.hosts[x.slot[p.Host]]
		d := &Decision{Process: p.Process, Reason: Candidate(x.classes, x.params, h, p.Process), Limit: CounterLimit(x.params, h)}
		d.Process.Counter = p.counter(e - 1)
		d.Counter = UpdateCounter(d.Process.Counter, d.Reason)
		d.Selected = d.Counter >= d.Limit
		dec[tid] = d
	}

	// The selected processes to place, in tid order: those just judged,
	// and those that stayed before on a host that a faster dirty host
	// now admits.
	var queue tidHeap
	for tid, d := range dec {
		if d.Selected {
			queue = append(queue, tid)
		}
	}
	var changed []Host // the dirty hosts in P
	for name := range x.dirty {
		if h := x.hosts[x.slot[name]]; h.Users == 0 && h.MemFree > x.params.MemMin {
			changed = append(changed, h)
		}
	}
	if len(changed) > 0 {
		for i, sel := range x.sel {
			if len(sel) == 0 {
				continue
			}
			o := x.hosts[i]
			var admit []Host
			for _, h := range changed {
				// Without users on the origin, h must have at least
				// the origin's free memory (a process's need is that
				// plus its own).
				if x.admits(o, h) && (o.Users > 0 || o.MemFree <= h.MemFree) {
					admit = append(admit, h)
				}
			}
			if len(admit) == 0 {
				continue
			}
			for tid := range sel {
				if _, ok := dec[tid]; ok || !x.fits(o, x.procs[tid].Process, admit) {
					continue
				}
				queue = append(queue, tid)
				dec[tid] = x.stayer(tid, e)
			}
		}
	}
	clear(x.dirty)
	clear(x.touched)
	heap.Init(&queue)

	// Place them; each move changes two hosts' figures for the placements
	// after it, and is undone once the check is over (the hosts' reports
	// and Move bring the real change). A move makes its origin faster,
	// which may admit a process that stayed before, and its destination
	// slower, which may let a process there leave: both are placed again.
	type saved struct {
		i int
		h Host
	}
	var undo []saved
	seen := map[int]bool{}
	keep := func(i int) {
		if !seen[i] {
			seen[i] = true
			undo = append(undo, saved{i, x.hosts[i]})
		}
	}
	push := func(after string, sel map[string]struct{}) {
		for tid := range sel {
			if _, ok := dec[tid]; !ok && tid > after {
				dec[tid] = x.stayer(tid, e)
				heap.Push(&queue, tid)
			}
		}
	}
	for queue.Len() > 0 {
		tid := heap.Pop(&queue).(string)
		d := dec[tid]
		p := x.procs[tid]
		from := x.slot[p.Host]
		loc := x.order.locate(x.params, x.hosts[from], p.Process)
		d.Location = loc
		if loc.To == "" {
			continue
		}
		to := x.slot[loc.To]
		keep(from)
		keep(to)
		move(&x.hosts[from], &x.hosts[to], p.Mem)
		x.order.fix(from)
		x.order.fix(to)
		res.Migrations = append(res.Migrations, Migration{TID: p.TID, From: loc.From, To: loc.To, Location: loc})
		push(tid, x.sel[to])
		// Those on the origin stay (it is faster now), but their
		// decisions name its new figures: place them again too.
		push(tid, x.sel[from])
		// A stayer that the origin, now faster, admits needs no visit:
		// the destination took the process's memory need, which is the
		// origin's free memory after the move, and is faster than the
		// origin is now, so it admitted that stayer before the check and
		// the stayer would not have stayed.
	}
	for _, s := range undo {
		x.hosts[s.i] = s.h
		x.order.fix(s.i)
		// Its processes saw it changed: judge them again next time.
		x.dirty[s.h.Name] = struct{}{}
	}

	// Record the judgements and schedule the next selection changes.
	res.Decisions = make([]Decision, 0, len(dec))
	for tid, d := range dec {
		p := x.procs[tid]
		i := x.slot[p.Host]
		c := d.Counter
		if d.Location.To != "" {
			c = 0 // migrated (Decision keeps the counter before the reset, as Step's)
		}
		p.Counter, p.e0, p.rising, p.limit, p.reason = c, e, d.Reason != 0, d.Limit, d.Reason
		x.gen++
		p.gen = x.gen
		delete(x.sel[i], tid)
		switch {
		case c >= d.Limit:
			x.sel[i][tid] = struct{}{} // stays; falling, it is released later
			if !p.rising {
				x.events[e+c-d.Limit+1] = append(x.events[e+c-d.Limit+1], event{tid, p.gen})
			}
		case p.rising:
			x.events[e+d.Limit-c] = append(x.events[e+d.Limit-c], event{tid, p.gen})
		}
		res.Decisions = append(res.Decisions, *d)
	}
	slices.SortFunc(res.Decisions, func(a, b Decision) int { return strings.Compare(a.Process.TID, b.Process.TID) })
	for _, d := range res.Decisions {
		if d.Selected && d.Location.To == "" {
			res.Stay = append(res.Stay, d.Process.TID)
		}
	}
	for _, sel := range x.sel {
		res.Staying += len(sel)
	}
	return res
}

// stayer is the decision for a process that stayed at an earlier check
// and whose judgement still holds: its counter moves on by its rule.
func (x *Incremental) stayer(tid string, e int) *Decision {
	p := x.procs[tid]
	d := &Decision{Process: p.Process, Reason: p.reason, Limit: p.limit, Counter: p.counter(e), Selected: true}
	d.Process.Counter = p.counter(e - 1)
	return d
}

// tidHeap is a min-heap of tids: the order in which Step places processes.
type tidHeap []string

func (h tidHeap) Len() int           { return len(h) }
func (h tidHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h tidHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *tidHeap) Push(v any)        { *h = append(*h, v.(string)) }
func (h *tidHeap) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}

// String summarises the snapshot's size and pending changes, for logs.
func (x *Incremental) String() string {
	staying := 0
	for _, sel := range x.sel {
		staying += len(sel)
	}
	return fmt.Sprintf("%d hosts, %d processes, %d selected, %d hosts and %d processes changed",
		len(x.hosts), len(x.procs), staying, len(x.dirty), len(x.touched))
}
