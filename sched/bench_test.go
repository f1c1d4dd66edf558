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
