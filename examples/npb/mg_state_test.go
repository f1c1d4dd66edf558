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

// sameBits reports the first index where a and b differ bit for bit, or -1.
func sameBits(a, b []float64) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return i
		}
	}
	return -1
}

// mute has a comm's rank and size but refuses to carry messages.
type mute struct{ comm }

func (m mute) send(to, tag int, _ any) error {
	return fmt.Errorf("rank %d: send to rank %d tag %d while restoring", m.rank(), to, tag)
}

func (m mute) recv(from, tag int, _ any) error {
	return fmt.Errorf("rank %d: recv from rank %d tag %d while restoring", m.rank(), from, tag)
}

// mgZran3 runs setup and zran3 (with its comm3 exchange) on np ranks of
// class and returns each rank's worker.
func mgZran3(t *testing.T, class string, np int) []*MGWorker {
	t.Helper()
	ws := make([]*MGWorker, np)
	runRanks(t, "mg", class, np, func(wk worker, cm comm) (*Report, error) {
		w := wk.(*MGWorker)
		ws[cm.rank()] = w
		if err := w.setup(cm); err != nil {
			return nil, err
		}
		return nil, w.zran3(cm)
	})
	return ws
}

// TestMGRebuildV checks that v rebuilt locally from the charges is, element
// by element and ghosts included, the field zran3 and comm3 make, for np =
// 1, 2 and 4, and on a non-distributed level.
func TestMGRebuildV(t *testing.T) {
	for _, class := range []string{"S", "W"} {
		var solo []float64 // np = 1's field, for the non-distributed case
		ghostCharges := 0  // charges seen in ghost planes: the exchange is exercised
		for _, np := range []int{1, 2, 4} {
			ws := mgZran3(t, class, np)
			for r, w := range ws {
				l := w.lv[w.lt]
				if len(w.Charges) != 3*mgCharges {
					t.Fatalf("class %s np %d rank %d: %d charge coordinates", class, np, r, len(w.Charges))
				}
				got := make([]float64, len(w.v))
				fresh := &MGWorker{Charges: w.Charges}
				fresh.rebuildV(&l, got)
				if i := sameBits(got, w.v); i >= 0 {
					t.Fatalf("class %s np %d rank %d: rebuilt v[%d] = %v, zran3 made %v", class, np, r, i, got[i], w.v[i])
				}
				if np > 1 {
					lo, hi := ghostPlanes(&l, w.v)
					for _, x := range append(lo, hi...) {
						if x != 0 {
							ghostCharges++
						}
					}
				}
			}
			if np == 1 {
				solo = ws[0].v
			}
			if np == 4 {
				// The same grid on one plane range, not split: what a
				// replicated level holds.
				l := levelShape(1<<ws[1].lt, np, 1, false)
				got := make([]float64, l.size())
				(&MGWorker{Charges: ws[1].Charges}).rebuildV(&l, got)
				if i := sameBits(got, solo); i >= 0 {
					t.Fatalf("class %s non-distributed: rebuilt v[%d] = %v, zran3 made %v", class, i, got[i], solo[i])
				}
			}
		}
		if ghostCharges == 0 {
			t.Errorf("class %s: no charge fell in a ghost plane, so the rebuild of ghost planes went untested", class)
		}
	}
}

// TestMGRebuildAtSafePoints stops every rank of MG at several safe points,
// checks that the v and r rebuilt from the encoded state are bit for bit
// the ones the run had, and that the resumed run's result is bit-identical
// to an uninterrupted run.
func TestMGRebuildAtSafePoints(t *testing.T) {
	p, _ := MGParamsFor("S")
	for _, np := range []int{1, 2, 4} {
		want := runLocal(t, "mg", "S", np)
		for _, stopAt := range []int{1, 2, p.Nit} {
			t.Run(fmt.Sprintf("np%d/stop%d", np, stopAt), func(t *testing.T) {
				got := runRanks(t, "mg", "S", np, func(wk worker, cm comm) (*Report, error) {
					w := wk.(*MGWorker)
					restored, err := suspendAndRestore(w, cm, stopAt, false)
					if err != nil {
						return nil, err
					}
					rw := restored.(*MGWorker)
					if err := rw.setup(mute{cm}); err != nil { // setup does not communicate
						return nil, err
					}
					if i := sameBits(rw.v, w.v); i >= 0 {
						return nil, fmt.Errorf("rebuilt v[%d] = %v, was %v", i, rw.v[i], w.v[i])
					}
					fr, rr := w.lv[w.lt].r, rw.lv[rw.lt].r
					if i := sameBits(rr, fr); i >= 0 {
						return nil, fmt.Errorf("rebuilt r[%d] = %v, was %v", i, rr[i], fr[i])
					}
					return restored.run(cm, &hooks{now: time.Now})
				})
				if !sameValues(want.Values, got.Values) || got.Verified != Successful {
					t.Fatalf("resumed run: %s %+v, uninterrupted: %+v", got.Verified, got.Values, want.Values)
				}
			})
		}
	}
}

// TestMGStagesResume stops every rank of MG at each safe point of a run
// that takes the safe points inside an iteration that a run on the
// team's task.Comm takes (hooks.stages: after the coarse correction and
// after the smoothing), restores it from its encoded state and checks
// that the resumed run's result is bit-identical to an uninterrupted run.
func TestMGStagesResume(t *testing.T) {
	p, _ := MGParamsFor("S")
	for _, np := range []int{2, 4} {
		want := runLocal(t, "mg", "S", np)
		// zran3's and the warm-up's, then three per iteration.
		stages := map[int]bool{}
		for stopAt := 1; stopAt <= 2+3*p.Nit; stopAt++ {
			got := runRanks(t, "mg", "S", np, func(w worker, cm comm) (*Report, error) {
				restored, err := suspendAndRestore(w, cm, stopAt, true)
				if err != nil {
					return nil, err
				}
				if cm.rank() == 0 {
					stages[restored.(*MGWorker).Stage] = true
				}
				return restored.run(cm, &hooks{now: time.Now, stages: true})
			})
			if !sameValues(want.Values, got.Values) || got.Verified != Successful {
				t.Fatalf("np %d stopped at safe point %d: %s %+v, uninterrupted: %+v", np, stopAt, got.Verified, got.Values, want.Values)
			}
		}
		if !stages[mgInterpolated] || !stages[mgSmoothed] {
			t.Errorf("np %d: stopped in stages %v, want both of an iteration's", np, stages)
		}
	}
}

// mgStateAt returns the encoded state of every rank of a class S MG run
// with np tasks, suspended at its second safe point.
func mgStateAt(t testing.TB, np int) [][]byte {
	t.Helper()
	states := make([][]byte, np)
	runRanks(t, "mg", "S", np, func(w worker, cm comm) (*Report, error) {
		n := 0
		h := &hooks{now: time.Now, safePoint: func() error {
			if n++; n == 2 {
				return task.ErrSuspended
			}
			return nil
		}}
		if _, err := w.run(cm, h); !errors.Is(err, task.ErrSuspended) {
			return nil, fmt.Errorf("run ended with %v, want a suspension", err)
		}
		_, state, err := task.EncodeState(w)
		states[cm.rank()] = state
		return nil, err
	})
	return states
}

// TestMGStateSize checks that a worker's checkpointed state is u, two
// planes and little else: the dense v and r are not in it.
func TestMGStateSize(t *testing.T) {
	const np = 2
	l := levelShape(32, np, 0, true) // class S
	// msgpack spends 9 bytes on a float64 (a marker byte and 8).
	limit := (l.size()+2*l.planeSize())*9 + 2048
	for r, state := range mgStateAt(t, np) {
		if len(state) > limit || len(state) < l.size()*8 {
			t.Errorf("rank %d: state of %d bytes, want between %d (u) and %d (u, two planes and the rest)", r, len(state), l.size()*8, limit)
		}
		t.Logf("rank %d: %d bytes for %d points of u (with v and r it was %d points more)", r, len(state), l.size(), 2*l.size())
	}
}

// TestMGBadState checks that a restored worker with inconsistent state
// gets an error from its run, not a panic.
func TestMGBadState(t *testing.T) {
	good := mgStateAt(t, 1)[0]
	for _, c := range []struct {
		name string
		edit func(w *MGWorker)
	}{
		{"short u", func(w *MGWorker) { w.U = w.U[:len(w.U)-1] }},
		{"no u", func(w *MGWorker) { w.U = nil }},
		{"short lo plane", func(w *MGWorker) { w.RLo = w.RLo[1:] }},
		{"no hi plane", func(w *MGWorker) { w.RHi = nil }},
		{"long hi plane", func(w *MGWorker) { w.RHi = append(w.RHi, 0) }},
		{"charge at 0", func(w *MGWorker) { w.Charges[4] = 0 }},
		{"charge past n", func(w *MGWorker) { w.Charges[59] = 33 }},
		{"negative charge", func(w *MGWorker) { w.Charges[0] = -1 }},
		{"19 charges", func(w *MGWorker) { w.Charges = w.Charges[:57] }},
		{"a partial charge", func(w *MGWorker) { w.Charges = w.Charges[:59] }},
		{"no charges", func(w *MGWorker) { w.Charges = nil }},
		{"warm without charges", func(w *MGWorker) { w.Init = false }},
		{"unknown stage", func(w *MGWorker) { w.Stage = mgSmoothed + 1 }},
		{"negative stage", func(w *MGWorker) { w.Stage = -1 }},
		{"halo messages at an iteration's start", func(w *MGWorker) { w.Halo = 1 }},
		{"halo messages past the stage's", func(w *MGWorker) { w.Stage, w.Halo = mgInterpolated, mgHaloMsgs+1 }},
		{"negative halo messages", func(w *MGWorker) { w.Stage, w.Halo = mgSmoothed, -1 }},
		{"a stage before the warm-up", func(w *MGWorker) { w.Stage, w.Warm = mgInterpolated, false }},
	} {
		t.Run(c.name, func(t *testing.T) {
			x, err := task.New("npb.mg.worker", good)
			if err != nil {
				t.Fatal(err)
			}
			w := x.(*MGWorker)
			c.edit(w)
			rep, err := runNoPanic(w)
			if err == nil || !strings.Contains(err.Error(), "MG state") {
				t.Fatalf("run gave %v, %v; want an MG state error", rep, err)
			}
		})
	}
	// The unedited state resumes and verifies.
	x, err := task.New("npb.mg.worker", good)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := runNoPanic(x.(*MGWorker))
	if err != nil || rep.Verified != Successful {
		t.Fatalf("unedited state: %+v, %v", rep, err)
	}
}

func runNoPanic(w *MGWorker) (rep *Report, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return w.run(soloComm{}, &hooks{now: time.Now})
}

// FuzzMGState decodes arbitrary bytes as an MG worker's state and sets it
// up (class S, one task): bad state must give an error, never a panic.
func FuzzMGState(f *testing.F) {
	good := mgStateAt(f, 1)[0]
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte{0x80})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := task.New("npb.mg.worker", b)
		if err != nil {
			return
		}
		w := x.(*MGWorker)
		w.Class = "S" // the fuzzed part is the rest; a big class would only allocate
		if err := w.setup(soloComm{}); err != nil {
			return
		}
		if len(w.U) != w.lv[w.lt].size() {
			t.Fatalf("setup accepted u of %d points", len(w.U))
		}
	})
}
