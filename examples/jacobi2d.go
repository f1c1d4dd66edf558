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
// interior's rows [R0, R1) and columns [C0, C1) with a ghost ring, all in
// exported fields, so that it can be checkpointed and moved.
type Jacobi2D struct {
	Tasks          int       // blocks in all; the root's only
	C, G           task.Comm // the team; its Cartesian grid
	N, MaxIter, K  int
	Tol            float64
	R0, R1, C0, C1 int
	Iter           int
	U              []float64 // (R1-R0+2) rows of (C1-C0+2) points
	Diff           float64   // the largest change in the last iteration
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
		s.R0, s.R1, s.C0, s.C1 = blockOf(&s.G, s.G.Rank, s.N)
		s.U = make([]float64, (s.R1-s.R0+2)*(s.C1-s.C0+2))
		if s.R0 == 0 {
			for x := range s.C1 - s.C0 + 2 {
				s.U[x] = 1 // the top edge
			}
		}
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	g, rows, w := &s.G, s.R1-s.R0, s.C1-s.C0+2
	up, down := g.CartShift(0, 1) // NoRank past the grid's edges
	left, right := g.CartShift(1, 1)
	for s.Iter < s.MaxIter {
		if s.Iter > 0 && s.Iter%s.K == 0 {
			d := []float64{s.Diff}
			if err := task.AllReduce(c, g, task.Max[float64], d); err != nil {
				return err
			}
			if d[0] <= s.Tol {
				break
			}
		}
		var top, bottom, west, east []float64
		var reqs []task.Request
		post := func(r task.Request, err error) error {
			reqs = append(reqs, r)
			return err
		}
		col := func(x int) []float64 {
			out := make([]float64, rows)
			for y := range rows {
				out[y] = s.U[(y+1)*w+x]
			}
			return out
		}
		for _, e := range []struct {
			peer, sendTag, recvTag int
			edge                   []float64
			ghost                  *[]float64
		}{
			{up, tagTopRow, tagBottomRow, s.U[w : 2*w], &top},
			{down, tagBottomRow, tagTopRow, s.U[rows*w : (rows+1)*w], &bottom},
			{left, tagLeftCol, tagRightCol, col(1), &west},
			{right, tagRightCol, tagLeftCol, col(w - 2), &east},
		} {
			if e.peer == task.NoRank {
				continue
			}
			if err := post(g.Irecv(c, e.peer, e.recvTag, e.ghost)); err != nil {
				return err
			}
			if err := post(g.Isend(c, e.peer, e.sendTag, e.edge)); err != nil {
				return err
			}
		}
		if err := g.Waitall(c, reqs...); err != nil {
			return err
		}
		copy(s.U, top) // nothing at the grid's edges
		copy(s.U[(rows+1)*w:], bottom)
		for y := range west {
			s.U[(y+1)*w] = west[y]
		}
		for y := range east {
			s.U[(y+1)*w+w-1] = east[y]
		}
		s.U, s.Diff = jacobi2DStep(s.U, w)
		s.Iter++
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	d := []float64{s.Diff}
	if err := task.AllReduce(c, g, task.Max[float64], d); err != nil {
		return err
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
