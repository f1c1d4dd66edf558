package daemon

import (
	"flag"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

var (
	simSeeds = flag.Int("seeds", 8, "how many seeds TestSim runs (go test ./daemon -run TestSim -seeds 500)")
	simFirst = flag.Int("first-seed", 0, "the first seed TestSim runs (to replay one: -first-seed N -seeds 1)")
)

// simRegressions are seeds that once broke an invariant or did not end;
// TestSimRegressions runs them every time.
//
//   - 141: while an aborted move's resume was stalled, a sender resent its
//     whole queue for the task to the origin on every stale refusal, and on
//     the virtual clock that burst never yielded (routing.Outbox.Refused
//     now resends once per route and leaves the rest to the RTO).
var simRegressions = []int{141}

// simStats adds up what the simulation's seeds did: moves and the faults
// injected.
type simStats struct {
	seeds                                int
	moves, aborts                        int
	dropped, held, delayed, stalled, cut int64
}

func (s *simStats) String() string {
	return fmt.Sprintf("%d seeds: %d moves committed, %d failed or aborted; faults: %d frames dropped, %d swapped, %d units delayed, %d stalled, %d connections cut",
		s.seeds, s.moves, s.aborts, s.dropped, s.held, s.delayed, s.stalled, s.cut)
}

// TestSim runs real daemons — the same drivers and move machine as over
// QUIC — on transport.Mem inside a synctest bubble, so that every timeout
// runs on a virtual clock, under faults derived from the seed: frames
// lost, delayed and swapped, connections broken, and units stalled for
// 50–450 ms (a host frozen past the move's step timeouts of 100–200 ms, so
// that steps time out at the master while the host still does them
// later). Movers on three hosts are moved among four, directly and through
// the shared directory, while senders on other hosts stream numbers to
// them. After every move that ended, each moved task runs on exactly one
// host, is suspended on none, and no daemon's route epoch for it went
// back; at the end every mover got every number once, in order.
//
// The faults a seed injects depend only on the seed and each unit's place
// in the traffic; the goroutines' interleaving is the runtime's. Run many
// seeds with -seeds N, one again with -first-seed N -seeds 1. Seeds that
// once broke an invariant or did not end are in simRegressions.
func TestSim(t *testing.T) {
	start := time.Now()
	var st simStats
	for seed := *simFirst; seed < *simFirst+*simSeeds; seed++ {
		simSeed(t, seed, &st)
	}
	t.Logf("%v; %v", &st, time.Since(start).Round(time.Millisecond))
}

// TestSimRegressions runs the seeds of simRegressions.
func TestSimRegressions(t *testing.T) {
	var st simStats
	for _, seed := range simRegressions {
		simSeed(t, seed, &st)
	}
	t.Log(&st)
}

// simSeed runs the simulation of one seed as a subtest named by the seed
// and adds what it did to st.
func simSeed(t *testing.T, seed int, st *simStats) {
	t.Run(fmt.Sprint(seed), func(t *testing.T) {
		dir := t.TempDir()
		synctest.Test(t, func(t *testing.T) {
			f := &faults{seed: uint64(seed), drop: 100, hold: 100, delay: 300, cut: 1000, stall: 300}
			vm := startMemVM(t, 4, f, Config{SharedDir: dir,
				MoveTimeout: 100 * time.Millisecond, MoveStepTimeout: 100 * time.Millisecond, MoveTransferTimeout: 200 * time.Millisecond})
			f.stalling.Store(true)
			c, a := migrateUnderTraffic(t, vm, uint64(seed), 3, 400, 12)
			st.seeds++
			st.moves += c
			st.aborts += a
			st.dropped += f.dropped.Load()
			st.held += f.held.Load()
			st.delayed += f.delayed.Load()
			st.stalled += f.stalls.Load()
			st.cut += f.cuts.Load()
		})
	})
}
