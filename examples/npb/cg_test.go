package npb

import (
	"math"
	"math/rand/v2"
	"testing"
)

// randomCSR builds a matrix of nrows rows over ncol columns whose rows
// have 0 to maxRow entries (so every length modulo the assembly's unroll
// of four occurs), with values of both signs including zeros.
func randomCSR(t *testing.T, rng *rand.Rand, nrows, ncol, maxRow int) *csr {
	t.Helper()
	rowstr := make([]int32, nrows+1)
	var colidx []int32
	var a []float64
	for j := range nrows {
		for range rng.IntN(maxRow + 1) {
			colidx = append(colidx, int32(rng.IntN(ncol)))
			v := rng.NormFloat64() * math.Exp2(float64(rng.IntN(40)-20))
			if rng.IntN(16) == 0 {
				v = math.Copysign(0, v)
			}
			a = append(a, v)
		}
		rowstr[j+1] = int32(len(colidx))
	}
	m, err := newCSR(rowstr, colidx, a, ncol)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCGSpmvBitIdentical checks spmv (the assembly where there is one)
// against spmvGo bit for bit, on random matrices and on class S's.
func TestCGSpmvBitIdentical(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	mats := []*csr{}
	for range 20 {
		mats = append(mats, randomCSR(t, rng, 1+rng.IntN(200), 1+rng.IntN(500), 1+rng.IntN(40)))
	}
	p, err := CGParamsFor("S")
	if err != nil {
		t.Fatal(err)
	}
	mats = append(mats, cgMakeA(p, 0, p.NA), cgMakeA(p, p.NA/3, p.NA/2))
	for i, m := range mats {
		nrows := len(m.rowstr) - 1
		x := make([]float64, m.ncol)
		for k := range x {
			x[k] = rng.NormFloat64()
		}
		got, want := make([]float64, nrows), make([]float64, nrows)
		m.spmv(got, x)
		m.spmvGo(want, x)
		for j := range want {
			if math.Float64bits(got[j]) != math.Float64bits(want[j]) {
				t.Fatalf("matrix %d row %d: spmv %v, spmvGo %v", i, j, got[j], want[j])
			}
		}
	}
}

// TestNewCSRRejects checks that a matrix whose columns or row starts could
// send cgSpmv outside its slices is refused.
func TestNewCSRRejects(t *testing.T) {
	cases := []struct {
		name   string
		rowstr []int32
		colidx []int32
		a      []float64
	}{
		{"no rows", nil, nil, nil},
		{"first row starts late", []int32{1, 2}, []int32{0, 1}, []float64{1, 2}},
		{"last row ends early", []int32{0, 1}, []int32{0, 1}, []float64{1, 2}},
		{"values missing", []int32{0, 2}, []int32{0, 1}, []float64{1}},
		{"rows fall", []int32{0, 2, 1, 2}, []int32{0, 1}, []float64{1, 2}},
		{"column too large", []int32{0, 2}, []int32{0, 4}, []float64{1, 2}},
		{"column negative", []int32{0, 2}, []int32{-1, 0}, []float64{1, 2}},
	}
	for _, c := range cases {
		if _, err := newCSR(c.rowstr, c.colidx, c.a, 4); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
	if _, err := newCSR([]int32{0, 0, 2}, []int32{0, 3}, []float64{1, 2}, 4); err != nil {
		t.Errorf("a valid matrix with an empty row: %v", err)
	}
}

// BenchmarkCGSpmv times one class A product over all rows, the assembly
// (where there is one) against the Go loop.
func BenchmarkCGSpmv(b *testing.B) {
	p, err := CGParamsFor("A")
	if err != nil {
		b.Fatal(err)
	}
	m := cgMakeA(p, 0, p.NA)
	x := make([]float64, p.NA)
	for i := range x {
		x[i] = 1 + float64(i%7)/7
	}
	y := make([]float64, p.NA)
	b.Run("spmv", func(b *testing.B) {
		for b.Loop() {
			m.spmv(y, x)
		}
	})
	b.Run("go", func(b *testing.B) {
		for b.Loop() {
			m.spmvGo(y, x)
		}
	})
}
