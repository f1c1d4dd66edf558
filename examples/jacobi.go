package examples

import (
	"flag"
	"fmt"
	"math"

	"github.com/dpvm/dpvm/task"
)

// Jacobi is the jacobi program: Jacobi iteration for Laplace's
// equation on an N×N grid (top edge held at 1, the others at 0), split into
// horizontal strips, one per task. A strip holds rows [Lo, Hi) of the
// interior, with a ghost row above and below, all in exported fields so
// that it can be checkpointed at every iteration and moved. The root, the
// strip with Workers set, spawns the others as a communicator.
type Jacobi struct {
	Workers      int // strips in all; the root's only
	C            task.Comm
	N, MaxIter   int
	K            int     // check convergence every K iterations
	Tol          float64 // stop when no point changes by more
	Lo, Hi, Iter int
	U            []float64 // (Hi-Lo+2) rows of N+2 points
	Diff         float64   // the largest change in the last iteration
}

func init() {
	task.Register("examples.jacobi", &Jacobi{})
	task.RegisterProgram(task.Program{
		Name:    "jacobi",
		Summary: "Jacobi iteration on a grid in strips: ghost rows, a convergence all-reduce",
		Setup: func(fs *flag.FlagSet) func([]string) (task.Task, error) {
			n := fs.Int("n", 64, "grid size")
			w := fs.Int("workers", 4, "strips (tasks)")
			it := fs.Int("iters", 2000, "at most this many iterations")
			k := fs.Int("k", 10, "check convergence every k iterations")
			tol := fs.Float64("tol", 1e-6, "convergence threshold")
			return func([]string) (task.Task, error) {
				if *n < 1 || *w < 1 || *w > *n || *it < 0 || *k < 1 {
					return nil, fmt.Errorf("need -n >= 1, 1 <= -workers <= n, -iters >= 0, -k >= 1")
				}
				return &Jacobi{Workers: *w, N: *n, MaxIter: *it, K: *k, Tol: *tol}, nil
			}
		},
	})
}

// Run spawns the other strips once (the root does), joins the
// communicator (a no-op once C is set, as after a move), then iterates:
// every K iterations an all-reduce of the largest change decides whether
// to stop; each iteration swaps ghost rows with the neighbours, updates
// the strip and ends at a safe point. At the end rank 0
// gathers the grid and prints it summed.
func (s *Jacobi) Run(c *task.Ctx) error {
	if s.Workers > 0 && s.C.Size() == 0 {
		proto := *s
		proto.Workers = 0
		if _, err := c.Spawn(&proto, s.Workers-1, task.WithComm(&s.C)); err != nil {
			return err
		}
	}
	if err := c.JoinComm(&s.C); err != nil {
		return err
	}
	r, w, row := s.C.Rank, s.C.Size(), s.N+2
	if s.U == nil {
		s.Lo, s.Hi = r*s.N/w, (r+1)*s.N/w
		s.U = make([]float64, (s.Hi-s.Lo+2)*row)
		if r == 0 {
			for x := range row {
				s.U[x] = 1 // the top edge
			}
		}
	}
	up, down := s.C.Shift(1) // the neighbours' ranks, NoRank at the grid's edges
	last := s.Hi - s.Lo
	for s.Iter < s.MaxIter {
		if s.Iter > 0 && s.Iter%s.K == 0 {
			d := []float64{s.Diff}
			if err := task.AllReduce(c, &s.C, task.Max[float64], d); err != nil {
				return err
			}
			if d[0] <= s.Tol {
				break
			}
		}
		var top, bottom []float64
		if err := s.C.SendRecv(c, up, s.U[row:2*row], down, &bottom); err != nil {
			return err
		}
		if err := s.C.SendRecv(c, down, s.U[last*row:(last+1)*row], up, &top); err != nil {
			return err
		}
		copy(s.U[(last+1)*row:], bottom) // nothing at the edges of the grid
		copy(s.U[:row], top)
		s.U, s.Diff = JacobiStep(s.U, row)
		s.Iter++
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	d := []float64{s.Diff}
	if err := task.AllReduce(c, &s.C, task.Max[float64], d); err != nil {
		return err
	}
	grid, err := task.Gather(c, &s.C, s.U[row:(last+1)*row], 0)
	if err != nil || r != 0 {
		return err
	}
	res := JacobiResult{Iterations: s.Iter, LastChange: d[0], Sum: JacobiSum(grid)}
	c.Printf("jacobi: %d×%d in %d strips, %d iterations, last change %.3g, sum %.17g", s.N, s.N, w, res.Iterations, res.LastChange, res.Sum)
	return c.SetResult(res)
}

// JacobiResult is the jacobi program's result (dpvm run --json prints it).
type JacobiResult struct {
	Iterations int     `msgpack:"iterations"`
	LastChange float64 `msgpack:"last_change"`
	Sum        float64 `msgpack:"sum"`
}

// JacobiStep returns the next iterate of the rows of u (row points each)
// between its first and last, which it copies, and the largest change.
func JacobiStep(u []float64, row int) ([]float64, float64) {
	next, diff := make([]float64, len(u)), 0.0
	copy(next[:row], u[:row])
	copy(next[len(u)-row:], u[len(u)-row:])
	for i := row; i < len(u)-row; i += row {
		for x := i + 1; x < i+row-1; x++ {
			next[x] = 0.25 * (u[x-row] + u[x+row] + u[x-1] + u[x+1])
			diff = max(diff, math.Abs(next[x]-u[x]))
		}
	}
	return next, diff
}

// JacobiSum adds the points up in order.
func JacobiSum(grid []float64) float64 {
	sum := 0.0
	for _, v := range grid {
		sum += v
	}
	return sum
}
