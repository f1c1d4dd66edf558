package examples_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

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

// mpi4pyPython returns a Python interpreter that has mpi4py and numpy
// ($DPVM_PYTHON, python3 on the path, or the system's /usr/bin/python3),
// and mpiexec, or skips the test when there is none.
func mpi4pyPython(t *testing.T) (python, mpiexec string) {
	t.Helper()
	mpiexec, err := exec.LookPath("mpiexec")
	if err != nil {
		t.Skip("no mpiexec: install python3-mpi4py")
	}
	for _, p := range []string{os.Getenv("DPVM_PYTHON"), "python3", "/usr/bin/python3"} {
		if p != "" && exec.Command(p, "-c", "import mpi4py, numpy").Run() == nil {
			return p, mpiexec
		}
	}
	t.Skip("no Python with mpi4py and numpy: install python3-mpi4py")
	return "", ""
}

// TestJacobi2DMPI4PyTwin runs examples/jacobi2d.py, the jacobi2d program's
// mpi4py twin, on 1 to 6 processes: it prints what the Go program prints,
// to the last bit.
func TestJacobi2DMPI4PyTwin(t *testing.T) {
	python, mpiexec := mpi4pyPython(t)
	for _, c := range []struct{ n, p, d0, d1, iters, k int }{
		{8, 1, 1, 1, 50, 5}, {17, 3, 3, 1, 300, 7}, {30, 4, 2, 2, 5000, 10}, {13, 6, 3, 2, 200, 3},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, mpiexec, "-n", fmt.Sprint(c.p), python, "../../examples/jacobi2d.py",
			"-n", fmt.Sprint(c.n), "-iters", fmt.Sprint(c.iters), "-k", fmt.Sprint(c.k), "-tol", "1e-4")
		// Open MPI's: run as root in a container, more processes than cores.
		cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_rmaps_base_oversubscribe=1")
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("mpiexec -n %d jacobi2d.py: %v\n%s", c.p, err, out)
		}
		if want := jacobi2DWant(c.n, c.d0, c.d1, c.iters, c.k, 1e-4); string(out) != want {
			t.Errorf("jacobi2d.py %+v:\n%q, want (serial, and jacobi2d.go)\n%q", c, out, want)
		}
	}
}

// TestJacobi2DLineCountsInREADME counts the lines of code (neither blank
// nor comment) of jacobi2d.go and of its mpi4py twin, which must be what
// task/README.md says they are, as must its word on which is the shorter.
func TestJacobi2DLineCountsInREADME(t *testing.T) {
	goLines := codeLines(t, "../../examples/jacobi2d.go", "//")
	pyLines := codeLines(t, "../../examples/jacobi2d.py", "#")
	readme, err := os.ReadFile("../../task/README.md")
	if err != nil {
		t.Fatal(err)
	}
	said := regexp.MustCompile(`it\s+is\s+(shorter|longer):\s+jacobi2d\.go\s+is\s+(\d+)\s+lines\s+of\s+code,\s+jacobi2d\.py\s+(\d+)`).FindSubmatch(readme)
	if said == nil {
		t.Fatal("task/README.md does not say whether jacobi2d.py is shorter or longer than jacobi2d.go and how many lines of code each is")
	}
	if string(said[2]) != fmt.Sprint(goLines) || string(said[3]) != fmt.Sprint(pyLines) {
		t.Errorf("task/README.md says jacobi2d.go is %s lines of code and jacobi2d.py %s; they are %d and %d", said[2], said[3], goLines, pyLines)
	}
	if shorter := pyLines < goLines; shorter != (string(said[1]) == "shorter") {
		t.Errorf("task/README.md says jacobi2d.py is %s than jacobi2d.go; it is %d lines of code against %d", said[1], pyLines, goLines)
	}
}

// codeLines counts the lines of a source file that are neither blank nor
// comments (lines starting with comment, after indentation).
func codeLines(t *testing.T, path, comment string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, comment) {
			n++
		}
	}
	return n
}
