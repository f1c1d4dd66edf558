package sched

import (
	"fmt"
	"reflect"
	"testing"
)

// paperParams are the paper's parameters with its memory figures in MiB.
func paperParams() Params {
	p := DefaultParams()
	p.MemReserve, p.MemMin = 1, 0.5
	return p
}

func TestCandidate(t *testing.T) {
	cs, p := DefaultClasses(), paperParams()
	for _, c := range []struct {
		name  string
		h     Host
		class int
		want  Reason
	}{
		// Condition 1: d_j − α_j = α·load against δ_i^max.
		{"in class", Host{Alpha: 1, Load: 1, MemFree: 64}, 1, 0},
		{"dropped out of class 1", Host{Alpha: 1, Load: 2, MemFree: 64}, 1, ReasonDelay},
		{"class 2 still holds", Host{Alpha: 1, Load: 2, MemFree: 64}, 2, 0},
		{"slow host in class 4", Host{Alpha: 4, Load: 1, MemFree: 64}, 4, 0},
		{"slow host out of class 3", Host{Alpha: 4, Load: 1, MemFree: 64}, 3, ReasonDelay},
		{"exactly at the bound", Host{Alpha: 1, Load: 1.5, MemFree: 64}, 1, 0},
		{"no class: slowest", Host{Alpha: 1, Load: 4.5, MemFree: 64}, 0, 0},
		{"no class, past every class", Host{Alpha: 1, Load: 5, MemFree: 64}, 0, ReasonDelay},
		// Condition 2: memory_j < mem_min (raw, no reservation).
		{"memory low", Host{Alpha: 1, Load: 1, MemFree: 0.4}, 1, ReasonMemory},
		{"memory at mem_min", Host{Alpha: 1, Load: 1, MemFree: 0.5}, 1, 0},
		// Condition 3: users > max_users.
		{"users over the limit", Host{Alpha: 1, Load: 1, MemFree: 64, Users: 1}, 1, ReasonUsers},
		{"users permitted", Host{Alpha: 1, Load: 1, MemFree: 64, Users: 2, MaxUsers: 2}, 1, 0},
		{"all three", Host{Alpha: 2, Load: 3, MemFree: 0, Users: 3, MaxUsers: 1}, 2, ReasonDelay | ReasonMemory | ReasonUsers},
	} {
		got := Candidate(cs, p, c.h, Process{TID: "p", Class: c.class})
		if got != c.want {
			t.Errorf("%s: Candidate = %v, want %v", c.name, got, c.want)
		}
	}
	if s := (ReasonDelay | ReasonUsers).String(); s != "delay+users" {
		t.Errorf("reason string %q", s)
	}
	if s := Reason(0).String(); s != "none" {
		t.Errorf("reason string %q", s)
	}
}

func TestCounter(t *testing.T) {
	for _, c := range []struct {
		in   int
		r    Reason
		want int
	}{{0, 0, 0}, {3, 0, 2}, {5, ReasonDelay, 6}, {0, ReasonUsers, 1}, {1, 0, 0}} {
		if got := UpdateCounter(c.in, c.r); got != c.want {
			t.Errorf("UpdateCounter(%d, %v) = %d, want %d", c.in, c.r, got, c.want)
		}
	}
	p := paperParams()
	if CounterLimit(p, Host{Users: 0}) != 6 || CounterLimit(p, Host{Users: 1}) != 4 {
		t.Error("CounterLimit: want c1max 6 without users, c2max 4 with")
	}
}

func TestLocateUsersOnOrigin(t *testing.T) {
	p := paperParams()
	origin := Host{Name: "o", Alpha: 1, Load: 3, MemFree: 10, Users: 1}
	proc := Process{TID: "p", Host: "o", Class: 1, Mem: 8} // memory'_o = 18
	x := Host{Name: "x", Alpha: 1, Load: 1, MemFree: 5}    // d 2, too little memory
	y := Host{Name: "y", Alpha: 2, Load: 0, MemFree: 100}  // d 2, enough memory
	busy := Host{Name: "busy", Alpha: 1, Load: 0, MemFree: 100, Users: 1}
	full := Host{Name: "full", Alpha: 1, Load: 11, MemFree: 100} // d 12 = d_max
	for _, c := range []struct {
		name  string
		hosts []Host
		to    string
		rule  Rule
	}{
		{"lowest delay with memory", []Host{origin, x, y, busy, full}, "y", RuleUsersMemory},
		{"memory dropped, tie to smaller α", []Host{origin, x, Host{Name: "y", Alpha: 2, MemFree: 10}, busy, full}, "x", RuleUsersAnyMemory},
		{"not in P at mem_min", []Host{origin, Host{Name: "x", Alpha: 1, Load: 1, MemFree: 0.5}, Host{Name: "y", Alpha: 2, MemFree: 10}}, "y", RuleUsersAnyMemory},
		// Improvement is not required: the user takes precedence.
		{"worse delay accepted", []Host{origin, Host{Name: "z", Alpha: 1, Load: 9, MemFree: 100}}, "z", RuleUsersMemory},
		{"d_max bounds it", []Host{origin, busy, full}, "", RuleStay},
		{"only hosts with users", []Host{origin, busy}, "", RuleStay},
	} {
		l := Locate(p, c.hosts, origin, proc)
		if l.To != c.to || l.Rule != c.rule {
			t.Errorf("%s: Locate = %q %v (%s), want %q %v", c.name, l.To, l.Rule, l, c.to, c.rule)
		}
		if !l.Users || l.MemNeed != 18 {
			t.Errorf("%s: location figures %+v", c.name, l)
		}
	}
}

func TestLocateNoUsersOnOrigin(t *testing.T) {
	p := paperParams()
	origin := Host{Name: "o", Alpha: 1, Load: 4, MemFree: 10} // d'_o = 4
	proc := Process{TID: "p", Host: "o", Class: 1, Mem: 2}    // memory'_o = 12
	x := Host{Name: "x", Alpha: 1, Load: 1, MemFree: 20}      // d 2: 4 − 2 > 1
	y := Host{Name: "y", Alpha: 1, Load: 2, MemFree: 50}      // d 3: 4 − 3 = 1, not > 1
	z := Host{Name: "z", Alpha: 0.5, Load: 2, MemFree: 11}    // d 1.5 but memory 11 < 12
	u := Host{Name: "u", Alpha: 1, Load: 0, MemFree: 50, Users: 1}
	for _, c := range []struct {
		name  string
		hosts []Host
		to    string
		rule  Rule
	}{
		{"equation 1", []Host{origin, x, y, z, u}, "x", RuleImprove},
		{"improvement by exactly α is not enough", []Host{origin, y, u}, "", RuleStay},
		{"no fallback without the memory condition", []Host{origin, z, y}, "", RuleStay},
		{"memory condition is inclusive", []Host{origin, Host{Name: "w", Alpha: 1, MemFree: 12}}, "w", RuleImprove},
		{"tie goes to the smaller α", []Host{origin, Host{Name: "a", Alpha: 2, Load: 0, MemFree: 50}, Host{Name: "b", Alpha: 1, Load: 1, MemFree: 50}}, "b", RuleImprove},
		{"then to the smaller name", []Host{origin, Host{Name: "n2", Alpha: 1, MemFree: 50}, Host{Name: "n1", Alpha: 1, MemFree: 50}}, "n1", RuleImprove},
		{"origin itself is never chosen", []Host{origin}, "", RuleStay},
	} {
		l := Locate(p, c.hosts, origin, proc)
		if l.To != c.to || l.Rule != c.rule {
			t.Errorf("%s: Locate = %q %v (%s), want %q %v", c.name, l.To, l.Rule, l, c.to, c.rule)
		}
		if l.Users || l.OriginDelay != 4 || l.MemNeed != 12 {
			t.Errorf("%s: location figures %+v", c.name, l)
		}
	}
}

func TestStep(t *testing.T) {
	s := &Snapshot{Classes: DefaultClasses(), Params: paperParams(),
		Hosts: []Host{
			{Name: "o", Alpha: 1, Load: 4, MemFree: 50},            // d'_o = 4: class 1 dropped out
			{Name: "x", Alpha: 1, Load: 0, MemFree: 100},           // idle
			{Name: "u", Alpha: 1, Load: 1, MemFree: 100, Users: 1}, // an interactive user
			{Name: "q", Alpha: 1, Load: 1, MemFree: 100},           // fine
		},
		Processes: []Process{
			{TID: "p2", Host: "o", Class: 1, Mem: 10, Counter: 5},  // candidate: 6 = c1max, selected
			{TID: "p10", Host: "o", Class: 1, Mem: 10, Counter: 9}, // candidate: 10, selected first ("p10" < "p2")
			{TID: "p3", Host: "o", Class: 4, Counter: 2},           // 4 ≤ 4.5: not a candidate
			{TID: "p4", Host: "u", Class: 1, Mem: 1, Counter: 3},   // users: 4 = c2max, selected
			{TID: "p5", Host: "q", Class: 1, Counter: 0},           // stays at 0
		},
	}
	r, err := Step(s)
	if err != nil {
		t.Fatal(err)
	}
	// p10 first: o→x (4 − 1 > 1, memory'_o = 60 ≤ 100); o now has load 3
	// and x 1. p2: d'_o = 3, the best d is 2 (x and q): 3 − 2 = 1, not > 1,
	// so it stays.
	// p4: users on u: lowest delay below d_max with memory'_u = 101 > 100 free: none;
	// without the memory condition the lowest d is 2 (q, x); tie to the name: q.
	wantMig := []Migration{{TID: "p10", From: "o", To: "x"}, {TID: "p4", From: "u", To: "q"}}
	if len(r.Migrations) != len(wantMig) {
		t.Fatalf("migrations %+v, want %+v", r.Migrations, wantMig)
	}
	for i, m := range r.Migrations {
		if m.TID != wantMig[i].TID || m.From != wantMig[i].From || m.To != wantMig[i].To {
			t.Errorf("migration %d = %+v, want %+v", i, m, wantMig[i])
		}
	}
	if r.Migrations[1].Location.Rule != RuleUsersAnyMemory {
		t.Errorf("p4 rule %v", r.Migrations[1].Location.Rule)
	}
	if want := []string{"p2"}; !reflect.DeepEqual(r.Stay, want) {
		t.Errorf("stay %v, want %v", r.Stay, want)
	}
	wantCounters := map[string]int{"p10": 0, "p2": 6, "p3": 1, "p4": 0, "p5": 0}
	if !reflect.DeepEqual(r.Counters, wantCounters) {
		t.Errorf("counters %v, want %v", r.Counters, wantCounters)
	}
	// The snapshot after the moves.
	load := map[string]float64{}
	mem := map[string]float64{}
	for _, h := range r.After.Hosts {
		load[h.Name], mem[h.Name] = h.Load, h.MemFree
	}
	if !reflect.DeepEqual(load, map[string]float64{"o": 3, "x": 1, "u": 0, "q": 2}) {
		t.Errorf("loads after %v", load)
	}
	if !reflect.DeepEqual(mem, map[string]float64{"o": 60, "x": 90, "u": 101, "q": 99}) {
		t.Errorf("memory after %v", mem)
	}
	if err := r.After.Validate(); err != nil {
		t.Errorf("after: %v", err)
	}
	for _, p := range r.After.Processes {
		if p.Counter != r.Counters[p.TID] {
			t.Errorf("after: %s counter %d, result %d", p.TID, p.Counter, r.Counters[p.TID])
		}
	}
	// The input is untouched.
	if s.Hosts[0].Load != 4 || s.Processes[1].Host != "o" || s.Processes[1].Counter != 9 {
		t.Error("Step modified its input")
	}
	// One decision per process in tid order, with reasons.
	var tids []string
	for _, d := range r.Decisions {
		tids = append(tids, d.Process.TID)
	}
	if !reflect.DeepEqual(tids, []string{"p10", "p2", "p3", "p4", "p5"}) {
		t.Errorf("decision order %v", tids)
	}
	if d := r.Decisions[3]; d.Reason != ReasonUsers || d.Limit != 4 || !d.Selected {
		t.Errorf("p4 decision %+v", d)
	}
}

func TestStepRejectsInvalid(t *testing.T) {
	s := &Snapshot{Classes: DefaultClasses(), Params: DefaultParams(),
		Hosts:     []Host{{Name: "a", Alpha: 1, Load: 1}},
		Processes: []Process{{TID: "p", Host: "b"}}}
	if _, err := Step(s); err == nil {
		t.Fatal("Step accepted a process on an unknown host")
	}
}

// TestStepProcessMayReturn is the limit of Theorem 2 (and the paper's
// Theorem 1): p leaves A for B, then other processes pile onto B (only B has
// the memory they need), and six checks later p moves back to A, now the
// better host. No chain returns — the moves onto B came from elsewhere —
// but a process can see a host again.
func TestStepProcessMayReturn(t *testing.T) {
	s := &Snapshot{Classes: DefaultClasses(), Params: paperParams(),
		Hosts: []Host{
			{Name: "A", Alpha: 0.5, Load: 5, MemFree: 3000},
			{Name: "B", Alpha: 1, Load: 0, MemFree: 9000},
			{Name: "C1", Alpha: 1, Load: 10, MemFree: 1000},
			{Name: "C2", Alpha: 1, Load: 10, MemFree: 4000},
			{Name: "C3", Alpha: 1, Load: 10, MemFree: 2000},
		},
		Processes: []Process{
			{TID: "a", Host: "A", Class: 1, Counter: 5},
			{TID: "b1", Host: "C1", Class: 1, Mem: 2000, Counter: 5},
			{TID: "b2", Host: "C2", Class: 1, Mem: 2000, Counter: 5},
			{TID: "b3", Host: "C3", Class: 1, Mem: 2000, Counter: 5},
		},
	}
	var got []string
	for step := 0; step < 7; step++ {
		r, err := Step(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range r.Migrations {
			got = append(got, fmt.Sprintf("%d:%s:%s>%s", step, m.TID, m.From, m.To))
		}
		s = r.After
	}
	// Check 0: a leaves A (d' 2.5 − d_B 1 > α_A 0.5); b1, b2, b3 go to B,
	// the only host with memory' free for b2 and b3. Check 6: the counters
	// of the processes on B (delay 4 > 1.5) reach c¹max; a, first in tid
	// order, finds A (delay 2.5, 3000 MiB free ≥ memory'_B 3000) better by
	// more than α_B.
	want := []string{"0:a:A>B", "0:b1:C1>B", "0:b2:C2>B", "0:b3:C3>B", "6:a:B>A"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("migrations %v, want %v", got, want)
	}
}
