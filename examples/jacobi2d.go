package examples

import (
	"github.com/dpvm/dpvm/task"
	"github.com/dpvm/dpvm/task/grid"
)

// Jacobi2D is the jacobi2d program: the jacobi program's iteration (an
// N×N grid, top edge held at 1, the others at 0) in blocks on a 2-D
// Cartesian communicator, each block exchanging its edges with its four
// neighbours by a non-blocking halo exchange. Its flags are its tagged
// fields; all its state is in its fields, so that a block can be
// checkpointed and moved.
type Jacobi2D struct {
	Tasks   int        `flag:"tasks,blocks (tasks)" min:"1"`
	N       int        `flag:"n,grid size" min:"1"`
	MaxIter int        `flag:"iters,at most this many iterations" min:"0"`
	K       int        `flag:"k,check convergence every k iterations" min:"1"`
	Tol     float64    `flag:"tol,convergence threshold"`
	C       task.Comm  // the team
	U       grid.Block // this task's block, with a ghost ring
	Iter    int
	Diff    float64 // the largest change in the last iteration
}

func init() {
	task.RegisterProgram(task.Program{Name: "jacobi2d", Proto: &Jacobi2D{Tasks: 4, N: 64, MaxIter: 2000, K: 10, Tol: 1e-6},
		Summary: "Jacobi iteration in blocks on a 2-D Cartesian communicator, non-blocking halo exchange"})
}

// Run starts the team and lays the grid out in blocks (both return at
// once when Run re-enters after a move), then iterates as the jacobi
// program does, each iteration ending at a safe point, every wait a safe
// point too; at the end rank 0 gathers the grid and prints its sum.
func (s *Jacobi2D) Run(c *task.Ctx) error {
	if err := c.World(&s.C, s.Tasks); err != nil {
		return err
	}
	if err := s.U.Create(c, &s.C, s.N, s.N); err != nil {
		return err
	}
	s.U.FillBoundary(grid.Top, 1)
	d := []float64{0}
	for {
		if s.Iter == s.MaxIter || s.Iter > 0 && s.Iter%s.K == 0 {
			d[0] = s.Diff
			if err := task.AllReduce(c, &s.U.G, task.Max[float64], d); err != nil {
				return err
			}
			if s.Iter == s.MaxIter || d[0] <= s.Tol {
				break
			}
		}
		if err := s.U.StartHalo(c); err != nil {
			return err
		}
		if err := s.U.FinishHalo(c); err != nil {
			return err
		}
		s.Diff = s.U.Sweep(func(u []float64, i, w int) float64 {
			return 0.25 * (u[i-w] + u[i+w] + u[i-1] + u[i+1])
		})
		s.Iter++
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	all, err := s.U.Gather(c, 0)
	if err != nil || s.U.G.Rank != 0 {
		return err
	}
	sum := 0.0
	for _, v := range all {
		sum += v
	}
	c.Printf("jacobi2d: %d×%d on %d×%d blocks, %d iterations, last change %.3g, sum %.17g", s.N, s.N, s.U.G.Dims[0], s.U.G.Dims[1], s.Iter, d[0], sum)
	return nil
}
