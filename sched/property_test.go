package sched

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// randomCluster builds a seeded random cluster: hosts of mixed speed, some
// loaded by outside work, some with interactive users or short of memory,
// and parallel processes of every class spread over them with random
// counters. users=false leaves every host without interactive users.
func randomCluster(rng *rand.Rand, users bool) *Snapshot {
	p := DefaultParams()
	p.MemReserve, p.MemMin = 256, 128
	p.C1Max = 1 + rng.IntN(6)
	p.C2Max = 1 + rng.IntN(4)
	s := &Snapshot{Classes: DefaultClasses(), Params: p}
	alphas := []float64{0.5, 1, 1, 1, 1.5, 2, 3, 4}
	nh := 2 + rng.IntN(9)
	for i := 0; i < nh; i++ {
		h := Host{
			Name:    fmt.Sprintf("h%d", i),
			Alpha:   alphas[rng.IntN(len(alphas))],
			Load:    float64(rng.IntN(5)),
			MemFree: float64(rng.IntN(8192)),
		}
		if rng.IntN(4) == 0 {
			h.Load += rng.Float64() // a load average
		}
		if rng.IntN(10) == 0 {
			h.MemFree = float64(rng.IntN(200)) // short of memory
		}
		if users && rng.IntN(4) == 0 {
			h.Users = 1 + rng.IntN(3)
			h.MaxUsers = rng.IntN(2)
		}
		s.Hosts = append(s.Hosts, h)
	}
	np := rng.IntN(30)
	for i := 0; i < np; i++ {
		hi := rng.IntN(nh)
		s.Processes = append(s.Processes, Process{
			TID:     fmt.Sprintf("t%02d", i),
			Host:    s.Hosts[hi].Name,
			Class:   rng.IntN(len(s.Classes) + 1), // 0: unknown
			Mem:     float64(rng.IntN(1024)),
			Counter: rng.IntN(7),
		})
		s.Hosts[hi].Load++
	}
	return s
}

// runToQuiescence iterates Step on s, feeding each result's After into the
// next check, until no migration has happened for max(c¹max, c²max)
// consecutive checks: the hosts then no longer change, every candidate has
// reached its limit and stays, so no further migration can ever happen. It
// calls check on every step and fails if the cluster does not settle.
func runToQuiescence(t *testing.T, s *Snapshot, check func(before *Snapshot, r StepResult)) int {
	t.Helper()
	quiet := max(s.Params.C1Max, s.Params.C2Max)
	still, moves := 0, 0
	for steps := 0; still <= quiet; steps++ {
		if steps > 2000 {
			t.Fatalf("no quiescence after %d checks and %d migrations", steps, moves)
		}
		r, err := Step(s)
		if err != nil {
			t.Fatalf("step %d: %v", steps, err)
		}
		check(s, r)
		if len(r.Migrations) == 0 {
			still++
		} else {
			still = 0
			moves += len(r.Migrations)
		}
		s = r.After
	}
	return moves
}

// TestPropertyCircularFree checks Theorem 2 on thousands of random clusters,
// iterating Step until each settles. Loads change only through migrations
// there, so a chain of migrations in the sense of Definition 3 is a run of
// consecutive migrations, each leaving the host the previous one reached:
// no such chain visits a host twice (circular-free), so in particular a move
// A→B is never answered by B→A (ping-pong-free). Every cluster settles, and
// no migration ends on a host with interactive users or without more than
// mem_min free, or, when made for a user, on a host with delay ≥ d_max.
//
// The stronger claim that a process never returns to a host it left does
// not hold, and the paper does not make it (its Theorem 1): once other
// processes have piled onto p's new host, p may move back.
// TestStepProcessMayReturn shows such a case.
func TestPropertyCircularFree(t *testing.T) {
	const clusters = 3000
	total, chains := 0, 0
	for seed := uint64(0); seed < clusters; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x5ed))
		s := randomCluster(rng, true)
		var chain []string // hosts of the current chain, origin first
		total += runToQuiescence(t, s, func(before *Snapshot, r StepResult) {
			hosts := map[string]Host{}
			for _, h := range before.Hosts {
				hosts[h.Name] = h
			}
			mem := map[string]float64{}
			for _, p := range before.Processes {
				mem[p.TID] = p.Mem
			}
			for _, m := range r.Migrations {
				if len(chain) == 0 || chain[len(chain)-1] != m.From {
					chain = []string{m.From}
				} else {
					chains++
				}
				for _, h := range chain {
					if h == m.To {
						t.Fatalf("seed %d: chain %v continues with %s %s→%s: circular", seed, chain, m.TID, m.From, m.To)
					}
				}
				chain = append(chain, m.To)
				from, to := hosts[m.From], hosts[m.To]
				if to.Users > 0 {
					t.Fatalf("seed %d: %s moved onto %s, which has interactive users", seed, m.TID, m.To)
				}
				if !(to.MemFree > before.Params.MemMin) {
					t.Fatalf("seed %d: %s moved onto %s with only %g MiB free", seed, m.TID, m.To, to.MemFree)
				}
				if from.Users > 0 && !(to.Delay() < before.Params.DMax) {
					t.Fatalf("seed %d: %s moved for a user onto %s with delay %g, not below d_max", seed, m.TID, m.To, to.Delay())
				}
				from.Load--
				from.MemFree += mem[m.TID]
				to.Load++
				to.MemFree = math.Max(0, to.MemFree-mem[m.TID])
				hosts[m.From], hosts[m.To] = from, to
			}
		})
	}
	if total == 0 || chains == 0 {
		t.Fatalf("%d migrations, %d chained: the generator tests nothing", total, chains)
	}
	t.Logf("%d clusters, %d migrations, %d of them continuing a chain", clusters, total, chains)
}

// TestPropertyChainsNeverReturn follows Definition 3 directly: a migration
// of some process from A0 to A1, then a migration of any process from A1 to
// the destination the location policy gives it, A2, and so on, with nothing
// else changing in between. Over thousands of random clusters and random
// choices, no chain comes back to a host it has visited, and every chain
// ends.
func TestPropertyChainsNeverReturn(t *testing.T) {
	const clusters = 20000
	moves, long, longest := 0, 0, 0
	for seed := uint64(0); seed < clusters; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0xc4a1))
		s := randomCluster(rng, true)
		// Chains need the memory rule to bind (Theorem 1's example): give
		// the processes a wide range of sizes.
		for i := range s.Processes {
			s.Processes[i].Mem = float64(rng.IntN(6000))
		}
		movable := func(host string) []int {
			var out []int
			for i, p := range s.Processes {
				if p.Host != host && host != "" {
					continue
				}
				origin, _ := s.Host(p.Host)
				if Locate(s.Params, s.Hosts, origin, p).To != "" {
					out = append(out, i)
				}
			}
			return out
		}
		apply := func(i int) string {
			p := s.Processes[i]
			origin, _ := s.Host(p.Host)
			to := Locate(s.Params, s.Hosts, origin, p).To
			var a, b *Host
			for k := range s.Hosts {
				switch s.Hosts[k].Name {
				case p.Host:
					a = &s.Hosts[k]
				case to:
					b = &s.Hosts[k]
				}
			}
			move(a, b, p.Mem)
			s.Processes[i].Host = to
			return to
		}
		first := movable("")
		if len(first) == 0 {
			continue
		}
		i := first[rng.IntN(len(first))]
		visited := map[string]bool{s.Processes[i].Host: true}
		cur := apply(i)
		visited[cur] = true
		moves++
		for n := 1; ; n++ {
			if n > len(s.Hosts) {
				t.Fatalf("seed %d: chain longer than the number of hosts", seed)
			}
			next := movable(cur)
			if len(next) == 0 {
				longest = max(longest, n)
				if n > 1 {
					long++
				}
				break
			}
			to := apply(next[rng.IntN(len(next))])
			if visited[to] {
				t.Fatalf("seed %d: chain returns to %s", seed, to)
			}
			visited[to] = true
			cur = to
			moves++
		}
	}
	if long < 100 {
		t.Fatalf("only %d chains of two moves or more over %d clusters: the generator tests little", long, clusters)
	}
	t.Logf("%d clusters, %d moves, %d chains of two moves or more, longest %d", clusters, moves, long, longest)
}

// TestPropertyDelayNeverWorse checks Principle 2 without interactive users:
// replaying each check's migrations in order on the hosts as they were, the
// moved process's delay on its destination, α_k(1 + load_k), is smaller than
// its delay on the origin, α_j·load_j, by more than α_j, it stays below what
// the processes left on the origin see, and the potential Φ decreases.
func TestPropertyDelayNeverWorse(t *testing.T) {
	const clusters = 3000
	total := 0
	for seed := uint64(0); seed < clusters; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0xde1a7))
		s := randomCluster(rng, false)
		total += runToQuiescence(t, s, func(before *Snapshot, r StepResult) {
			hosts := map[string]Host{}
			for _, h := range before.Hosts {
				hosts[h.Name] = h
			}
			mem := map[string]float64{}
			for _, p := range before.Processes {
				mem[p.TID] = p.Mem
			}
			for _, m := range r.Migrations {
				from, to := hosts[m.From], hosts[m.To]
				old := from.Alpha * from.Load
				now := to.Alpha * (to.Load + 1)
				if !(old-now > from.Alpha) {
					t.Fatalf("seed %d: %s %s→%s: delay %g → %g, not better by more than α %g", seed, m.TID, m.From, m.To, old, now, from.Alpha)
				}
				if now >= from.Alpha*(from.Load-1) {
					t.Fatalf("seed %d: %s lands at delay %g, not below what its origin keeps, %g", seed, m.TID, now, from.Alpha*(from.Load-1))
				}
				phi := potential(hosts)
				from.Load--
				from.MemFree += mem[m.TID]
				to.Load++
				to.MemFree = math.Max(0, to.MemFree-mem[m.TID])
				hosts[m.From], hosts[m.To] = from, to
				if after := potential(hosts); !(after < phi) {
					t.Fatalf("seed %d: %s %s→%s: potential %g → %g does not decrease", seed, m.TID, m.From, m.To, phi, after)
				}
			}
		})
	}
	if total == 0 {
		t.Fatal("no migrations in any cluster: the generator tests nothing")
	}
	t.Logf("%d clusters, %d migrations", clusters, total)
}

// potential is Φ = Σ α_h·load_h², the sum over runnable processes of the
// delay each sees. Equation 1 gives α_j(load_j − 1) > α_k(load_k + 1) for a
// move from j to k, so every move made without users on the origin lowers
// Φ: the cluster can never come back to an earlier load situation through
// such moves, and they stop after finitely many.
func potential(hosts map[string]Host) float64 {
	phi := 0.0
	for _, h := range hosts {
		phi += h.Alpha * h.Load * h.Load
	}
	return phi
}

// TestPropertyStepConsistent checks Step's bookkeeping on random clusters
// against an independent reading of the rules: every counter, the selected
// set, the stay list, and the snapshot after the moves.
func TestPropertyStepConsistent(t *testing.T) {
	for seed := uint64(0); seed < 2000; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0xc0))
		s := randomCluster(rng, true)
		r, err := Step(s)
		if err != nil {
			t.Fatal(err)
		}
		hosts := map[string]Host{}
		for _, h := range s.Hosts {
			hosts[h.Name] = h
		}
		moved := map[string]string{}
		for _, m := range r.Migrations {
			moved[m.TID] = m.To
		}
		stay := map[string]bool{}
		for _, tid := range r.Stay {
			stay[tid] = true
		}
		for _, p := range s.Processes {
			h := hosts[p.Host]
			cls := classFor(s.Classes, p)
			cand := h.Alpha*h.Load > cls.Max+1e-9 || h.MemFree < s.Params.MemMin || h.Users > h.MaxUsers
			c := p.Counter - 1
			if cand {
				c = p.Counter + 1
			}
			c = max(c, 0)
			limit := s.Params.C1Max
			if h.Users > 0 {
				limit = s.Params.C2Max
			}
			selected := c >= limit
			if selected != (moved[p.TID] != "" || stay[p.TID]) {
				t.Fatalf("seed %d: %s counter %d limit %d: selected %v, but moved %q stay %v", seed, p.TID, c, limit, selected, moved[p.TID], stay[p.TID])
			}
			if moved[p.TID] != "" {
				c = 0
			}
			if r.Counters[p.TID] != c {
				t.Fatalf("seed %d: %s counter %d, want %d", seed, p.TID, r.Counters[p.TID], c)
			}
		}
		if len(r.Counters) != len(s.Processes) {
			t.Fatalf("seed %d: %d counters for %d processes", seed, len(r.Counters), len(s.Processes))
		}
		if err := r.After.Validate(); err != nil {
			t.Fatalf("seed %d: after: %v", seed, err)
		}
		var loadBefore, loadAfter float64
		for i := range s.Hosts {
			loadBefore += s.Hosts[i].Load
			loadAfter += r.After.Hosts[i].Load
		}
		if math.Abs(loadBefore-loadAfter) > 1e-9 {
			t.Fatalf("seed %d: total load %g became %g", seed, loadBefore, loadAfter)
		}
		for i := 1; i < len(r.Migrations); i++ {
			if r.Migrations[i-1].TID >= r.Migrations[i].TID {
				t.Fatalf("seed %d: migrations out of tid order: %v", seed, r.Migrations)
			}
		}
	}
}

// TestPropertyPlan checks SED's mapping on random clusters against its
// definition: the chosen class has the smallest EDT among the classes with
// enough nodes (the fastest on ties), the placement fits each host's
// availability in that class, and no class was skipped that fits.
func TestPropertyPlan(t *testing.T) {
	for seed := uint64(0); seed < 2000; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x91a))
		s := randomCluster(rng, true)
		job := Job{MinSize: 1 + rng.IntN(8)}
		if rng.IntN(2) == 0 {
			job.MaxSize = job.MinSize + rng.IntN(20)
		}
		m, err := Plan(s, job)
		if err != nil {
			t.Fatal(err)
		}
		if got := Availability(s); fmt.Sprint(got) != fmt.Sprint(m.Availability) {
			t.Fatalf("seed %d: availability %v vs %v", seed, m.Availability, got)
		}
		for i, c := range s.Classes {
			a := m.Availability[i]
			if job.MaxSize > 0 {
				a = min(a, job.MaxSize)
			}
			if a < job.MinSize {
				continue
			}
			if m.Class == 0 {
				t.Fatalf("seed %d: class %d fits (%d nodes) but nothing was chosen", seed, i+1, a)
			}
			edt := c.Delta / float64(a)
			if edt < m.EDT || (edt == m.EDT && i+1 < m.Class) {
				t.Fatalf("seed %d: class %d EDT %g beats chosen class %d EDT %g", seed, i+1, edt, m.Class, m.EDT)
			}
		}
		if m.Class == 0 {
			continue
		}
		total := 0
		for _, h := range s.Hosts {
			n := m.Placement[h.Name]
			if n > HostAvailability(h, s.Classes, s.Params)[m.Class-1] {
				t.Fatalf("seed %d: %d processes on %s exceed its availability", seed, n, h.Name)
			}
			total += n
		}
		if total != m.Size || m.Size < job.MinSize || (job.MaxSize > 0 && m.Size > job.MaxSize) {
			t.Fatalf("seed %d: placement of %d for size %d, job %+v", seed, total, m.Size, job)
		}
		for _, p := range m.Hosts {
			if p.Delay > s.Classes[m.Class-1].Max || p.N != m.Placement[p.Host] {
				t.Fatalf("seed %d: %d processes on %s, the last expecting delay %g, beyond class %d", seed, p.N, p.Host, p.Delay, m.Class)
			}
		}
	}
}

// TestPropertyIdle checks Idle against Step on random clusters, half of
// them with every counter at 0 and half of those lightly loaded, so that
// both answers occur often: Idle holds exactly when every counter is 0 and
// Step selects nothing, finds no candidate and leaves every counter at 0.
func TestPropertyIdle(t *testing.T) {
	seen := [2]int{}
	for seed := uint64(0); seed < 3000; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x9e7))
		s := randomCluster(rng, true)
		if seed%2 == 0 {
			for i := range s.Processes {
				s.Processes[i].Counter = 0
			}
		}
		if seed%4 == 0 {
			// At most one process per host, little outside load.
			s.Processes = s.Processes[:min(len(s.Processes), len(s.Hosts))]
			for i := range s.Processes {
				s.Processes[i].Host = s.Hosts[i].Name
			}
			for i := range s.Hosts {
				s.Hosts[i].Alpha = []float64{0.5, 1, 1.5}[rng.IntN(3)]
				s.Hosts[i].Load = rng.Float64()
				if i < len(s.Processes) {
					s.Hosts[i].Load++
				}
				s.Hosts[i].MemFree = s.Params.MemMin + float64(rng.IntN(4096))
				s.Hosts[i].Users = min(s.Hosts[i].Users, s.Hosts[i].MaxUsers)
			}
		}
		r, err := Step(s)
		if err != nil {
			t.Fatal(err)
		}
		nothing := len(r.Migrations) == 0 && len(r.Stay) == 0
		for _, d := range r.Decisions {
			nothing = nothing && d.Process.Counter == 0 && d.Reason == 0 && d.Counter == 0
		}
		idle := Idle(s)
		if idle != nothing {
			t.Fatalf("seed %d: Idle %v, but counters at 0 and nothing decided: %v (%+v)", seed, idle, nothing, r.Decisions)
		}
		if idle {
			seen[1]++
		} else {
			seen[0]++
		}
	}
	if seen[0] < 100 || seen[1] < 100 {
		t.Fatalf("too few cases of each kind: %d not idle, %d idle", seen[0], seen[1])
	}
	if Idle(&Snapshot{Classes: DefaultClasses(), Params: DefaultParams(), Processes: []Process{{TID: "t", Host: "gone"}}}) {
		t.Fatal("a process on an unknown host: idle")
	}
}

// TestPropertyHostOrderLocate holds Step's walk of the hosts in preference
// order to Locate's pass over every host: on seeded random clusters, with
// and without interactive users, every process gets the same Location,
// also after moves that change two hosts' loads and memory and re-place
// them in the order.
func TestPropertyHostOrderLocate(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 11))
	for trial := range 400 {
		s := randomCluster(rng, trial%2 == 0)
		if len(s.Processes) == 0 {
			continue
		}
		hosts := s.Clone().Hosts
		o := newHostOrder(hosts)
		index := map[string]int{}
		for i, h := range hosts {
			index[h.Name] = i
		}
		for round := range 6 {
			for _, p := range s.Processes {
				origin := hosts[index[p.Host]]
				want := Locate(s.Params, hosts, origin, p)
				if got := o.locate(s.Params, origin, p); got != want {
					t.Fatalf("trial %d round %d, %s on %s: walk %+v, Locate %+v", trial, round, p.TID, p.Host, got, want)
				}
			}
			for p := 1; p < len(o.idx); p++ {
				if o.before(o.idx[p], o.idx[p-1]) || o.pos[o.idx[p]] != p {
					t.Fatalf("trial %d round %d: the order is broken at %d", trial, round, p)
				}
			}
			// A move between two random hosts, as Step makes them.
			a, b := rng.IntN(len(hosts)), rng.IntN(len(hosts))
			if a == b {
				continue
			}
			move(&hosts[a], &hosts[b], float64(rng.IntN(512)))
			o.fix(a)
			o.fix(b)
		}
	}
}
