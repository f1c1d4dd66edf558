// Package grid keeps a 2-D array of float64 distributed in blocks over a
// 2-D Cartesian communicator, each block with a ghost ring of width 1
// that a non-blocking halo exchange fills from its four neighbours: what a
// stencil code on a task.Comm (Jacobi, heat, a 5-point Laplacian) needs,
// as PETSc's DMDA gives it in two dimensions with a star stencil.
//
// A Block is part of its task's state: a field of the task's struct, all
// of its own state in exported fields, so that the task can be
// checkpointed and moved with it, also while it waits in FinishHalo.
package grid

import (
	"fmt"
	"iter"
	"math"
	"slices"

	"github.com/dpvm/dpvm/task"
)

// Side names a side of a block, and of the whole array, in the order of
// a Cartesian communicator's neighbours (task.Comm.Neighbors): the ghost
// row before the interior and the one after it (dimension 0), then the
// ghost column before and the one after (dimension 1).
type Side int

// The sides of a block.
const (
	Top Side = iota
	Bottom
	Left
	Right
)

// maxPoints bounds a block's points, ghost ring included.
const maxPoints = 1 << 30

// Block is one task's block of an N0×N1 array laid out in blocks on the
// 2-D Cartesian communicator G: the interior rows [Y0, Y0+Rows) and
// columns [X0, X0+Cols) of the array, with a ghost ring around them.
// Create makes it.
type Block struct {
	// G is the blocks' 2-D Cartesian communicator; rank r holds the block
	// at G.Coords(r). Its collectives are the program's to use too.
	G task.Comm
	// N0 and N1 are the whole array's rows and columns.
	N0, N1 int
	// Y0 and X0 are the array's row and column of the block's first
	// interior point; Rows and Cols the interior's extents.
	Y0, X0, Rows, Cols int
	// Data holds the block's (Rows+2)·(Cols+2) points row by row, the
	// ghost ring around the interior: the interior point (y, x), from
	// (0, 0), is Data[(y+1)*Stride()+x+1].
	Data []float64

	// The halo exchange under way: what the neighbours send, and the
	// request that brings it (FinishHalo); 0 when none is.
	recv [][]float64
	req  task.Request
}

// span is part i of n items cut into parts nearly equal parts, in order.
func span(n, parts, i int) (lo, hi int) { return i * n / parts, (i + 1) * n / parts }

// Create lays an n0×n1 array out in blocks on a 2-D Cartesian
// communicator of m's members, as square as m's size allows (CartCreate
// with dims {0, 0}), and makes b this member's block, its points 0. Every
// member of m calls it; it is a safe point while it waits. It returns at
// once when b is already made (Run re-entered after a move). It fails
// when a block would be empty: a grid dimension with more blocks than
// the array has points.
func (b *Block) Create(c *task.Ctx, m *task.Comm, n0, n1 int) error {
	if b.G.Size() > 0 {
		return nil
	}
	if n0 < 1 || n1 < 1 {
		return fmt.Errorf("grid: a %d×%d array", n0, n1)
	}
	var g task.Comm
	if err := m.CartCreate(c, []int{0, 0}, nil, &g); err != nil {
		return fmt.Errorf("grid: %w", err)
	}
	if g.Dims[0] > n0 || g.Dims[1] > n1 {
		return fmt.Errorf("grid: a %d×%d array in %d×%d blocks leaves blocks empty", n0, n1, g.Dims[0], g.Dims[1])
	}
	xy := g.Coords(g.Rank)
	y0, y1 := span(n0, g.Dims[0], xy[0])
	x0, x1 := span(n1, g.Dims[1], xy[1])
	if (y1-y0+2)*(x1-x0+2) > maxPoints {
		return fmt.Errorf("grid: a block of %d×%d points: at most %d", y1-y0, x1-x0, maxPoints)
	}
	*b = Block{G: g, N0: n0, N1: n1, Y0: y0, X0: x0, Rows: y1 - y0, Cols: x1 - x0,
		Data: make([]float64, (y1-y0+2)*(x1-x0+2))}
	return nil
}

// Stride is the distance in Data from a point to the one below it.
func (b *Block) Stride() int { return b.Cols + 2 }

// Interior yields the indices in Data of the interior's points, row by
// row: for a 5-point stencil, the neighbours of Data[i] are Data[i±1] and
// Data[i±Stride()].
func (b *Block) Interior() iter.Seq[int] {
	return func(yield func(int) bool) {
		w := b.Stride()
		for y := 1; y <= b.Rows; y++ {
			for i := y*w + 1; i <= y*w+b.Cols; i++ {
				if !yield(i) {
					return
				}
			}
		}
	}
}

// Sweep updates every interior point at once, as a Jacobi step or an
// explicit time step does: the new value of Data[i] is f(Data, i,
// Stride()), computed from the old values everywhere (Data is replaced by
// a new slice, the ghost ring copied). It returns the largest change of a
// point, the usual measure of convergence.
func (b *Block) Sweep(f func(u []float64, i, w int) float64) (change float64) {
	u, w := b.Data, b.Stride()
	next := slices.Clone(u)
	for i := range b.Interior() {
		next[i] = f(u, i, w)
		change = max(change, math.Abs(next[i]-u[i]))
	}
	b.Data = next
	return change
}

// FillBoundary sets the ghost points beyond side to v, corners included,
// where that side of the block is on the whole array's edge: boundary
// values held fixed (Dirichlet's condition). A block with a neighbour on
// that side is left as it is.
func (b *Block) FillBoundary(side Side, v float64) {
	w, h := b.Stride(), b.Rows+2
	var from, step, n int
	switch {
	case side == Top && b.Y0 == 0:
		from, step, n = 0, 1, w
	case side == Bottom && b.Y0+b.Rows == b.N0:
		from, step, n = (h-1)*w, 1, w
	case side == Left && b.X0 == 0:
		from, step, n = 0, w, h
	case side == Right && b.X0+b.Cols == b.N1:
		from, step, n = w-1, w, h
	}
	for k := range n {
		b.Data[from+k*step] = v
	}
}

// edge returns where the points along side of the interior (ghost
// false) or of the ghost ring beyond it (ghost true) lie in Data: the
// first, the distance between two, and how many.
func (b *Block) edge(side Side, ghost bool) (from, step, n int) {
	w, out := b.Stride(), 0
	if !ghost {
		out = 1
	}
	switch side {
	case Top:
		return out*w + 1, 1, b.Cols
	case Bottom:
		return (b.Rows+1-out)*w + 1, 1, b.Cols
	case Left:
		return w + out, w, b.Rows
	default:
		return w + b.Cols + 1 - out, w, b.Rows
	}
}

// StartHalo starts the halo exchange: each side of the interior goes to
// the neighbour beyond it, and what the neighbours send will fill the
// ghost ring (task.IneighborAlltoall on G). FinishHalo completes it (Wait); the
// block's points must not change in between. Every member of G calls
// it.
func (b *Block) StartHalo(c *task.Ctx) error {
	if b.req != 0 {
		return fmt.Errorf("grid: start halo: an exchange is under way")
	}
	send := make([][]float64, 4)
	for s := range send {
		from, step, n := b.edge(Side(s), false)
		send[s] = make([]float64, n)
		for k := range n {
			send[s][k] = b.Data[from+k*step]
		}
	}
	b.recv = make([][]float64, 4)
	req, err := task.IneighborAlltoall(c, &b.G, send, b.recv)
	if err != nil {
		return fmt.Errorf("grid: start halo: %w", err)
	}
	b.req = req
	return nil
}

// FinishHalo waits for the exchange StartHalo started, a safe point
// while it waits, and writes what each neighbour sent into the ghost
// points on its side; ghost points on the whole array's edge are left as
// they are.
func (b *Block) FinishHalo(c *task.Ctx) error {
	if b.req == 0 {
		return fmt.Errorf("grid: finish halo: no exchange under way")
	}
	if _, err := b.G.Wait(c, b.req); err != nil {
		// The block is left as it is: suspended for a move or a
		// checkpoint, its state is being captured, and the exchange
		// goes on where it is restored.
		return fmt.Errorf("grid: finish halo: %w", err)
	}
	recv := b.recv
	b.recv, b.req = nil, 0
	for s, in := range recv {
		if in == nil {
			continue // no neighbour on that side
		}
		from, step, n := b.edge(Side(s), true)
		if len(in) != n {
			return fmt.Errorf("grid: finish halo: %d points from the %v side, want %d", len(in), Side(s), n)
		}
		for k, v := range in {
			b.Data[from+k*step] = v
		}
	}
	return nil
}

// String names the side.
func (s Side) String() string {
	switch s {
	case Top:
		return "top"
	case Bottom:
		return "bottom"
	case Left:
		return "left"
	case Right:
		return "right"
	}
	return fmt.Sprintf("side(%d)", int(s))
}

// Gather collects the blocks' interiors on the member of rank root of G
// and returns there the whole N0×N1 array, row by row (MPI_Gatherv of
// each block's interior as a subarray); the others get nil. Every member
// of G calls it; it is a safe point while it waits.
func (b *Block) Gather(c *task.Ctx, root int) ([]float64, error) {
	inner := make([]float64, 0, b.Rows*b.Cols)
	w := b.Stride()
	for y := 1; y <= b.Rows; y++ {
		inner = append(inner, b.Data[y*w+1:y*w+1+b.Cols]...)
	}
	parts, err := task.Gatherv(c, &b.G, inner, root)
	if err != nil || b.G.Rank != root {
		return nil, err
	}
	all := make([]float64, b.N0*b.N1)
	for r, part := range parts {
		xy := b.G.Coords(r)
		y0, y1 := span(b.N0, b.G.Dims[0], xy[0])
		x0, x1 := span(b.N1, b.G.Dims[1], xy[1])
		if len(part) != (y1-y0)*(x1-x0) {
			return nil, fmt.Errorf("grid: gather: %d points from rank %d, want %d", len(part), r, (y1-y0)*(x1-x0))
		}
		for y := y0; y < y1; y++ {
			copy(all[y*b.N1+x0:y*b.N1+x1], part[(y-y0)*(x1-x0):])
		}
	}
	return all, nil
}
