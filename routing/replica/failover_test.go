package replica

import (
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"
)

var failoverSeeds = flag.Int("failover-seeds", 5, "TestFailover: seeded histories per group size (2 with -short or -race)")

// TestFailover measures, in virtual time, how long a group takes from
// its leader's death to a new leader that has committed an entry of its
// term (EffLeading), over seeded histories of 3 and 5 replicas with the
// default Config, clients proposing throughout, messages delayed 1-10 ms
// and reordered. Each failover must be within Config.FailoverBound for
// the terms its election took; an uncontested one (one term) is within
// 2 s. -v prints the distribution.
func TestFailover(t *testing.T) {
	seeds := *failoverSeeds
	if testing.Short() || raceEnabled {
		seeds = 2
	}
	const maxDelay = 10 * time.Millisecond
	var cfg Config
	cfg, _ = Config{ID: 1, Peers: []uint64{1}}.WithDefaults()
	bound := cfg.FailoverBound(maxDelay)
	if bound > 2*time.Second {
		t.Fatalf("the default Config's failover bound is %v, over the 2 s target", bound)
	}
	for _, n := range []int{3, 5} {
		var all []failover
		for seed := range uint64(seeds) {
			s := newSim(t, 1000+seed, simConfig{
				n: n, minDelay: time.Millisecond, maxDelay: maxDelay,
				kills: 5, measure: true,
				down:     [2]time.Duration{2 * time.Second, 4 * time.Second},
				duration: 45 * time.Second, clients: 2,
			})
			s.run()
			if len(s.failovers) < 3 {
				t.Errorf("n=%d seed %d: %d failovers measured, want 3 at least", n, seed, len(s.failovers))
			}
			for _, f := range s.failovers {
				if f.rounds == 0 || f.took > time.Duration(f.rounds)*bound {
					t.Errorf("n=%d seed %d: failover took %v in %d terms, over %d × %v", n, seed, f.took, f.rounds, f.rounds, bound)
				}
			}
			all = append(all, s.failovers...)
		}
		t.Logf("%d replicas: %s (bound %v a term)", n, describe(all), bound)
	}
}

// describe summarises failovers: how many, the share in one term, and
// the quantiles of the time they took.
func describe(fs []failover) string {
	if len(fs) == 0 {
		return "none"
	}
	took := make([]time.Duration, len(fs))
	one := 0
	var oneMax time.Duration
	for i, f := range fs {
		took[i] = f.took
		if f.rounds == 1 {
			one++
			oneMax = max(oneMax, f.took)
		}
	}
	slices.Sort(took)
	q := func(p float64) time.Duration {
		return took[int(p*float64(len(took)-1)+0.5)].Round(10 * time.Millisecond)
	}
	return fmt.Sprintf("%d failovers, %d in one term (max %v); min %v, median %v, p90 %v, max %v",
		len(fs), one, oneMax.Round(10*time.Millisecond), q(0), q(0.5), q(0.9), q(1))
}
