package sched

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Reason is the set of Definition 1 conditions that make a process a
// migration candidate; zero means it is not one.
type Reason uint8

// The conditions of Definition 1.
const (
	// ReasonDelay: the process's current delay d_j − α_j exceeds the upper
	// bound δ_i^max of the class it was started in.
	ReasonDelay Reason = 1 << iota
	// ReasonMemory: its host's free memory is below mem_min.
	ReasonMemory
	// ReasonUsers: its host has more interactive users than it permits.
	ReasonUsers
)

// String names the conditions that hold, joined by "+", or "none".
func (r Reason) String() string {
	if r == 0 {
		return "none"
	}
	var parts []string
	for _, x := range []struct {
		bit  Reason
		name string
	}{{ReasonDelay, "delay"}, {ReasonMemory, "memory"}, {ReasonUsers, "users"}} {
		if r&x.bit != 0 {
			parts = append(parts, x.name)
		}
	}
	return strings.Join(parts, "+")
}

// classFor returns the class a process is held to: its own, or the slowest
// when it has none recorded.
func classFor(classes []Class, p Process) Class {
	if p.Class >= 1 && p.Class <= len(classes) {
		return classes[p.Class-1]
	}
	return classes[len(classes)-1]
}

// Candidate tests Definition 1 for process p running on host h (which must
// be p's host): it is a migration candidate when (1) d_j − α_j > δ_i^max for
// the class i it was started in, (2) memory_j < mem_min, or (3) h has more
// interactive users than h.MaxUsers. The raw load and free memory are used,
// without the reservation, which only shapes the availability vector.
func Candidate(classes []Class, params Params, h Host, p Process) Reason {
	var r Reason
	if h.Delay()-h.Alpha > classFor(classes, p).Max {
		r |= ReasonDelay
	}
	if h.MemFree < params.MemMin {
		r |= ReasonMemory
	}
	if h.Users > h.MaxUsers {
		r |= ReasonUsers
	}
	return r
}

// Idle reports whether a check of s would decide nothing: every process's
// counter is 0 and none is a migration candidate on its host, so Step
// would select nothing and leave every counter at 0. The master uses it to
// skip listing the processes again while they have not changed. A process
// whose host is not in s makes it not idle.
func Idle(s *Snapshot) bool {
	hosts := make(map[string]Host, len(s.Hosts))
	for _, h := range s.Hosts {
		hosts[h.Name] = h
	}
	for _, p := range s.Processes {
		h, ok := hosts[p.Host]
		if !ok || p.Counter != 0 || Candidate(s.Classes, s.Params, h, p) != 0 {
			return false
		}
	}
	return true
}

// UpdateCounter applies one check to a selection counter: +1 for a
// candidate, −1 otherwise, never below 0.
func UpdateCounter(counter int, r Reason) int {
	if r != 0 {
		return counter + 1
	}
	if counter > 0 {
		return counter - 1
	}
	return 0
}

// CounterLimit returns the counter value at which a process on h is selected
// for migration: c²max when h has interactive users, c¹max otherwise. A
// process is selected when its counter reaches or passes the limit.
func CounterLimit(params Params, h Host) int {
	if h.Users > 0 {
		return params.C2Max
	}
	return params.C1Max
}

// Rule names the branch of the location policy that decided a Location.
type Rule uint8

// Location rules. Append only: values are logged.
const (
	// RuleStay: no host fits; the process stays and accepts the situation.
	RuleStay Rule = iota
	// RuleUsersMemory: interactive users on the origin; the destination is
	// the host in P with the lowest delay among those with at least
	// memory'_j free and d_k < d_max.
	RuleUsersMemory
	// RuleUsersAnyMemory: interactive users on the origin and no host
	// satisfied the memory condition; it is dropped (still d_k < d_max).
	RuleUsersAnyMemory
	// RuleImprove: no interactive users on the origin; the destination is
	// the host in P with the lowest delay among those with at least
	// memory'_j free and d'_j − d_k > α_j (equation 1).
	RuleImprove
)

// String returns a short name of the rule.
func (r Rule) String() string {
	switch r {
	case RuleStay:
		return "stay"
	case RuleUsersMemory:
		return "users-memory"
	case RuleUsersAnyMemory:
		return "users-any-memory"
	case RuleImprove:
		return "improve"
	}
	return fmt.Sprintf("rule(%d)", uint8(r))
}

// Location is the location policy's answer for one process, with the
// figures it was decided on so that the decision can be logged.
type Location struct {
	To    string // destination host; empty when the process stays
	Rule  Rule
	Users bool // the origin host had interactive users (which case applied)
	// From is the origin host.
	From string
	// DestDelay is the destination's delay factor d_k before the move: the
	// delay the process will see there.
	DestDelay float64
	// OriginDelay is d'_j = d_j − α_j, the process's delay on its origin.
	OriginDelay float64
	// OriginAlpha is α_j, the improvement required without users.
	OriginAlpha float64
	// MemNeed is memory'_j = memory_j + memory_usage(p), the free memory
	// the memory condition asks of the destination.
	MemNeed float64
	// DMax is the bound d_max applied with interactive users.
	DMax float64
}

// String explains the decision in one line, for logs and the dry-run table.
func (l Location) String() string {
	switch l.Rule {
	case RuleUsersMemory:
		return fmt.Sprintf("to %s: users on %s; lowest delay %s among user-free hosts with >= %s free and delay < d_max %s",
			l.To, l.From, num(l.DestDelay), mib(l.MemNeed), num(l.DMax))
	case RuleUsersAnyMemory:
		return fmt.Sprintf("to %s: users on %s; no user-free host has %s free, so lowest delay %s below d_max %s without the memory condition",
			l.To, l.From, mib(l.MemNeed), num(l.DestDelay), num(l.DMax))
	case RuleImprove:
		return fmt.Sprintf("to %s: delay %s -> %s, better by more than alpha %s, with >= %s free",
			l.To, num(l.OriginDelay), num(l.DestDelay), num(l.OriginAlpha), mib(l.MemNeed))
	}
	if l.Users {
		return fmt.Sprintf("stay: users on %s but no user-free host with more than mem_min free has delay < d_max %s", l.From, num(l.DMax))
	}
	return fmt.Sprintf("stay: no user-free host with >= %s free has delay below d' %s - alpha %s = %s",
		mib(l.MemNeed), num(l.OriginDelay), num(l.OriginAlpha), num(l.OriginDelay-l.OriginAlpha))
}

// Locate applies the location policy to process p whose origin host is
// origin, choosing among hosts (origin may be among them; it is never chosen).
//
// P is the set of hosts without interactive users and with more than mem_min
// free. With interactive users on the origin the process leaves for their
// sake: the destination is the host of P with the lowest delay factor d_k <
// d_max that has at least memory'_j = memory_j + memory_usage(p) free, or,
// when none has, the lowest d_k < d_max regardless of memory. Without
// interactive users the process moves only to a host of P with at least
// memory'_j free whose delay d_k beats the process's delay on the origin,
// d'_j = d_j − α_j, by more than α_j (equation 1); as in the paper this case
// has no fallback without the memory condition and no d_max (the delay
// condition already bounds d_k below the origin's). Ties between hosts of
// equal delay go to the smaller α, then the smaller name. When nothing fits
// the Location has Rule RuleStay and an empty To.
//
// The main location rule (a host currently in the process's class is an
// adequate destination) is met by choosing the lowest delay: if any
// eligible host is in the class, the chosen one is in it or faster.
func Locate(params Params, hosts []Host, origin Host, p Process) Location {
	l := Location{
		From:        origin.Name,
		Users:       origin.Users > 0,
		OriginDelay: origin.Delay() - origin.Alpha,
		OriginAlpha: origin.Alpha,
		MemNeed:     origin.MemFree + p.Mem,
		DMax:        params.DMax,
	}
	inP := func(h Host) bool {
		return h.Name != origin.Name && h.Users == 0 && h.MemFree > params.MemMin
	}
	pick := func(ok func(Host) bool) (Host, bool) {
		var best Host
		found := false
		for _, h := range hosts {
			if !inP(h) || !ok(h) {
				continue
			}
			if !found || h.Delay() < best.Delay() || (h.Delay() == best.Delay() && hostBefore(h, best)) {
				best, found = h, true
			}
		}
		return best, found
	}
	hasMem := func(h Host) bool { return l.MemNeed <= h.MemFree }
	if l.Users {
		belowMax := func(h Host) bool { return h.Delay() < params.DMax }
		if h, ok := pick(func(h Host) bool { return hasMem(h) && belowMax(h) }); ok {
			l.To, l.Rule, l.DestDelay = h.Name, RuleUsersMemory, h.Delay()
		} else if h, ok := pick(belowMax); ok {
			l.To, l.Rule, l.DestDelay = h.Name, RuleUsersAnyMemory, h.Delay()
		}
		return l
	}
	if h, ok := pick(func(h Host) bool { return hasMem(h) && l.OriginDelay-h.Delay() > origin.Alpha }); ok {
		l.To, l.Rule, l.DestDelay = h.Name, RuleImprove, h.Delay()
	}
	return l
}

// hostOrder keeps hosts sorted the way Locate prefers them: by delay, then
// α, then name. Step keeps it up to date as its moves change two hosts'
// loads, and places each process by walking it from the fastest host: the
// walk stops at the first host that fits, or at the first host too slow
// for the process (every later one is slower still), so that a check on a
// cluster where nothing can move costs each process a step or two instead
// of a pass over every host.
type hostOrder struct {
	hosts []Host // the hosts, indexed as in the snapshot (not copied)
	idx   []int  // host indices in preference order
	pos   []int  // pos[i] is host i's place in idx
}

func newHostOrder(hosts []Host) *hostOrder {
	o := &hostOrder{hosts: hosts, idx: make([]int, len(hosts)), pos: make([]int, len(hosts))}
	for i := range o.idx {
		o.idx[i] = i
	}
	sort.Slice(o.idx, func(a, b int) bool { return o.before(o.idx[a], o.idx[b]) })
	for p, i := range o.idx {
		o.pos[i] = p
	}
	return o
}

// before says whether host a is preferred to host b: the smaller delay,
// then hostBefore.
func (o *hostOrder) before(a, b int) bool {
	ha, hb := o.hosts[a], o.hosts[b]
	if da, db := ha.Delay(), hb.Delay(); da != db {
		return da < db
	}
	return hostBefore(ha, hb)
}

// fix moves host i to its place after its load or memory changed.
func (o *hostOrder) fix(i int) {
	p := o.pos[i]
	for p > 0 && o.before(i, o.idx[p-1]) {
		o.idx[p] = o.idx[p-1]
		o.pos[o.idx[p]] = p
		p--
	}
	for p < len(o.idx)-1 && o.before(o.idx[p+1], i) {
		o.idx[p] = o.idx[p+1]
		o.pos[o.idx[p]] = p
		p++
	}
	o.idx[p], o.pos[i] = i, p
}

// locate is Locate with the hosts in o: the same answer, found by walking
// the hosts in preference order.
func (o *hostOrder) locate(params Params, origin Host, p Process) Location {
	l := Location{
		From:        origin.Name,
		Users:       origin.Users > 0,
		OriginDelay: origin.Delay() - origin.Alpha,
		OriginAlpha: origin.Alpha,
		MemNeed:     origin.MemFree + p.Mem,
		DMax:        params.DMax,
	}
	// pick is the first host of P in preference order that fast accepts
	// and, if memory is set, has the memory the process needs. fast is
	// monotone in the delay: once it refuses a host it refuses every
	// later one, and the walk stops.
	pick := func(fast func(Host) bool, memory bool) (Host, bool) {
		for _, i := range o.idx {
			h := o.hosts[i]
			if !fast(h) {
				break
			}
			if h.Name != origin.Name && h.Users == 0 && h.MemFree > params.MemMin && (!memory || l.MemNeed <= h.MemFree) {
				return h, true
			}
		}
		return Host{}, false
	}
	if l.Users {
		belowMax := func(h Host) bool { return h.Delay() < params.DMax }
		if h, ok := pick(belowMax, true); ok {
			l.To, l.Rule, l.DestDelay = h.Name, RuleUsersMemory, h.Delay()
		} else if h, ok := pick(belowMax, false); ok {
			l.To, l.Rule, l.DestDelay = h.Name, RuleUsersAnyMemory, h.Delay()
		}
		return l
	}
	if h, ok := pick(func(h Host) bool { return l.OriginDelay-h.Delay() > origin.Alpha }, true); ok {
		l.To, l.Rule, l.DestDelay = h.Name, RuleImprove, h.Delay()
	}
	return l
}

// Migration is one move decided by Step. Its JSON form is an element of
// `dpvm sched step --json`'s "migrations".
type Migration struct {
	TID  string `json:"tid"`
	From string `json:"from"`
	To   string `json:"to"`
	// Location holds the rule and the figures the move was decided on.
	Location Location `json:"-"`
}

// Decision is what one check decided for one process, for logging.
type Decision struct {
	Process  Process // as it was before the check
	Reason   Reason  // Definition 1 conditions that held
	Counter  int     // counter after the update (before a migration resets it)
	Limit    int     // c¹max or c²max, after the origin's interactive users
	Selected bool    // the counter reached the limit
	// Location is the location policy's answer; set only when Selected.
	Location Location
}

// StepResult is the outcome of one check period. Its JSON form is the output
// of `dpvm sched step --json`.
type StepResult struct {
	// Counters maps every process's tid to its counter after the check;
	// a migrated process's counter is 0.
	Counters map[string]int `json:"counters"`
	// Migrations are the moves to carry out, in the order they were
	// decided (ascending tid).
	Migrations []Migration `json:"migrations"`
	// Stay lists the selected processes for which no destination fits,
	// in ascending tid order.
	Stay []string `json:"stay"`
	// Decisions has one entry per process, in ascending tid order.
	Decisions []Decision `json:"-"`
	// After is the snapshot as the policy expects it once the migrations
	// are done: processes on their new hosts with their new counters, each
	// move having taken one unit of load and the process's memory from its
	// origin to its destination (free memory never below 0).
	After *Snapshot `json:"-"`
}

// Step runs one check period of the selection and location policies on s:
//
//  1. every process's counter is updated (+1 if it is a migration
//     candidate on s, −1 otherwise, never below 0);
//  2. the processes whose counter reaches or passes its limit (c²max on a
//     host with interactive users, c¹max otherwise) are selected;
//  3. the selected processes are placed in ascending tid order (byte-wise
//     string order) with Locate, each move updating the load and free
//     memory of both hosts before the next process is placed; a migrated
//     process's counter is reset to 0, a process with no destination stays.
//
// Candidates and limits are judged on s as given (the state observed at the
// check); only the location policy sees the effect of earlier moves in the
// same period. s is not modified. The master calls Step every δT on a fresh
// snapshot that carries the counters of the previous result.
func Step(s *Snapshot) (StepResult, error) {
	if err := s.Validate(); err != nil {
		return StepResult{}, fmt.Errorf("step: %w", err)
	}
	after := s.Clone()
	index := make(map[string]int, len(s.Hosts))
	for i, h := range s.Hosts {
		index[h.Name] = i
	}
	order := make([]int, len(s.Processes))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return s.Processes[order[a]].TID < s.Processes[order[b]].TID })

	res := StepResult{
		Counters:   make(map[string]int, len(s.Processes)),
		Migrations: []Migration{},
		Stay:       []string{},
		Decisions:  make([]Decision, 0, len(s.Processes)),
		After:      after,
	}
	for _, pi := range order {
		p := s.Processes[pi]
		h := s.Hosts[index[p.Host]]
		d := Decision{Process: p, Reason: Candidate(s.Classes, s.Params, h, p), Limit: CounterLimit(s.Params, h)}
		d.Counter = UpdateCounter(p.Counter, d.Reason)
		d.Selected = d.Counter >= d.Limit
		after.Processes[pi].Counter = d.Counter
		res.Counters[p.TID] = d.Counter
		res.Decisions = append(res.Decisions, d)
	}
	var hosts *hostOrder // made at the first selected process
	for di, pi := range order {
		d := &res.Decisions[di]
		if !d.Selected {
			continue
		}
		if hosts == nil {
			hosts = newHostOrder(after.Hosts)
		}
		p := after.Processes[pi]
		from := index[p.Host]
		loc := hosts.locate(after.Params, after.Hosts[from], p)
		d.Location = loc
		if loc.To == "" {
			res.Stay = append(res.Stay, p.TID)
			continue
		}
		to := index[loc.To]
		move(&after.Hosts[from], &after.Hosts[to], p.Mem)
		hosts.fix(from)
		hosts.fix(to)
		after.Processes[pi].Host = loc.To
		after.Processes[pi].Counter = 0
		res.Counters[p.TID] = 0
		res.Migrations = append(res.Migrations, Migration{TID: p.TID, From: loc.From, To: loc.To, Location: loc})
	}
	return res, nil
}

// move takes one process using mem MiB from host a to host b.
func move(a, b *Host, mem float64) {
	a.Load--
	if a.Load < 0 {
		a.Load = 0
	}
	a.MemFree += mem
	b.Load++
	b.MemFree = math.Max(0, b.MemFree-mem)
}
