package npb

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// TestResumeIdentical stops every rank of a run at a safe point half-way,
// round-trips each worker's state through the task codec (what a
// checkpoint does), resumes the restored workers and checks that the
// result is bit-identical to an uninterrupted run.
func TestResumeIdentical(t *testing.T) {
	for _, k := range Kernels {
		t.Run(k, func(t *testing.T) {
			t.Parallel()
			const np = 2
			want := runLocal(t, k, "S", np)
			got := runInterrupted(t, k, "S", np, 2)
			if !sameValues(want.Values, got.Values) || got.Verified != Successful {
				t.Fatalf("resumed run: %s %+v, uninterrupted: %+v", got.Verified, got.Values, want.Values)
			}
		})
	}
}

// runInterrupted runs kernel with every rank suspended at its stopAt-th
// safe point, restored from its encoded state and run again.
func runInterrupted(t *testing.T, kernel, class string, np, stopAt int) *Report {
	t.Helper()
	return runRanks(t, kernel, class, np, func(w worker, cm comm) (*Report, error) {
		restored, err := suspendAndRestore(w, cm, stopAt, false)
		if err != nil {
			return nil, err
		}
		return restored.run(cm, &hooks{now: time.Now})
	})
}

// suspendAndRestore runs w until its stopAt-th safe point, where it is
// suspended, and returns the worker restored from its encoded state (what
// a checkpoint does), not yet run. stages is hooks.stages.
func suspendAndRestore(w worker, cm comm, stopAt int, stages bool) (worker, error) {
	n := 0
	h := &hooks{now: time.Now, stages: stages, safePoint: func() error {
		if n++; n == stopAt {
			return task.ErrSuspended
		}
		return nil
	}}
	if _, err := w.run(cm, h); !errors.Is(err, task.ErrSuspended) {
		return nil, fmt.Errorf("first run ended with %v, want a suspension", err)
	}
	typ, state, err := task.EncodeState(w)
	if err != nil {
		return nil, err
	}
	restored, err := task.New(typ, state)
	if err != nil {
		return nil, err
	}
	return restored.(worker), nil
}

func sameValues(a, b Values) bool {
	eq := func(x, y *float64) bool {
		return (x == nil) == (y == nil) && (x == nil || math.Float64bits(*x) == math.Float64bits(*y))
	}
	if !eq(a.SX, b.SX) || !eq(a.SY, b.SY) || !eq(a.Zeta, b.Zeta) || !eq(a.Rnm2, b.Rnm2) {
		return false
	}
	if len(a.Checksums) != len(b.Checksums) {
		return false
	}
	for i := range a.Checksums {
		if a.Checksums[i] != b.Checksums[i] {
			return false
		}
	}
	pa, pb := a.PartialVerified, b.PartialVerified
	fa, fb := a.FullVerified, b.FullVerified
	return (pa == nil) == (pb == nil) && (pa == nil || *pa == *pb) &&
		(fa == nil) == (fb == nil) && (fa == nil || *fa == *fb)
}

// TestFTBadState checks that a restored FT worker whose fields about the
// step under way are inconsistent gets an error from its run, not a
// panic.
func TestFTBadState(t *testing.T) {
	var good []byte
	runRanks(t, "ft", "S", 1, func(w worker, cm comm) (*Report, error) {
		restored, err := suspendAndRestore(w, cm, 2, false)
		if err != nil {
			return nil, err
		}
		_, good, err = task.EncodeState(restored)
		return nil, err
	})
	local := 2 * 64 * 64 * 64 // class S: u1's floats
	for _, c := range []struct {
		name string
		edit func(w *FTWorker)
	}{
		{"unknown stage", func(w *FTWorker) { w.Stage = ftSpectrum + 1 }},
		{"negative stage", func(w *FTWorker) { w.Stage = -1 }},
		{"inverse without u1", func(w *FTWorker) { w.Stage = ftInverse }},
		{"summed with a short u1", func(w *FTWorker) { w.Stage, w.Lines = ftSummed, make([]float64, local-2) }},
		{"u1 between steps", func(w *FTWorker) { w.Lines = make([]float64, local) }},
		{"a set-up's spectrum after the set-up", func(w *FTWorker) { w.Stage = ftSpectrum }},
	} {
		t.Run(c.name, func(t *testing.T) {
			x, err := task.New("npb.ft.worker", good)
			if err != nil {
				t.Fatal(err)
			}
			w := x.(*FTWorker)
			c.edit(w)
			rep, err := runFTNoPanic(w)
			if err == nil || !strings.Contains(err.Error(), "FT state") {
				t.Fatalf("run gave %v, %v; want an FT state error", rep, err)
			}
		})
	}
	// The unedited state resumes and verifies.
	x, err := task.New("npb.ft.worker", good)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := runFTNoPanic(x.(*FTWorker)); err != nil || rep.Verified != Successful {
		t.Fatalf("unedited state: %+v, %v", rep, err)
	}
}

func runFTNoPanic(w *FTWorker) (rep *Report, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return w.run(soloComm{}, &hooks{now: time.Now})
}
