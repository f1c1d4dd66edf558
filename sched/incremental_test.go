package sched

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// model is the reference for Incremental: the hosts' reported figures and
// the processes, from which a fresh Snapshot is built for Step at every
// check, as the master built one every δT.
type model struct {
	classes []Class
	params  Params
	hosts   map[string]Host
	procs   map[string]Process
}

func (m *model) snapshot() *Snapshot {
	s := &Snapshot{Classes: m.classes, Params: m.params}
	count := map[string]int{}
	for _, p := range m.procs {
		s.Processes = append(s.Processes, p)
		count[p.Host]++
	}
	for _, h := range m.hosts {
		h.Load = math.Max(h.Load, float64(count[h.Name]))
		s.Hosts = append(s.Hosts, h)
	}
	slices.SortFunc(s.Hosts, func(a, b Host) int { return cmpString(a.Name, b.Name) })
	return s
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// randomHost returns host name with random figures, a few with users or
// short of memory.
func randomHost(rng *rand.Rand, name string) Host {
	alphas := []float64{0.5, 1, 1, 1, 1.5, 2, 3, 4}
	h := Host{Name: name, Alpha: alphas[rng.IntN(len(alphas))], Load: float64(rng.IntN(5)), MemFree: float64(rng.IntN(8192))}
	if rng.IntN(4) == 0 {
		h.Load += rng.Float64()
	}
	if rng.IntN(8) == 0 {
		h.MemFree = float64(rng.IntN(200))
	}
	if rng.IntN(5) == 0 {
		h.Users = 1 + rng.IntN(3)
		h.MaxUsers = rng.IntN(2)
	}
	return h
}

// TestIncrementalMatchesStep holds Incremental.Check equal to Step on a
// freshly built snapshot over seeded random sequences of changes: hosts
// joining, leaving and reporting new figures, processes placed, moved,
// changed and ended, and the checks' migrations carried out (some fail and
// leave the process where it was). After every check the migrations, the
// stays and every process's counter must agree, and the incremental
// snapshot must equal the reference's.
func TestIncrementalMatchesStep(t *testing.T) {
	checks, moves, visited, total := 0, 0, 0, 0
	for seed := uint64(0); seed < 600; seed++ {
		rng := rand.New(rand.NewPCG(seed, 32))
		p := DefaultParams()
		p.MemReserve, p.MemMin = 256, 128
		p.C1Max, p.C2Max = 1+rng.IntN(6), 1+rng.IntN(4)
		m := &model{classes: DefaultClasses(), params: p, hosts: map[string]Host{}, procs: map[string]Process{}}
		x, err := NewIncremental(m.classes, p)
		if err != nil {
			t.Fatal(err)
		}
		nextHost, nextProc := 0, 0
		hostNames := func() []string {
			var ns []string
			for n := range m.hosts {
				ns = append(ns, n)
			}
			slices.Sort(ns)
			return ns
		}
		procTIDs := func() []string {
			var ts []string
			for t := range m.procs {
				ts = append(ts, t)
			}
			slices.Sort(ts)
			return ts
		}
		for step := 0; step < 40; step++ {
			for range rng.IntN(6) * rng.IntN(2) { // half the checks see no change
				hs := hostNames()
				ts := procTIDs()
				switch op := rng.IntN(10); {
				case op == 0 || len(hs) < 2: // join
					h := randomHost(rng, fmt.Sprintf("h%03d", nextHost))
					nextHost++
					m.hosts[h.Name] = h
					if err := x.SetHost(h); err != nil {
						t.Fatal(err)
					}
				case op == 1 && len(hs) > 2: // leave
					n := hs[rng.IntN(len(hs))]
					delete(m.hosts, n)
					for tid, p := range m.procs {
						if p.Host == n {
							delete(m.procs, tid)
						}
					}
					if !x.RemoveHost(n) {
						t.Fatalf("seed %d: host %s not removed", seed, n)
					}
				case op <= 4: // a report
					h := randomHost(rng, hs[rng.IntN(len(hs))])
					if rng.IntN(3) == 0 {
						h = m.hosts[h.Name] // an unchanged report
					}
					m.hosts[h.Name] = h
					if err := x.SetHost(h); err != nil {
						t.Fatal(err)
					}
				case op <= 7 || len(ts) == 0: // a process placed
					for range 1 + rng.IntN(4) {
						q := Process{TID: fmt.Sprintf("t%04d", nextProc), Host: hs[rng.IntN(len(hs))],
							Class: rng.IntN(len(m.classes) + 1), Mem: float64(rng.IntN(1024))}
						nextProc++
						m.procs[q.TID] = q
						if err := x.SetProcess(q); err != nil {
							t.Fatal(err)
						}
					}
				case op == 8: // a process moved by hand, or its memory changed
					q := m.procs[ts[rng.IntN(len(ts))]]
					if rng.IntN(2) == 0 {
						q.Host = hs[rng.IntN(len(hs))]
					} else {
						q.Mem = float64(rng.IntN(1024))
					}
					m.procs[q.TID] = q
					if err := x.SetProcess(q); err != nil {
						t.Fatal(err)
					}
				default: // a process ended
					tid := ts[rng.IntN(len(ts))]
					delete(m.procs, tid)
					if !x.RemoveProcess(tid) {
						t.Fatalf("seed %d: process %s not removed", seed, tid)
					}
				}
			}
			if len(m.hosts) == 0 {
				continue
			}
			want, err := Step(m.snapshot())
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			got := x.Check()
			checks++
			if !reflect.DeepEqual(got.Migrations, want.Migrations) || got.Staying != len(want.Stay) {
				t.Fatalf("seed %d step %d: incremental decided %v, %d stay; Step decided %v, stay %v",
					seed, step, got.Migrations, got.Staying, want.Migrations, want.Stay)
			}
			for _, tid := range got.Stay {
				if !slices.Contains(want.Stay, tid) {
					t.Fatalf("seed %d step %d: incremental says %s stays, Step does not (%v)", seed, step, tid, want.Stay)
				}
			}
			// Every judged process's decision (its reason, counter, limit
			// and the location's figures) is Step's.
			byTID := map[string]Decision{}
			for _, d := range want.Decisions {
				byTID[d.Process.TID] = d
			}
			for _, d := range got.Decisions {
				if !reflect.DeepEqual(d, byTID[d.Process.TID]) {
					t.Fatalf("seed %d step %d: decision %+v, Step's %+v", seed, step, d, byTID[d.Process.TID])
				}
			}
			visited += len(got.Decisions)
			total += len(want.Decisions)
			for tid, c := range want.Counters {
				q, ok := x.Process(tid)
				if !ok || q.Counter != c {
					t.Fatalf("seed %d step %d: %s counter %d (present %v), Step's %d", seed, step, tid, q.Counter, ok, c)
				}
				mp := m.procs[tid]
				mp.Counter = c
				m.procs[tid] = mp
			}
			// Carry out the migrations; one in five fails.
			for _, mg := range got.Migrations {
				if rng.IntN(5) == 0 {
					continue
				}
				moves++
				mp := m.procs[mg.TID]
				mp.Host = mg.To
				m.procs[mg.TID] = mp
				if err := x.Move(mg.TID, mg.To); err != nil {
					t.Fatal(err)
				}
			}
			if !sameSnapshot(x.Snapshot(), m.snapshot()) {
				t.Fatalf("seed %d step %d: incremental snapshot differs from the reference", seed, step)
			}
		}
	}
	if moves < 1000 {
		t.Fatalf("only %d moves over %d checks: the sequences do not exercise the location policy", moves, checks)
	}
	t.Logf("%d checks, %d moves; the checks visited %d processes of %d", checks, moves, visited, total)
}

// sameSnapshot compares two snapshots regardless of the order of their
// hosts and processes.
func sameSnapshot(a, b *Snapshot) bool {
	norm := func(s *Snapshot) *Snapshot {
		c := s.Clone()
		slices.SortFunc(c.Hosts, func(x, y Host) int { return cmpString(x.Name, y.Name) })
		slices.SortFunc(c.Processes, func(x, y Process) int { return cmpString(x.TID, y.TID) })
		return c
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

// TestIncrementalVisitsChanges checks the point of Incremental: on a
// settled cluster a check with no change visits nothing, and one host's
// report visits that host's processes only.
func TestIncrementalVisitsChanges(t *testing.T) {
	x, err := NewIncremental(DefaultClasses(), DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if err := x.SetHost(Host{Name: fmt.Sprintf("h%d", i), Alpha: 1, Load: 2, MemFree: 4096}); err != nil {
			t.Fatal(err)
		}
		if err := x.SetProcess(Process{TID: fmt.Sprintf("t%d", i), Host: fmt.Sprintf("h%d", i), Class: 2}); err != nil {
			t.Fatal(err)
		}
	}
	if r := x.Check(); len(r.Decisions) != 8 || r.DirtyHosts != 8 {
		t.Fatalf("first check visited %d processes, %d hosts; want 8, 8", len(r.Decisions), r.DirtyHosts)
	}
	if r := x.Check(); len(r.Decisions) != 0 || r.DirtyHosts != 0 {
		t.Fatalf("check with no change visited %d processes, %d hosts; want none", len(r.Decisions), r.DirtyHosts)
	}
	// h3 overloaded: its process becomes a delay candidate and stays
	// active (counting) at the following checks.
	if err := x.SetHost(Host{Name: "h3", Alpha: 1, Load: 4, MemFree: 4096}); err != nil {
		t.Fatal(err)
	}
	if r := x.Check(); len(r.Decisions) != 1 || r.Decisions[0].Process.TID != "t3" || r.Decisions[0].Counter != 1 {
		t.Fatalf("check after h3's report: decisions %+v, want t3 at counter 1", r.Decisions)
	}
	// Its counter then rises by itself: t3 is looked at again only when
	// it reaches c1max (6) and is placed; it stays (no host is faster by
	// more than α: every other host's delay is 3, t3's 4).
	for i := 2; i <= 7; i++ {
		r := x.Check()
		if q, _ := x.Process("t3"); q.Counter != i {
			t.Fatalf("check %d: t3's counter %d, want %d", i, q.Counter, i)
		}
		want := 0
		if i == 6 {
			want = 1
		}
		if len(r.Decisions) != want || r.Staying != min(want+max(i-6, 0), 1) {
			t.Fatalf("check %d: visited %d processes (want %d), %d staying", i, len(r.Decisions), want, r.Staying)
		}
	}
	// An unchanged report is no change.
	if err := x.SetHost(Host{Name: "h5", Alpha: 1, Load: 2, MemFree: 4096}); err != nil {
		t.Fatal(err)
	}
	if r := x.Check(); len(r.Decisions) != 0 || r.DirtyHosts != 0 || r.Staying != 1 {
		t.Fatalf("unchanged report: visited %d processes, %d hosts, %d staying; want 0, 0, 1", len(r.Decisions), r.DirtyHosts, r.Staying)
	}
	// h0 freed: t3 can now leave for it, and is placed again.
	if err := x.SetHost(Host{Name: "h0", Alpha: 0.5, Load: 0, MemFree: 4096}); err != nil {
		t.Fatal(err)
	}
	if r := x.Check(); len(r.Migrations) != 1 || r.Migrations[0].TID != "t3" || r.Migrations[0].To != "h0" {
		t.Fatalf("after h0's report: migrations %v, want t3 to h0", r.Migrations)
	}
}

// TestIncrementalInvalid checks that bad changes are refused with
// ErrInvalid and change nothing.
func TestIncrementalInvalid(t *testing.T) {
	if _, err := NewIncremental(nil, DefaultParams()); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no classes: %v, want ErrInvalid", err)
	}
	x, err := NewIncremental(DefaultClasses(), DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	if err := x.SetHost(Host{Name: "a", Alpha: 1}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		err  error
	}{
		{"bad alpha", x.SetHost(Host{Name: "b", Alpha: -1})},
		{"unknown host", x.SetProcess(Process{TID: "t", Host: "z"})},
		{"empty tid", x.SetProcess(Process{Host: "a"})},
		{"bad class", x.SetProcess(Process{TID: "t", Host: "a", Class: 9})},
		{"bad mem", x.SetProcess(Process{TID: "t", Host: "a", Mem: math.NaN()})},
		{"move unknown", x.Move("nope", "a")},
	} {
		if !errors.Is(c.err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, c.err)
		}
	}
	if h, p := x.Len(); h != 1 || p != 0 {
		t.Fatalf("after refused changes: %d hosts, %d processes; want 1, 0", h, p)
	}
}
