package examples

import (
	"flag"
	"fmt"
	"math"

	"github.com/dpvm/dpvm/task"
)

// Jacobi2D is the jacobi2d program: the jacobi program's iteration (an
// N×N grid, top edge held at 1, the others at 0) in blocks on a 2-D
// Cartesian communicator, each block exchanging its edges with its four
// neighbours by non-blocking sends and receives. A block holds the
// interior's rows and columns its rank has on the grid (blockOf) with a
// ghost ring, in exported fields, so that it can be checkpointed and
// moved.
type Jacobi2D struct {
	Tasks         int       // blocks in all; the root's only
	C, G          task.Comm // the team; its Cartesian grid
	N, MaxIter, K int
	Tol           float64
	Iter          int
	U             []float64 // the block's rows, a ghost ring around (blockOf)
	Diff          float64   // the largest change in the last iteration
}

func init() {
	task.Register("examples.jacobi2d", &Jacobi2D{})
	task.RegisterProgram(task.Program{
		Name:    "jacobi2d",
		Summary: "Jacobi iteration in blocks on a 2-D Cartesian communicator, non-blocking halo exchange",
		Setup: func(fs *flag.FlagSet) func([]string) (task.Task, error) {
			n := fs.Int("n", 64, "grid size")
			p := fs.Int("tasks", 4, "blocks (tasks)")
			it := fs.Int("iters", 2000, "at most this many iterations")
			k := fs.Int("k", 10, "check convergence every k iterations")
			tol := fs.Float64("tol", 1e-6, "convergence threshold")
			return func([]string) (task.Task, error) {
				if *n < 1 || *p < 1 || *p > *n || *it < 0 || *k < 1 {
					return nil, fmt.Errorf("need -n >= 1, 1 <= -tasks <= n, -iters >= 0, -k >= 1")
				}
				return &Jacobi2D{Tasks: *p, N: *n, MaxIter: *it, K: *k, Tol: *tol}, nil
			}
		},
	})
}

// Halo tags: the edge a block sends, as its neighbour receives it.
const (
	tagTopRow = iota
	tagBottomRow
	tagLeftCol
	tagRightCol
)

// Run sets up once (the root spawns the team; every block lays the team
// out as a grid and takes its block), then iterates as the jacobi program
// does, every wait a safe point; at the end rank 0 gathers the blocks and
// prints the grid's sum.
func (s *Jacobi2D) Run(c *task.Ctx) error {
	if s.Tasks > 0 && s.C.Size() == 0 {
		proto := *s
		proto.Tasks = 0
		if _, err := c.Spawn(&proto, s.Tasks-1, task.WithComm(&s.C)); err != nil {
			return err
		}
	}
	if err := c.JoinComm(&s.C); err != nil {
		return err
	}
	if s.G.Size() == 0 {
		dims, err := task.DimsCreate(s.C.Size(), 2)
		if err != nil {
			return err
		}
		if err := s.C.CartCreate(c, dims, []bool{false, false}, &s.G); err != nil {
			return err
		}
	}
	g := &s.G
	r0, r1, c0, c1 := blockOf(g, g.Rank, s.N)
	rows, w := r1-r0, c1-c0+2
	if s.U == nil {
		s.U = make([]float64, (rows+2)*w)
		if r0 == 0 {
			for x := range w {
				s.U[x] = 1 // the top edge
			}
		}
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	up, down := g.CartShift(0, 1) // NoRank past the grid's edges
	left, right := g.CartShift(1, 1)
	// Each edge as its neighbour gets it: the points at from, from+step,
	// … go into the neighbour's ghost points at to, to+step, ….
	edges := []struct{ peer, sendTag, recvTag, from, to, step, n int }{
		{up, tagTopRow, tagBottomRow, w + 1, 1, 1, w - 2},
		{down, tagBottomRow, tagTopRow, rows*w + 1, (rows+1)*w + 1, 1, w - 2},
		{left, tagLeftCol, tagRightCol, w + 1, w, w, rows},
		{right, tagRightCol, tagLeftCol, 2*w - 2, 2*w - 1, w, rows},
	}
	d := make([]float64, 1)
	for {
		if s.Iter == s.MaxIter || s.Iter > 0 && s.Iter%s.K == 0 {
			d[0] = s.Diff
			if err := task.AllReduce(c, g, task.Max[float64], d); err != nil {
				return err
			}
			if s.Iter == s.MaxIter || d[0] <= s.Tol {
				break
			}
		}
		var reqs []task.Request
		ghosts := make([][]float64, len(edges))
		for i, e := range edges {
			if e.peer == task.NoRank {
				continue
			}
			edge := make([]float64, e.n)
			for k := range edge {
				edge[k] = s.U[e.from+k*e.step]
			}
			rr, err := g.Irecv(c, e.peer, e.recvTag, &ghosts[i])
			if err != nil {
				return err
			}
			sr, err := g.Isend(c, e.peer, e.sendTag, edge)
			if err != nil {
				return err
			}
			reqs = append(reqs, rr, sr)
		}
		if err := g.Waitall(c, reqs...); err != nil {
			return err
		}
		for i, e := range edges {
			for k, v := range ghosts[i] { // none at the grid's edges
				s.U[e.to+k*e.step] = v
			}
		}
		s.U, s.Diff = jacobi2DStep(s.U, w)
		s.Iter++
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	inner := make([]float64, 0, rows*(w-2))
	for y := 1; y <= rows; y++ {
		inner = append(inner, s.U[y*w+1:(y+1)*w-1]...)
	}
	blocks, err := task.Gatherv(c, g, inner, 0)
	if err != nil || g.Rank != 0 {
		return err
	}
	grid := make([]float64, s.N*s.N)
	for r, b := range blocks {
		r0, r1, c0, c1 := blockOf(g, r, s.N)
		for y := r0; y < r1; y++ {
			copy(grid[y*s.N+c0:y*s.N+c1], b[(y-r0)*(c1-c0):])
		}
	}
	sum := 0.0
	for _, v := range grid {
		sum += v
	}
	c.Printf("jacobi2d: %d×%d on %d×%d blocks, %d iterations, last change %.3g, sum %.17g", s.N, s.N, g.Dims[0], g.Dims[1], s.Iter, d[0], sum)
	return nil
}

// blockOf returns the interior rows [r0, r1) and columns [c0, c1) of the
// block of rank r on grid g of an n×n interior.
func blockOf(g *task.Comm, r, n int) (r0, r1, c0, c1 int) {
	xy := g.Coords(r)
	rows, cols := g.Dims[0], g.Dims[1]
	return xy[0] * n / rows, (xy[0] + 1) * n / rows, xy[1] * n / cols, (xy[1] + 1) * n / cols
}

// jacobi2DStep returns the next iterate of the interior of u (rows of w
// points, a ghost ring around), the ring copied, and the largest change.
func jacobi2DStep(u []float64, w int) ([]float64, float64) {
	next, diff := make([]float64, len(u)), 0.0
	copy(next, u)
	for i := w; i < len(u)-w; i += w {
		for x := i + 1; x < i+w-1; x++ {
			next[x] = 0.25 * (u[x-w] + u[x+w] + u[x-1] + u[x+1])
			diff = max(diff, math.Abs(next[x]-u[x]))
		}
	}
	return next, diff
}
