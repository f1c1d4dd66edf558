package npb

import (
	"math"
	"testing"
)

// randlcFloat is the reference double-precision randlc (D. H. Bailey), used
// to check that the integer form is bit-identical.
func randlcFloat(x *float64, a float64) float64 {
	const (
		r23 = 0x1p-23
		t23 = 0x1p23
		r46 = 0x1p-46
		t46 = 0x1p46
	)
	a1 := math.Trunc(r23 * a)
	a2 := a - t23*a1
	x1 := math.Trunc(r23 * *x)
	x2 := *x - t23*x1
	t1 := a1*x2 + a2*x1
	t2 := math.Trunc(r23 * t1)
	z := t1 - t23*t2
	t3 := t23*z + a2*x2
	t4 := math.Trunc(r46 * t3)
	*x = t3 - t46*t4
	return r46 * *x
}

func TestRandlcVectors(t *testing.T) {
	x := Seed
	r1 := Randlc(&x, RandA)
	if r1 != 0.79452191118873827 || x != 55909509111989 {
		t.Fatalf("r1 = %.17g (x %d), want 0.79452191118873827 (x 55909509111989)", r1, x)
	}
	r2 := Randlc(&x, RandA)
	if r2 != 0.86906527387453991 || x != 61155031930969 {
		t.Fatalf("r2 = %.17g (x %d)", r2, x)
	}
	var r float64
	for i := 3; i <= 1000; i++ {
		r = Randlc(&x, RandA)
	}
	if r != 0.56734952833905083 || x != 39923673819009 {
		t.Fatalf("r1000 = %.17g (x %d)", r, x)
	}
	y := make([]float64, 1000000-1000)
	Vranlc(&x, RandA, y)
	if y[len(y)-1] != 0.71689773884874342 || x != 50447193586593 {
		t.Fatalf("r1e6 = %.17g (x %d)", y[len(y)-1], x)
	}
	if got := Skip(Seed, 1000000); got != 50447193586593 {
		t.Fatalf("Skip(seed, 1e6) = %d", got)
	}
}

func TestRandlcEPVectors(t *testing.T) {
	want := []float64{0.46730482219622616, 0.78250263065045544, 0.55573174326598007, 0.66647957953556158, 0.48774607388331503}
	x := SeedEP
	for i, w := range want {
		if r := Randlc(&x, RandA); r != w {
			t.Fatalf("EP r%d = %.17g, want %.17g", i+1, r, w)
		}
	}
	// EP's jump-ahead multiplier: a^(2^17), squared MK+1 = 17 times.
	if an := Pow46(RandA, 1<<17); an != 62362532446209 {
		t.Fatalf("an = %d, want 62362532446209", an)
	}
}

func TestISFirstKeys(t *testing.T) {
	p, _ := ISParamsFor("S")
	keys := make([]int32, 5)
	isKeys(p, 0, keys)
	want := []int32{1585, 825, 1060, 1343, 956}
	for i := range want {
		if keys[i] != want[i] {
			t.Fatalf("IS class S keys %v, want %v", keys, want)
		}
	}
}

func TestRandlcMatchesFloatForm(t *testing.T) {
	for _, seed := range []uint64{Seed, SeedEP} {
		xi, xf := seed, float64(seed)
		for i := range 200000 {
			ri := Randlc(&xi, RandA)
			rf := randlcFloat(&xf, float64(RandA))
			if ri != rf || float64(xi) != xf {
				t.Fatalf("seed %d draw %d: integer %v, float %v", seed, i+1, ri, rf)
			}
		}
	}
	// Jump-ahead with the reference form: binary powering via randlc.
	for _, n := range []uint64{0, 1, 2, 3, 17, 1 << 20, 123456789} {
		t1, t2 := float64(seed1()), float64(RandA)
		for k := n; ; {
			if k&1 == 1 {
				randlcFloat(&t1, t2)
			}
			k >>= 1
			if k == 0 {
				break
			}
			randlcFloat(&t2, t2)
		}
		if got := Skip(seed1(), n); float64(got) != t1 {
			t.Fatalf("Skip(%d) = %d, reference %v", n, got, t1)
		}
	}
}

func seed1() uint64 { return Seed }
