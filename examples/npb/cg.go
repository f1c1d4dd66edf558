package npb

import (
	"fmt"
	"math"

	"github.com/dpvm/dpvm/task"
)

// CGWorker is one task of CG. The matrix's rows are split into consecutive
// blocks, one per task; each task owns its block of every vector and
// gathers the whole search direction p before each matrix-vector product.
type CGWorker struct {
	Place
	Warm  bool      // the untimed warm-up iteration is done
	Timed bool      // the barrier before the timed region is passed
	It    int       // timed iterations done
	X     []float64 // this task's block of x
	Zeta  float64
	Rn    float64 // ||r|| of the last iteration

	// The conjugate gradient of the iteration in progress (InCG), at the
	// start of its step Step (cgItMax: every step done, ||x - A·z|| and
	// the new x to come): rho and this task's blocks of z, r and p. Each
	// step ends at a safe point, and its waits for other tasks are safe
	// points (teamOf) where Run re-entered makes the step again.
	InCG    bool
	Step    int
	Rho     float64
	Z, R, P []float64

	// Derived from the class and rank, rebuilt after a restore.
	m      *csr
	r0, r1 int
	bounds []int
	pFull  []float64
	zFull  []float64 // z gathered for ||x - A·z||
	q      []float64
	zn, rn []float64 // a step's new z and r, kept as Z and R when it ends
}

func (w *CGWorker) place() *Place { return &w.Place }

// Run executes the worker as a dpvm task.
func (w *CGWorker) Run(c *task.Ctx) error { return runWorker(c, w) }

// csr is a block of rows of a sparse matrix in compressed-row form, with
// global column indices.
type csr struct {
	rowstr []int32
	colidx []int32
	a      []float64
	// ncol bounds colidx: every entry is in [0, ncol), rowstr rises from
	// 0 to len(colidx) and len(a) == len(colidx) (checked by newCSR), so
	// cgSpmv may index without checks once x holds ncol elements.
	ncol int
}

// newCSR checks the invariants cgSpmv relies on and returns the matrix.
func newCSR(rowstr, colidx []int32, a []float64, ncol int) (*csr, error) {
	if len(rowstr) == 0 || rowstr[0] != 0 || int(rowstr[len(rowstr)-1]) != len(colidx) || len(a) != len(colidx) {
		return nil, fmt.Errorf("cg: malformed matrix: %d row starts, %d columns, %d values", len(rowstr), len(colidx), len(a))
	}
	for j := 1; j < len(rowstr); j++ {
		if rowstr[j] < rowstr[j-1] {
			return nil, fmt.Errorf("cg: malformed matrix: row %d starts at %d, before row %d at %d", j, rowstr[j], j-1, rowstr[j-1])
		}
	}
	for k, c := range colidx {
		if c < 0 || int(c) >= ncol {
			return nil, fmt.Errorf("cg: malformed matrix: entry %d has column %d, want [0, %d)", k, c, ncol)
		}
	}
	return &csr{rowstr: rowstr, colidx: colidx, a: a, ncol: ncol}, nil
}

// cgMakeA generates CG's matrix (makea and sparse of NPB) and keeps rows
// [first, last) of it. Every task generates the same random stream; only
// the outer products' entries that fall in its rows are stored.
func cgMakeA(p CGParams, first, last int) *csr {
	m, _ := cgMakeATick(p, first, last, nil)
	return m
}

// cgTickRows is how many rows cgMakeATick generates or fills between two
// calls of its tick.
const cgTickRows = 2048

// cgMakeATick is cgMakeA calling tick (when not nil) every cgTickRows rows
// of each of its two passes over the outer products: class B's matrix
// takes seconds to build, and a worker building it must reach safe
// points. It returns tick's first error.
func cgMakeATick(p CGParams, first, last int, tick func() error) (*csr, error) {
	ticked := func(i int) error {
		if tick == nil || i%cgTickRows != 0 {
			return nil
		}
		return tick()
	}
	n, nonzer := p.NA, p.Nonzer
	nn1 := 1
	for nn1 < n {
		nn1 *= 2
	}
	tran := Seed
	Randlc(&tran, cgAmult) // the reference draws once before makea
	// Generate the sparse vectors of the outer products.
	w := nonzer + 1
	arow := make([]int32, n)
	acol := make([]int32, n*w)
	aelt := make([]float64, n*w)
	iv := make([]int32, w)
	v := make([]float64, w)
	for io := range n {
		if err := ticked(io); err != nil {
			return nil, err
		}
		nzv := 0
		for nzv < nonzer {
			vecelt := Randlc(&tran, cgAmult)
			vecloc := Randlc(&tran, cgAmult)
			i := int32(int(float64(nn1)*vecloc) + 1)
			if int(i) > n {
				continue
			}
			dup := false
			for _, x := range iv[:nzv] {
				if x == i {
					dup = true
					break
				}
			}
			if dup {
				continue
			}
			v[nzv], iv[nzv] = vecelt, i
			nzv++
		}
		// vecset: element iouter gets 0.5.
		set := false
		for k := range nzv {
			if iv[k] == int32(io+1) {
				v[k], set = 0.5, true
			}
		}
		if !set {
			v[nzv], iv[nzv] = 0.5, int32(io+1)
			nzv++
		}
		arow[io] = int32(nzv)
		for k := range nzv {
			acol[io*w+k] = iv[k] - 1
			aelt[io*w+k] = v[k]
		}
	}
	// sparse: count the triples of each local row.
	nrows := last - first
	rowstr := make([]int32, nrows+1)
	for i := range n {
		for k := range int(arow[i]) {
			j := int(acol[i*w+k])
			if j >= first && j < last {
				rowstr[j-first+1] += arow[i]
			}
		}
	}
	for j := 1; j <= nrows; j++ {
		rowstr[j] += rowstr[j-1]
	}
	nza := int(rowstr[nrows])
	a := make([]float64, nza)
	colidx := make([]int32, nza)
	for k := range colidx {
		colidx[k] = -1
	}
	nzloc := make([]int32, nrows)
	size := 1.0
	ratio := math.Pow(cgRcond, 1/float64(n))
	for i := range n {
		if err := ticked(i); err != nil {
			return nil, err
		}
		ni := int(arow[i])
		for nz := range ni {
			j := int(acol[i*w+nz])
			if j < first || j >= last {
				continue
			}
			lj := j - first
			scale := size * aelt[i*w+nz]
			lo, hi := int(rowstr[lj]), int(rowstr[lj+1])
			for nzrow := range ni {
				jcol := acol[i*w+nzrow]
				va := aelt[i*w+nzrow] * scale
				if int(jcol) == j && j == i {
					va += cgRcond - p.Shift
				}
				k := lo
				for ; k < hi; k++ {
					if colidx[k] > jcol {
						// Insert in order: shift the used entries up.
						for kk := hi - 2; kk >= k; kk-- {
							if colidx[kk] > -1 {
								a[kk+1] = a[kk]
								colidx[kk+1] = colidx[kk]
							}
						}
						colidx[k] = jcol
						a[k] = 0
						break
					} else if colidx[k] == -1 {
						colidx[k] = jcol
						break
					} else if colidx[k] == jcol {
						nzloc[lj]++
						break
					}
				}
				if k == hi {
					panic(fmt.Sprintf("cg: internal error in sparse: row %d is full", j))
				}
				a[k] += va
			}
		}
		size *= ratio
	}
	// Remove the empty entries.
	for j := 1; j < nrows; j++ {
		nzloc[j] += nzloc[j-1]
	}
	for j := range nrows {
		j1 := int32(0)
		if j > 0 {
			j1 = rowstr[j] - nzloc[j-1]
		}
		j2 := rowstr[j+1] - nzloc[j]
		src := rowstr[j]
		for k := j1; k < j2; k++ {
			a[k] = a[src]
			colidx[k] = colidx[src]
			src++
		}
	}
	for j := 1; j <= nrows; j++ {
		rowstr[j] -= nzloc[j-1]
	}
	nza = int(rowstr[nrows])
	m, err := newCSR(rowstr, colidx[:nza:nza], a[:nza:nza], n)
	if err != nil {
		panic(fmt.Sprintf("cg: internal error in sparse: %v", err))
	}
	return m, nil
}

// cgMatrix returns rows [first, last) of CG's matrix. When every task of
// the run is on this task's host, the whole matrix is built once there and
// shared (task.Shared; each task reads its rows of it): one generation of
// the matrix instead of one per task, and no safe point while it is built
// or awaited. Otherwise, and after a move, the task generates its own
// rows, calling tick as cgMakeATick does.
func cgMatrix(cm comm, p CGParams, first, last int, tick func() error) (*csr, error) {
	tc, ok := cm.(*taskComm)
	if !ok || !tc.oneHost || tc.size() == 1 {
		return cgMakeATick(p, first, last, tick)
	}
	key := fmt.Sprintf("npb/cg/matrix/%d/%d/%g", p.NA, p.Nonzer, p.Shift)
	full, err := task.Shared(tc.c, key, func() (*csr, error) {
		return cgMakeA(p, 0, p.NA), nil
	})
	if err != nil {
		return nil, err
	}
	return full.rows(first, last)
}

// rows is the block of rows [first, last) of m, a whole matrix: its
// columns and values are m's memory, its row starts its own.
func (m *csr) rows(first, last int) (*csr, error) {
	if first < 0 || last < first || last >= len(m.rowstr) {
		return nil, fmt.Errorf("cg: rows [%d, %d) of a matrix of %d", first, last, len(m.rowstr)-1)
	}
	base, end := m.rowstr[first], m.rowstr[last]
	rowstr := make([]int32, last-first+1)
	for j := range rowstr {
		rowstr[j] = m.rowstr[first+j] - base
	}
	return newCSR(rowstr, m.colidx[base:end:end], m.a[base:end:end], m.ncol)
}

// spmv computes y = A·x for the block's rows: in assembly where there is
// one (bit-identical), else spmvGo.
func (m *csr) spmv(y, x []float64) {
	nrows := len(m.rowstr) - 1
	if cgSpmvAsm && nrows > 0 && len(m.colidx) > 0 && len(y) >= nrows && len(x) >= m.ncol {
		cgSpmv(&y[0], &m.rowstr[0], nrows, &m.colidx[0], &m.a[0], &x[0])
		return
	}
	m.spmvGo(y, x)
}

// spmvGo is spmv in Go: each row's sum is one chain of additions in the
// order of its entries, as in NPB.
func (m *csr) spmvGo(y, x []float64) {
	rowstr, colidx, a := m.rowstr, m.colidx, m.a
	y = y[:len(rowstr)-1]
	for j := range y {
		lo, hi := rowstr[j], rowstr[j+1]
		cols := colidx[lo:hi]
		vals := a[lo:hi]
		vals = vals[:len(cols)]
		var sum float64
		for k, c := range cols {
			sum += float64(vals[k] * x[c])
		}
		y[j] = sum
	}
}

func dot(x, y []float64) float64 {
	y = y[:len(x)]
	var s float64
	for i, v := range x {
		s += v * y[i]
	}
	return s
}

// allsum sums v over all ranks, waiting at a safe point where cm can
// (sumSafe).
func allsum(cm comm, v ...float64) ([]float64, error) {
	if err := sumSafe(cm, v); err != nil {
		return nil, err
	}
	return v, nil
}

// conjGrad runs NPB's 25 CG steps from x, leaving the result in w.Z, and
// returns ||x - A·z||. It resumes from the fields (InCG, Step, Rho, Z, R,
// P) and reaches a safe point after each step: a step changes the fields
// only once its last wait is over.
func (w *CGWorker) conjGrad(cm comm, h *hooks) (float64, error) {
	x, q := w.X, w.q
	nloc := len(x)
	if !w.InCG {
		w.Z, w.R, w.P = resize(w.Z, nloc), resize(w.R, nloc), resize(w.P, nloc)
		for j := range x {
			w.Z[j] = 0
			w.R[j] = x[j]
			w.P[j] = x[j]
		}
		s, err := allsum(cm, dot(w.R, w.R))
		if err != nil {
			return 0, err
		}
		w.Rho, w.Step, w.InCG = s[0], 0, true
		if err := h.safe(); err != nil {
			return 0, err
		}
	}
	if len(w.Z) != nloc || len(w.R) != nloc || len(w.P) != nloc {
		return 0, fmt.Errorf("CG state: z, r, p have %d, %d, %d elements, want %d", len(w.Z), len(w.R), len(w.P), nloc)
	}
	w.zn, w.rn = resize(w.zn, nloc), resize(w.rn, nloc)
	for w.Step < cgItMax {
		// The gathers send p's block in place: this task writes to it
		// again only after an allsum, which every other task enters once
		// it has copied the block out.
		copy(w.pFull[w.r0:w.r1], w.P)
		if err := gatherSafe(cm, w.pFull, w.bounds); err != nil {
			return 0, err
		}
		p := w.P
		w.m.spmv(q, w.pFull)
		s, err := allsum(cm, dot(p, q))
		if err != nil {
			return 0, err
		}
		alpha := w.Rho / s[0]
		q, r, z := q[:len(p)], w.rn[:len(p)], w.zn[:len(p)]
		for j, pj := range p {
			z[j] = w.Z[j] + alpha*pj
			r[j] = w.R[j] - alpha*q[j]
		}
		if s, err = allsum(cm, dot(r, r)); err != nil {
			return 0, err
		}
		rho := s[0]
		beta := rho / w.Rho
		for j, rj := range r {
			p[j] = rj + beta*p[j]
		}
		w.Z, w.zn = w.zn, w.Z
		w.R, w.rn = w.rn, w.R
		w.Rho = rho
		w.Step++
		if err := h.safe(); err != nil {
			return 0, err
		}
	}
	// ||r|| = ||x - A·z||, with z gathered into zFull (pFull's block may
	// still be read by the other tasks).
	r := w.rn
	copy(w.zFull[w.r0:w.r1], w.Z)
	if err := gatherSafe(cm, w.zFull, w.bounds); err != nil {
		return 0, err
	}
	w.m.spmv(r, w.zFull)
	var sum float64
	for j, xj := range x {
		d := xj - r[j]
		sum += d * d
	}
	s, err := allsum(cm, sum)
	if err != nil {
		return 0, err
	}
	return math.Sqrt(s[0]), nil
}

// resize returns s with n elements, reusing its memory when it can.
func resize(s []float64, n int) []float64 {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]float64, n)
}

// iterate does one iteration of the inverse power method: conj_grad, zeta
// and x = z/||z||.
func (w *CGWorker) iterate(cm comm, h *hooks, shift float64) error {
	rn, err := w.conjGrad(cm, h)
	if err != nil {
		return err
	}
	s, err := allsum(cm, dot(w.X, w.Z), dot(w.Z, w.Z))
	if err != nil {
		return err
	}
	w.Rn = rn
	w.Zeta = shift + 1/s[0]
	n2 := 1 / math.Sqrt(s[1])
	for j, zj := range w.Z {
		w.X[j] = n2 * zj
	}
	w.InCG = false
	return nil
}

func (w *CGWorker) run(cm comm, h *hooks) (*Report, error) {
	p, err := CGParamsFor(w.Class)
	if err != nil {
		return nil, err
	}
	p.Niter = w.iters(p.Niter)
	w.bounds = blockBounds(p.NA, cm.size())
	w.r0, w.r1 = w.bounds[cm.rank()], w.bounds[cm.rank()+1]
	nloc := w.r1 - w.r0
	// The matrix is kept only once built: a set-up tick that suspended
	// the task has handed its struct to the runtime, which reads it.
	m, err := cgMatrix(cm, p, w.r0, w.r1, h.setup)
	if err != nil {
		return nil, err
	}
	w.m = m
	w.pFull, w.zFull = make([]float64, p.NA), make([]float64, p.NA)
	w.q = make([]float64, nloc)
	if w.X == nil {
		w.X = make([]float64, nloc)
		for j := range w.X {
			w.X[j] = 1
		}
	}
	if len(w.X) != nloc {
		return nil, fmt.Errorf("CG state: x has %d elements, want %d", len(w.X), nloc)
	}
	if !w.Warm {
		// Before the warm-up's conjugate gradient starts only: Run
		// re-entered inside it makes its steps' collectives again, and
		// this barrier is not one of them.
		if !w.InCG {
			if err := h.allReady(); err != nil {
				return nil, err
			}
		}
		// One untimed iteration, then x = 1 again.
		if err := w.iterate(cm, h, p.Shift); err != nil {
			return nil, err
		}
		for j := range w.X {
			w.X[j] = 1
		}
		w.Zeta, w.Warm = 0, true
		if err := h.safe(); err != nil {
			return nil, err
		}
	}
	if !w.Timed {
		if err := barrierSafe(cm); err != nil {
			return nil, err
		}
		w.startTimer(cm, h)
		w.Timed = true
		if err := h.safe(); err != nil {
			return nil, err
		}
	}
	for w.It < p.Niter {
		if err := w.iterate(cm, h, p.Shift); err != nil {
			return nil, err
		}
		w.It++
		h.report(w.It, p.Niter)
		if err := h.safe(); err != nil {
			return nil, err
		}
	}
	if cm.rank() != 0 {
		return nil, nil
	}
	t := w.elapsed(h)
	zeta := w.Zeta
	r := w.finish("cg", p.Niter, t, p.Mop())
	r.Values.Zeta = &zeta
	Verify(r)
	return r, nil
}
