package grid

import (
	"math"
	"slices"
	"testing"
)

// block returns a block of the rows [y0, y0+rows) and columns [x0,
// x0+cols) of an n0×n1 array, its points numbered from 1 in Data order.
func block(n0, n1, y0, x0, rows, cols int) *Block {
	b := &Block{N0: n0, N1: n1, Y0: y0, X0: x0, Rows: rows, Cols: cols, Data: make([]float64, (rows+2)*(cols+2))}
	for i := range b.Data {
		b.Data[i] = float64(i + 1)
	}
	return b
}

// TestInterior: the interior's indices, row by row, none of the ghost
// ring's.
func TestInterior(t *testing.T) {
	b := block(9, 9, 0, 0, 2, 3)
	if got, want := slices.Collect(b.Interior()), []int{6, 7, 8, 11, 12, 13}; !slices.Equal(got, want) {
		t.Errorf("Interior() = %v, want %v", got, want)
	}
	for i := range b.Interior() {
		if i == 7 {
			break // stopping early is allowed
		}
	}
}

// TestEdges: the sides of the interior that StartHalo sends, and the
// ghost points FinishHalo fills, on a 2×3 block (stride 5).
func TestEdges(t *testing.T) {
	b := block(9, 9, 0, 0, 2, 3)
	points := func(from, step, n int) []int {
		var out []int
		for k := range n {
			out = append(out, from+k*step)
		}
		return out
	}
	for _, c := range []struct {
		side        Side
		inner, ring []int
	}{
		{Top, []int{6, 7, 8}, []int{1, 2, 3}},
		{Bottom, []int{11, 12, 13}, []int{16, 17, 18}},
		{Left, []int{6, 11}, []int{5, 10}},
		{Right, []int{8, 13}, []int{9, 14}},
	} {
		if got := points(b.edge(c.side, false)); !slices.Equal(got, c.inner) {
			t.Errorf("%v side of the interior: %v, want %v", c.side, got, c.inner)
		}
		if got := points(b.edge(c.side, true)); !slices.Equal(got, c.ring) {
			t.Errorf("%v ghost points: %v, want %v", c.side, got, c.ring)
		}
	}
}

// TestFillBoundary: a side on the array's edge gets the value along its
// whole ghost row or column; a side with a neighbour keeps its points.
func TestFillBoundary(t *testing.T) {
	corner := block(4, 6, 0, 3, 2, 3) // top right of a 4×6 array
	for _, s := range []Side{Top, Bottom, Left, Right} {
		corner.FillBoundary(s, -float64(s)-1)
	}
	want := []float64{ // Right after Top: its corner is Right's
		-1, -1, -1, -1, -4,
		6, 7, 8, 9, -4,
		11, 12, 13, 14, -4,
		16, 17, 18, 19, -4,
	}
	if !slices.Equal(corner.Data, want) {
		t.Errorf("top right block:\n%v, want\n%v", corner.Data, want)
	}
	inner := block(9, 9, 3, 3, 2, 3)
	for _, s := range []Side{Top, Bottom, Left, Right} {
		inner.FillBoundary(s, 0)
	}
	if !slices.Equal(inner.Data, block(9, 9, 3, 3, 2, 3).Data) {
		t.Errorf("an inner block changed: %v", inner.Data)
	}
	whole := block(2, 2, 0, 0, 2, 2)
	whole.FillBoundary(Bottom, 0)
	whole.FillBoundary(Left, 0)
	if want := []float64{0, 2, 3, 4, 0, 6, 7, 8, 0, 10, 11, 12, 0, 0, 0, 0}; !slices.Equal(whole.Data, want) {
		t.Errorf("a block of the whole array: %v, want %v", whole.Data, want)
	}
}

// TestSweep: every interior point from the old values, the ghost ring
// copied, the largest change returned, the old slice untouched.
func TestSweep(t *testing.T) {
	b := block(9, 9, 0, 0, 2, 3)
	old := b.Data
	before := slices.Clone(old)
	change := b.Sweep(func(u []float64, i, w int) float64 { return 0.25 * (u[i-w] + u[i+w] + u[i-1] + u[i+1]) })
	want := slices.Clone(before)
	best := 0.0
	for _, i := range []int{6, 7, 8, 11, 12, 13} {
		want[i] = 0.25 * (before[i-5] + before[i+5] + before[i-1] + before[i+1])
		best = max(best, math.Abs(want[i]-before[i]))
	}
	if !slices.Equal(b.Data, want) || change != best {
		t.Errorf("Sweep: %v, change %g; want %v, %g", b.Data, change, want, best)
	}
	if !slices.Equal(old, before) {
		t.Error("Sweep wrote to the old points")
	}
}

// TestSpan: the parts cover 0..n in order, sizes differing by 1 at most.
func TestSpan(t *testing.T) {
	for n := 1; n < 20; n++ {
		for parts := 1; parts <= n; parts++ {
			at := 0
			for i := range parts {
				lo, hi := span(n, parts, i)
				if lo != at || hi-lo < n/parts || hi-lo > n/parts+1 {
					t.Fatalf("span(%d, %d, %d) = %d, %d", n, parts, i, lo, hi)
				}
				at = hi
			}
			if at != n {
				t.Fatalf("span(%d, %d, …) ends at %d", n, parts, at)
			}
		}
	}
}
