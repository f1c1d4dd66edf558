package npb

import (
	"errors"
	"testing"
	"time"
)

// TestCGSetupReachesSafePoints: a CG worker building its matrix reaches a
// set-up safe point (hooks.setupPoint) every cgTickRows rows of each of
// the matrix's two passes over the outer products, counted in rows, not
// timed, before it waits for its peers (hooks.ready): a job checkpoint
// asked for during the set-up pauses the worker within cgTickRows rows
// of work instead of waiting for the whole set-up. The end-to-end check,
// under the master's wall-clock pause budget, is integration's
// TestNPBFirstCheckpointOfProcesses.
func TestCGSetupReachesSafePoints(t *testing.T) {
	errReady := errors.New("set-up done")
	for _, class := range []string{"S", "W"} {
		p, err := CGParamsFor(class)
		if err != nil {
			t.Fatal(err)
		}
		ticks := 0
		h := &hooks{now: time.Now,
			setupPoint: func() error { ticks++; return nil },
			ready:      func() error { return errReady },
		}
		w := &CGWorker{Place: Place{Class: class, NP: 1}}
		if _, err := w.run(soloComm{}, h); !errors.Is(err, errReady) {
			t.Fatalf("class %s: the set-up ended with %v, want the wait for the peers", class, err)
		}
		if want := 2 * ((p.NA + cgTickRows - 1) / cgTickRows); ticks != want {
			t.Errorf("class %s (%d rows): %d set-up safe points, want %d (one every %d rows of each pass)", class, p.NA, ticks, want, cgTickRows)
		}
	}
}
