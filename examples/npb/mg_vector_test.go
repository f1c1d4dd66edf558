package npb

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMGRowsBitIdentical checks that the assembly rows of resid, psinv,
// interp and rprj3 give bit for bit what the Go loops give, on random grids of a few sizes
// (odd row lengths exercise the rows' scalar tails).
func TestMGRowsBitIdentical(t *testing.T) {
	if !useAVX {
		t.Skip("no AVX here: the assembly rows do not run, and the Go loops are all there is")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i, n := range []int{2, 3, 4, 5, 7, 8, 13, 32} {
		l := mgLevel{n: n, m1: n + 2, m2: n + 3, m3: n + 2}
		fill := func() []float64 {
			x := make([]float64, l.size())
			for i := range x {
				x[i] = rng.NormFloat64() * math.Exp2(float64(rng.IntN(20)-10))
			}
			return x
		}
		// The smoother of classes S, W and A, then of B and C, by turns.
		class := []string{"A", "B"}[i%2]
		p, err := MGParamsFor(class)
		if err != nil {
			t.Fatal(err)
		}
		w := &MGWorker{a: [4]float64{-8.0 / 3.0, 0, 1.0 / 6.0, 1.0 / 12.0}, c: p.Smoother()}
		w.t1, w.t2 = make([]float64, l.m1), make([]float64, l.m1)
		u, v, r0 := fill(), fill(), fill()
		rGo, rAsm := append([]float64(nil), r0...), append([]float64(nil), r0...)
		w.residScalar(&l, u, v, rGo)
		w.residRows(&l, u, v, rAsm)
		same(t, "resid", n, rGo, rAsm)
		// r may be v.
		vGo, vAsm := append([]float64(nil), v...), append([]float64(nil), v...)
		w.residScalar(&l, u, vGo, vGo)
		w.residRows(&l, u, vAsm, vAsm)
		same(t, "resid in place", n, vGo, vAsm)
		uGo, uAsm := append([]float64(nil), u...), append([]float64(nil), u...)
		w.psinvScalar(&l, r0, uGo)
		w.psinvRows(&l, r0, uAsm)
		same(t, "psinv", n, uGo, uAsm)
		// interp from a coarse level of n interior points to a fine one
		// of 2n.
		c := mgLevel{n: n, m1: n + 2, m2: n + 2, m3: n + 2}
		f := mgLevel{n: 2 * n, m1: 2*n + 2, m2: 2*n + 2, m3: 2*n + 2}
		w.t1, w.t2, w.t3 = make([]float64, c.m1), make([]float64, c.m1), make([]float64, c.m1)
		z := make([]float64, c.size())
		for i := range z {
			z[i] = rng.NormFloat64()
		}
		uf := make([]float64, f.size())
		for i := range uf {
			uf[i] = rng.NormFloat64()
		}
		uGo, uAsm = append([]float64(nil), uf...), append([]float64(nil), uf...)
		w.interpWith(&c, z, &f, uGo, false)
		w.interpWith(&c, z, &f, uAsm, true)
		same(t, "interp", n, uGo, uAsm)
		// rprj3 from the fine level back to the coarse one.
		sGo, sAsm := make([]float64, c.size()), make([]float64, c.size())
		w.t1, w.t2 = make([]float64, f.m1), make([]float64, f.m1)
		w.rprj3Interior(&f, uf, &c, sGo, false)
		w.rprj3Interior(&f, uf, &c, sAsm, true)
		same(t, "rprj3", n, sGo, sAsm)
	}
}

func same(t *testing.T, what string, n int, want, got []float64) {
	t.Helper()
	for i := range want {
		if math.Float64bits(want[i]) != math.Float64bits(got[i]) {
			t.Fatalf("%s n=%d: element %d is %v in assembly, %v in Go", what, n, i, got[i], want[i])
		}
	}
}
