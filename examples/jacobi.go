package examples

import (
	"fmt"
	"math"

	"github.com/dpvm/dpvm/task"
)

// Jacobi is the jacobi program: Jacobi iteration for Laplace's
// equation on an N×N grid (top edge held at 1, the others at 0), split into
// horizontal strips, one per task. A strip holds rows [Lo, Hi) of the
// interior, with a ghost row above and below, all in exported fields so
// that it can be checkpointed at every iteration and moved. Its flags are
// its tagged fields.
type Jacobi struct {
	Workers int `flag:"workers,strips (tasks)" min:"1"`
	C       task.Comm
	N       int     `flag:"n,grid size" min:"1"`
	MaxIter int     `flag:"iters,at most this many iterations" min:"0"`
	K       int     `flag:"k,check convergence every k iterations" min:"1"`
	Tol     float64 `flag:"tol,convergence threshold"` // stop when no point changes by more
	Lo, Hi  int
	Iter    int
	U       []float64 // (Hi-Lo+2) rows of N+2 points
	Diff    float64   // the largest change in the last iteration
}

func init() {
	task.Register("examples.jacobi", &Jacobi{})
	task.RegisterProgram(task.Program{
		Name:    "jacobi",
		Summary: "Jacobi iteration on a grid in strips: ghost rows, a convergence all-reduce",
		Proto:   &Jacobi{Workers: 4, N: 64, MaxIter: 2000, K: 10, Tol: 1e-6},
	})
}

// Validate checks that no strip is empty.
func (s *Jacobi) Validate() error {
	if s.Workers > s.N {
		return fmt.Errorf("-workers %d: at most -n (%d)", s.Workers, s.N)
	}
	return nil
}

// Run starts the strips (World: once, the root spawning the others as
// its copies), then iterates: every K iterations an all-reduce of the
// largest change decides whether to stop; each iteration swaps ghost rows
// with the neighbours, updates the strip and ends at a safe point. At the
// end rank 0 gathers the grid and prints it summed.
func (s *Jacobi) Run(c *task.Ctx) error {
	if err := c.World(&s.C, s.Workers); err != nil {
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
