package sched

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// bigCluster is a cluster of nh hosts carrying np parallel processes, about
// a quarter of the hosts overloaded or with interactive users.
func bigCluster(nh, np int) *Snapshot {
	rng := rand.New(rand.NewPCG(1, 2))
	s := &Snapshot{Classes: DefaultClasses(), Params: DefaultParams()}
	alphas := []float64{0.5, 1, 1, 2, 4}
	for i := 0; i < nh; i++ {
		h := Host{Name: fmt.Sprintf("h%04d", i), Alpha: alphas[rng.IntN(len(alphas))], Load: float64(rng.IntN(3)), MemFree: float64(1024 + rng.IntN(64*1024))}
		if rng.IntN(8) == 0 {
			h.Users = 1
		}
		s.Hosts = append(s.Hosts, h)
	}
	for i := 0; i < np; i++ {
		hi := rng.IntN(nh)
		s.Processes = append(s.Processes, Process{TID: fmt.Sprintf("t%06d", i), Host: s.Hosts[hi].Name,
			Class: 1 + rng.IntN(4), Mem: float64(rng.IntN(4096)), Counter: rng.IntN(7)})
		s.Hosts[hi].Load++
	}
	return s
}

// BenchmarkStep times one check period of the master on clusters of
// growing size; it reports the migrations decided per check.
func BenchmarkStep(b *testing.B) {
	for _, size := range []struct{ hosts, procs int }{{32, 128}, {256, 1024}, {1024, 8192}} {
		s := bigCluster(size.hosts, size.procs)
		b.Run(fmt.Sprintf("hosts=%d/procs=%d", size.hosts, size.procs), func(b *testing.B) {
			moves := 0
			for b.Loop() {
				r, err := Step(s)
				if err != nil {
					b.Fatal(err)
				}
				moves = len(r.Migrations)
			}
			b.ReportMetric(float64(moves), "migrations/check")
		})
	}
}

// BenchmarkPlan times SED's mapping of a greedy job (no maxsize) and of a
// job limited to half the cluster.
func BenchmarkPlan(b *testing.B) {
	for _, hosts := range []int{32, 1024} {
		s := bigCluster(hosts, 0)
		for _, job := range []Job{{}, {MaxSize: hosts / 2}} {
			b.Run(fmt.Sprintf("hosts=%d/maxsize=%d", hosts, job.MaxSize), func(b *testing.B) {
				for b.Loop() {
					if _, err := Plan(s, job); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// settledCluster is an Incremental of nh hosts carrying np processes,
// settled: checks are made and their migrations carried out until a check
// moves nothing, as on a cluster the master has been scheduling a while.
func settledCluster(b *testing.B, nh, np int) *Incremental {
	rng := rand.New(rand.NewPCG(3, 4))
	x, err := NewIncremental(DefaultClasses(), DefaultParams())
	if err != nil {
		b.Fatal(err)
	}
	alphas := []float64{0.5, 1, 1, 2, 4}
	for i := range nh {
		h := Host{Name: fmt.Sprintf("h%04d", i), Alpha: alphas[rng.IntN(len(alphas))], MemFree: float64(64*1024 + rng.IntN(64*1024))}
		if rng.IntN(8) == 0 {
			h.Users = 1
		}
		if err := x.SetHost(h); err != nil {
			b.Fatal(err)
		}
	}
	for i := range np {
		p := Process{TID: fmt.Sprintf("t%06d", i), Host: fmt.Sprintf("h%04d", rng.IntN(nh)), Class: 1 + rng.IntN(4), Mem: float64(rng.IntN(64))}
		if err := x.SetProcess(p); err != nil {
			b.Fatal(err)
		}
	}
	// Settled: no migration for more checks than a counter takes to
	// reach its limit.
	quiet := 0
	for range 500 {
		r := x.Check()
		for _, m := range r.Migrations {
			if err := x.Move(m.TID, m.To); err != nil {
				b.Fatal(err)
			}
		}
		if quiet++; len(r.Migrations) > 0 {
			quiet = 0
		}
		if quiet > 8 {
			return x
		}
	}
	b.Fatalf("cluster of %d hosts and %d processes did not settle", nh, np)
	return nil
}

// BenchmarkCheck times one Dynamic-SED check of the master on a settled
// cluster after k changes (host reports of new free memory, and for one
// change in four a process ended and another placed), full against
// incremental: full applies the changes to a Snapshot and runs Step on it,
// as the master did every δT; incremental applies them to an Incremental
// and runs Check. Neither counts listing the processes.
func BenchmarkCheck(b *testing.B) {
	for _, nh := range []int{1024, 4096} {
		const np = 100000
		x := settledCluster(b, nh, np)
		s := x.Snapshot()
		hi := map[string]int{}
		for i, h := range s.Hosts {
			hi[h.Name] = i
		}
		for _, k := range []int{1, 100} {
			// change applies the i-th round of k changes; one in four
			// also ends a process and places one like it on its host.
			change := func(i int, setHost func(Host), replace func(p Process)) {
				for c := range k {
					h := s.Hosts[(i*k+c*7919)%len(s.Hosts)]
					h.MemFree += float64(64 * (1 - 2*(i%2)))
					setHost(h)
					if c%4 == 0 {
						p := s.Processes[(i*k+c*104729)%len(s.Processes)]
						p.Counter = 0
						replace(p)
					}
				}
			}
			b.Run(fmt.Sprintf("hosts=%d/tasks=%d/changes=%d/full", nh, np, k), func(b *testing.B) {
				f := s.Clone()
				pi := map[string]int{}
				for i, p := range f.Processes {
					pi[p.TID] = i
				}
				i := 0
				for b.Loop() {
					change(i, func(h Host) { f.Hosts[hi[h.Name]] = h }, func(p Process) { f.Processes[pi[p.TID]] = p })
					i++
					if _, err := Step(f); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("hosts=%d/tasks=%d/changes=%d/incremental", nh, np, k), func(b *testing.B) {
				i, visited := 0, 0
				for b.Loop() {
					change(i, func(h Host) {
						if err := x.SetHost(h); err != nil {
							b.Fatal(err)
						}
					}, func(p Process) {
						x.RemoveProcess(p.TID)
						if err := x.SetProcess(p); err != nil {
							b.Fatal(err)
						}
					})
					i++
					visited += len(x.Check().Decisions)
				}
				b.ReportMetric(float64(visited)/float64(b.N), "visited/check")
			})
		}
	}
}
