package examples_test

import (
	"fmt"
	"testing"

	"github.com/dpvm/dpvm/examples"
)

// jacobi2DWant is the line the jacobi2d program prints on a grid of
// d0×d1 blocks, computed by the jacobi program's serial loop: the blocks'
// run must match it to the last bit.
func jacobi2DWant(n, d0, d1, iters, k int, tol float64) string {
	it, diff, sum := examples.JacobiSerial(n, iters, k, tol)
	return fmt.Sprintf("jacobi2d: %d×%d on %d×%d blocks, %d iterations, last change %.3g, sum %.17g\n", n, n, d0, d1, it, diff, sum)
}

// TestJacobi2D: 1 to 6 blocks (grids of 1×1, 2×1, 3×1, 2×2, 5×1, 3×2),
// converging early or not, give the serial loop's result.
func TestJacobi2D(t *testing.T) {
	for _, c := range []struct{ n, p, d0, d1, iters, k int }{
		{8, 1, 1, 1, 50, 5}, {9, 2, 2, 1, 60, 4}, {17, 3, 3, 1, 300, 7}, {30, 4, 2, 2, 5000, 10}, {5, 5, 5, 1, 40, 1}, {13, 6, 3, 2, 200, 3},
	} {
		out := runProgram(t, "jacobi2d", "-n", fmt.Sprint(c.n), "-tasks", fmt.Sprint(c.p),
			"-iters", fmt.Sprint(c.iters), "-k", fmt.Sprint(c.k), "-tol", "1e-4")
		if want := jacobi2DWant(c.n, c.d0, c.d1, c.iters, c.k, 1e-4); out != want {
			t.Errorf("jacobi2d %+v:\n%q, want (serial)\n%q", c, out, want)
		}
	}
}

// TestJacobi2DUnderMigration moves the blocks among three hosts while they
// run, waiting in their halo exchanges with requests outstanding: the
// result is still bit-identical to the serial loop.
func TestJacobi2DUnderMigration(t *testing.T) {
	out, made := runMoving(t, 7, "jacobi2d", "-n", "32", "-tasks", "4", "-iters", "1500", "-k", "10", "-tol", "0")
	if want := jacobi2DWant(32, 2, 2, 1500, 10, 0); out != want {
		t.Errorf("jacobi2d under migration:\n%q, want (serial)\n%q", out, want)
	}
	t.Logf("%d moves", made)
	if made == 0 {
		t.Error("no block was moved while it ran")
	}
}
