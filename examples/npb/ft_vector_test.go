package npb

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestFTButterfliesBitIdentical checks that stockham with its butterflies
// in assembly gives bit for bit what the Go loops give, forward and
// inverse, for lengths with and without the radix-2 pass and blocks of
// odd and even widths (odd ones exercise the scalar tails).
func TestFTButterfliesBitIdentical(t *testing.T) {
	if !useAVX {
		t.Skip("no AVX here: the assembly butterflies do not run, and the Go loops are all there is")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	w := &FTWorker{roots: map[int][]complex128{}}
	for _, n := range []int{2, 4, 8, 32, 128, 256} {
		for _, b := range []int{1, 3, 16} {
			for _, inv := range []bool{false, true} {
				in := make([]complex128, n*b)
				for i := range in {
					in[i] = complex(rng.NormFloat64(), rng.NormFloat64())
				}
				roots := w.rootsFor(n)
				run := func(vec bool) []complex128 {
					x := append([]complex128(nil), in...)
					y := make([]complex128, n*b)
					return stockham(x, y, n, b, roots, inv, vec)
				}
				want, got := run(false), run(true)
				for i := range want {
					if math.Float64bits(real(want[i])) != math.Float64bits(real(got[i])) ||
						math.Float64bits(imag(want[i])) != math.Float64bits(imag(got[i])) {
						t.Fatalf("n=%d b=%d inverse=%v: element %d is %v in assembly, %v in Go", n, b, inv, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestFTGatherLines checks the four-at-a-time interleaving of lines against
// the element-by-element definition, for block widths with and without a
// remainder, and that scatterLines puts every element back.
func TestFTGatherLines(t *testing.T) {
	const lineStep, stride, n, base = 7, 50, 6, 3
	u := make([]complex128, base+9*lineStep+n*stride)
	for i := range u {
		u[i] = complex(float64(i), -float64(i))
	}
	for _, b := range []int{1, 4, 6, 9} {
		x := make([]complex128, n*b)
		gatherLines(x, u, base, lineStep, stride, n, b)
		for l := range b {
			for e := range n {
				if want := u[base+l*lineStep+e*stride]; x[e*b+l] != want {
					t.Fatalf("b=%d: line %d element %d is %v, want %v", b, l, e, x[e*b+l], want)
				}
			}
		}
		back := make([]complex128, len(u))
		scatterLines(back, x, base, lineStep, stride, n, b)
		for l := range b {
			for e := range n {
				if i := base + l*lineStep + e*stride; back[i] != u[i] {
					t.Fatalf("b=%d: scattered line %d element %d is %v, want %v", b, l, e, back[i], u[i])
				}
			}
		}
	}
}
