package npb

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/dpvm/dpvm/task"
)

// MGWorker is one task of MG. Every grid level is split into slabs of
// planes along the third dimension, one per task, each with a ghost plane
// on either side that the neighbours fill. When there are more than two
// tasks, the coarse levels with fewer planes than tasks are gathered and
// computed by every task alike (they are tiny).
//
// The state is the finest u (this task's slab with its ghosts, all valid
// at every safe point that ends a step), zran3's 20 charges and the finest
// r's two ghost planes; the dense finest v and r are rebuilt from them on restore, with
// no communication (a task resuming after a move must not communicate
// what its peers, which did not move, will not mirror), and bit-identical:
//   - v is zero but for the charges: each of the slab's planes, ghost
//     planes included, gets the charges of its global plane (periodic in
//     the third dimension), then its in-plane ghosts as comm3 fills them.
//     That is exactly what zran3 and comm3's exchange produce.
//   - r at a safe point is resid(u, v): its interior is recomputed from u
//     and v by resid's own code, its in-plane ghosts by comm3's local
//     part, and its ghost planes, which came from the neighbours, are the
//     saved RLo and RHi (copied from r before each safe point).
//
// Inside a timed iteration on the team's task.Comm (iterStaged) the state
// also says which of the iteration's steps on the finest grid it is in
// (Stage) and how many of their messages are done (Halo); r is rebuilt the
// same way and is what those steps need: the residual of u being
// exchanged, its ghost planes received so far in RLo and RHi.
//
// The coarse levels are rebuilt from r by the next V-cycle. At class A
// with two tasks the encoded state is 75.4 MiB per task; with the dense v
// and r it was 222.8 MiB.
type MGWorker struct {
	Place
	Warm bool      // the untimed warm-up V-cycle is done
	It   int       // timed iterations done
	U    []float64 // the finest level of u, this task's slab with ghosts
	// Charges are zran3's charges, 3 global interior coordinates (i1, i2,
	// i3, each 1..N) per charge: ten of value +1, then ten of value -1.
	Charges []int
	// RLo and RHi are the finest r's ghost planes below and above the
	// slab, as of the latest safe point (valid when Warm).
	RLo, RHi []float64
	Init     bool // Charges hold zran3's charges

	// Stage is where the timed iteration under way stands (mgStep,
	// mgInterpolated, mgSmoothed) and Halo how many messages of the
	// stage's exchanges of the finest grid are done (see iterStaged: on
	// the team's task.Comm the steps that change U each end at a safe
	// point).
	Stage int `msgpack:",omitempty"`
	Halo  int `msgpack:",omitempty"`

	// sendPlanes are the copies of U's boundary planes haloStaged sends.
	sendPlanes [2][]float64

	p    MGParams
	lt   int
	kr   int       // levels 1..kr are replicated (0: none)
	lv   []mgLevel // distributed levels, index k = 1..lt
	full []mgLevel // replicated levels 1..kr
	v    []float64 // the finest right-hand side (zran3's field)
	a, c [4]float64
	t1   []float64 // row scratch
	t2   []float64
	t3   []float64
}

// mgLevel is one level's arrays: u and r over m1×m2×m3 points with ghosts.
type mgLevel struct {
	n          int // interior points per dimension (global)
	m1, m2, m3 int // local extents with ghosts
	p0         int // first global interior plane of this slab
	dist       bool
	u, r       []float64
}

func (w *MGWorker) place() *Place { return &w.Place }

// Run executes the worker as a dpvm task.
func (w *MGWorker) Run(c *task.Ctx) error { return runWorker(c, w) }

// levelShape is a level's extents, without its arrays.
func levelShape(n, np, rank int, dist bool) mgLevel {
	l := mgLevel{n: n, m1: n + 2, m2: n + 2, dist: dist}
	nl := n
	if dist {
		nl = n / np
		l.p0 = rank * nl
	}
	l.m3 = nl + 2
	return l
}

func newLevel(n, np, rank int, dist bool) mgLevel {
	l := levelShape(n, np, rank, dist)
	l.u, l.r = make([]float64, l.size()), make([]float64, l.size())
	return l
}

// size is the number of points with ghosts.
func (l *mgLevel) size() int { return l.m1 * l.m2 * l.m3 }

// planeSize is the number of points of one plane with its ghosts.
func (l *mgLevel) planeSize() int { return l.m1 * l.m2 }

// comm3 fills the ghost points of x (periodic boundaries): in the first two
// dimensions locally, in the third by exchanging boundary planes with the
// neighbouring slabs.
func (w *MGWorker) comm3(cm comm, l *mgLevel, x []float64) error {
	planeGhosts(l, x, 1, l.m3-1)
	return w.exchange3(cm, l, x)
}

// planeGhosts is comm3's local part: it fills the in-plane ghost points
// of x's planes from..to-1 (periodic in the first two dimensions): each
// row's ends, then the first and last rows whole (corners included).
func planeGhosts(l *mgLevel, x []float64, from, to int) {
	m1, m2 := l.m1, l.m2
	for i3 := from; i3 < to; i3++ {
		for i2 := 1; i2 < m2-1; i2++ {
			row := x[m1*(i2+m2*i3):][:m1]
			row[0] = row[m1-2]
			row[m1-1] = row[1]
		}
		pl := x[m1*m2*i3:][:m1*m2]
		copy(pl[0:m1], pl[m1*(m2-2):m1*(m2-1)])
		copy(pl[m1*(m2-1):m1*m2], pl[m1:2*m1])
	}
}

// ghostPlanes returns x's ghost planes below and above the slab.
func ghostPlanes(l *mgLevel, x []float64) (lo, hi []float64) {
	ps := l.planeSize()
	return x[0:ps], x[ps*(l.m3-1) : ps*l.m3]
}

// exchange3 is comm3's exchange: it fills x's ghost planes with the
// neighbouring slabs' boundary planes (their in-plane ghosts filled).
//
// On the team's task.Comm (teamOf: a dpvm run of more than one task) the
// planes go through SendRecv, safe points while they wait. Elsewhere the
// boundary planes go in place (comm.sendInPlace) and each plane
// received is copied once, from a view of the message, into its ghost
// plane: between tasks of one daemon, one copy instead of two. The finest
// u is the task's state (U), which its checkpoints read, so its planes
// are sent as copies, as task.InPlace asks. For the others the caller
// writes to x's boundary planes again only after it has received a
// message that each neighbour sent after this exchange (the next exchange
// of any array on a distributed level, a gather or a barrier): by then the
// neighbours have copied the planes out. The V-cycle's order of stencils
// gives that everywhere.
func (w *MGWorker) exchange3(cm comm, l *mgLevel, x []float64) error {
	ps, m3 := l.planeSize(), l.m3
	lo, hi := ghostPlanes(l, x)
	first, last := x[ps:2*ps], x[ps*(m3-2):ps*(m3-1)]
	np := cm.size()
	if !l.dist || np == 1 {
		copy(lo, last)
		copy(hi, first)
		return nil
	}
	me := cm.rank()
	down, up := (me-1+np)%np, (me+1)%np
	if c, m, ok := teamOf(cm); ok {
		// Two SendRecv calls on the team: safe points while they wait,
		// replayed when Run re-enters mid-cycle. Each ghost plane is
		// decoded where it lies (capacity reused), checked to be there.
		for _, h := range []struct {
			to, from int
			plane    []float64
			dst      []float64
		}{{down, up, first, hi}, {up, down, last, lo}} {
			got := h.dst[:0:len(h.dst)]
			if err := m.SendRecv(c, h.to, h.plane, h.from, &got); err != nil {
				return fmt.Errorf("MG halo: %w", err)
			}
			if len(got) != len(h.dst) || &got[0] != &h.dst[0] {
				return fmt.Errorf("MG halo: %d points from rank %d, want %d", len(got), h.from, len(h.dst))
			}
		}
		return nil
	}
	send := cm.sendInPlace
	if len(w.U) > 0 && &x[0] == &w.U[0] {
		send = cm.send
	}
	if err := send(down, tagHalo, first); err != nil {
		return err
	}
	if err := send(up, tagHalo+100, last); err != nil {
		return err
	}
	for _, h := range []struct {
		from, tag int
		dst       []float64
	}{{up, tagHalo, hi}, {down, tagHalo + 100, lo}} {
		in, err := recvSlice(cm, h.from, h.tag, len(h.dst), task.Payload.Float64s)
		if err != nil {
			return fmt.Errorf("MG halo: %w", err)
		}
		copy(h.dst, in)
	}
	return nil
}

// resid computes r = v - A·u on the interior and fills r's ghosts. r may be
// v.
func (w *MGWorker) resid(cm comm, l *mgLevel, u, v, r []float64) error {
	w.residInterior(l, u, v, r)
	return w.comm3(cm, l, r)
}

// residInterior is resid's compute part: r = v - A·u on the interior, from
// u's interior and ghosts. r may be v.
func (w *MGWorker) residInterior(l *mgLevel, u, v, r []float64) {
	if useAVX {
		w.residRows(l, u, v, r)
	} else {
		w.residScalar(l, u, v, r)
	}
}

// residScalar is residInterior in Go, one point at a time.
func (w *MGWorker) residScalar(l *mgLevel, u, v, r []float64) {
	m1, m2, m3 := l.m1, l.m2, l.m3
	a0, a2, a3 := w.a[0], w.a[2], w.a[3]
	ps := m1 * m2
	for i3 := 1; i3 < m3-1; i3++ {
		for i2 := 1; i2 < m2-1; i2++ {
			o := m1 * (i2 + m2*i3)
			rr := r[o : o+m1]
			n := len(rr)
			vv := v[o : o+n]
			uc := u[o : o+n]
			um, up := u[o-m1:][:n], u[o+m1:][:n]
			uzm, uzp := u[o-ps:][:n], u[o+ps:][:n]
			umm, upm := u[o-ps-m1:][:n], u[o-ps+m1:][:n]
			ump, upp := u[o+ps-m1:][:n], u[o+ps+m1:][:n]
			// u1 and u2 of NPB's resid, kept in registers for i1-1, i1,
			// i1+1.
			u1m := um[0] + up[0] + uzm[0] + uzp[0]
			u2m := umm[0] + upm[0] + ump[0] + upp[0]
			u1c := um[1] + up[1] + uzm[1] + uzp[1]
			u2c := umm[1] + upm[1] + ump[1] + upp[1]
			for i1 := 2; i1 < n; i1++ {
				u1p := um[i1] + up[i1] + uzm[i1] + uzp[i1]
				u2p := umm[i1] + upm[i1] + ump[i1] + upp[i1]
				rr[i1-1] = vv[i1-1] - float64(a0*uc[i1-1]) - float64(a2*(u2c+u1m+u1p)) - float64(a3*(u2m+u2p))
				u1m, u1c = u1c, u1p
				u2m, u2c = u2c, u2p
			}
		}
	}
}

// residRows is residInterior row by row in assembly, as NPB's resid is
// written: a row's u1 and u2 sums first, then the row of r from them.
func (w *MGWorker) residRows(l *mgLevel, u, v, r []float64) {
	a0, a2, a3 := w.a[0], w.a[2], w.a[3]
	w.eachRowSums(l, u, func(o int, u1, u2 []float64) {
		m1 := l.m1
		mgResidRow(&r[o : o+m1][0], &v[o : o+m1][0], &u[o : o+m1][0], &u1[0], &u2[0], m1, a0, a2, a3)
	})
}

// psinvRows is psinv's interior row by row in assembly, as NPB's psinv is
// written: a row's r1 and r2 sums first, then the row of u from them.
func (w *MGWorker) psinvRows(l *mgLevel, r, u []float64) {
	c0, c1, c2 := w.c[0], w.c[1], w.c[2]
	w.eachRowSums(l, r, func(o int, r1, r2 []float64) {
		m1 := l.m1
		mgPsinvRow(&u[o : o+m1][0], &r[o : o+m1][0], &r1[0], &r2[0], m1, c0, c1, c2)
	})
}

// eachRowSums calls row for every interior row of x's level, at offset o,
// with the row's two neighbour sums in assembly (in w.t1 and w.t2): s1
// of the four neighbours one step away in i2 or i3, s2 of the four
// diagonal ones, as NPB's resid (u1, u2) and psinv (r1, r2) have them.
func (w *MGWorker) eachRowSums(l *mgLevel, x []float64, row func(o int, s1, s2 []float64)) {
	m1, m2, m3 := l.m1, l.m2, l.m3
	ps := m1 * m2
	s1, s2 := w.t1[:m1], w.t2[:m1]
	for i3 := 1; i3 < m3-1; i3++ {
		for i2 := 1; i2 < m2-1; i2++ {
			o := m1 * (i2 + m2*i3)
			xm, xp := x[o-m1:][:m1], x[o+m1:][:m1]
			xzm, xzp := x[o-ps:][:m1], x[o+ps:][:m1]
			xmm, xpm := x[o-ps-m1:][:m1], x[o-ps+m1:][:m1]
			xmp, xpp := x[o+ps-m1:][:m1], x[o+ps+m1:][:m1]
			mgSum4(&s1[0], &xm[0], &xp[0], &xzm[0], &xzp[0], m1)
			mgSum4(&s2[0], &xmm[0], &xpm[0], &xmp[0], &xpp[0], m1)
			row(o, s1, s2)
		}
	}
}

// psinv applies the smoother: u = u + C·r, and fills u's ghosts.
func (w *MGWorker) psinv(cm comm, l *mgLevel, r, u []float64) error {
	w.smooth(l, r, u)
	return w.comm3(cm, l, u)
}

// smooth is psinv's compute part: u = u + C·r on the interior.
func (w *MGWorker) smooth(l *mgLevel, r, u []float64) {
	if useAVX {
		w.psinvRows(l, r, u)
	} else {
		w.psinvScalar(l, r, u)
	}
}

// psinvScalar is psinv's interior in Go, one point at a time.
func (w *MGWorker) psinvScalar(l *mgLevel, r, u []float64) {
	m1, m2, m3 := l.m1, l.m2, l.m3
	c0, c1, c2 := w.c[0], w.c[1], w.c[2]
	ps := m1 * m2
	for i3 := 1; i3 < m3-1; i3++ {
		for i2 := 1; i2 < m2-1; i2++ {
			o := m1 * (i2 + m2*i3)
			uu := u[o : o+m1]
			n := len(uu)
			rc := r[o : o+n]
			rm, rp := r[o-m1:][:n], r[o+m1:][:n]
			rzm, rzp := r[o-ps:][:n], r[o+ps:][:n]
			rmm, rpm := r[o-ps-m1:][:n], r[o-ps+m1:][:n]
			rmp, rpp := r[o+ps-m1:][:n], r[o+ps+m1:][:n]
			// r1 and r2 of NPB's psinv, kept in registers.
			r1m := rm[0] + rp[0] + rzm[0] + rzp[0]
			r1c := rm[1] + rp[1] + rzm[1] + rzp[1]
			r2c := rmm[1] + rpm[1] + rmp[1] + rpp[1]
			for i1 := 2; i1 < n; i1++ {
				r1p := rm[i1] + rp[i1] + rzm[i1] + rzp[i1]
				r2p := rmm[i1] + rpm[i1] + rmp[i1] + rpp[i1]
				uu[i1-1] = uu[i1-1] + float64(c0*rc[i1-1]) + float64(c1*(rc[i1-2]+rc[i1]+r1c)) + float64(c2*(r2c+r1m+r1p))
				r1m, r1c = r1c, r1p
				r2c = r2p
			}
		}
	}
}

// rprj3 projects the fine residual r onto the coarse grid s (full
// weighting), and fills s's ghosts.
func (w *MGWorker) rprj3(cm comm, f *mgLevel, r []float64, c *mgLevel, s []float64) error {
	w.rprj3Interior(f, r, c, s, useAVX)
	return w.comm3(cm, c, s)
}

// rprj3Interior is rprj3's projection, without the ghosts; its sums run
// in assembly when vec is set (useAVX must hold then).
func (w *MGWorker) rprj3Interior(f *mgLevel, r []float64, c *mgLevel, s []float64, vec bool) {
	m1k, m2k := f.m1, f.m2
	m1j, m2j, m3j := c.m1, c.m2, c.m3
	x1, y1 := w.t1[:m1k], w.t2[:m1k]
	psk := m1k * m2k
	for j3 := 1; j3 < m3j-1; j3++ {
		i3 := 2 * j3
		for j2 := 1; j2 < m2j-1; j2++ {
			i2 := 2 * j2
			o := m1k * (i2 + m2k*i3)
			rc := r[o : o+m1k]
			rm, rp := r[o-m1k:o-m1k+m1k], r[o+m1k:o+m1k+m1k]
			rzm, rzp := r[o-psk:o-psk+m1k], r[o+psk:o+psk+m1k]
			rmm, rmp := r[o-psk-m1k:o-psk-m1k+m1k], r[o+psk-m1k:o+psk-m1k+m1k]
			rpm, rpp := r[o-psk+m1k:o-psk+m1k+m1k], r[o+psk+m1k:o+psk+m1k+m1k]
			so := m1j * (j2 + m2j*j3)
			ss := s[so : so+m1j]
			if vec {
				// The sums at every point of the row, four at a time: x1
				// and y1 at the even points are NPB's x2 and y2.
				mgSum4(&x1[0], &rm[0], &rp[0], &rzm[0], &rzp[0], m1k)
				mgSum4(&y1[0], &rmm[0], &rmp[0], &rpm[0], &rpp[0], m1k)
				for j1 := 1; j1 < m1j-1; j1++ {
					i := 2 * j1
					ss[j1] = 0.5*rc[i] + 0.25*(rc[i-1]+rc[i+1]+x1[i]) + 0.125*(x1[i-1]+x1[i+1]+y1[i]) + 0.0625*(y1[i-1]+y1[i+1])
				}
				continue
			}
			for j1 := 1; j1 < m1j; j1++ {
				i := 2*j1 - 1
				x1[i] = rm[i] + rp[i] + rzm[i] + rzp[i]
				y1[i] = rmm[i] + rmp[i] + rpm[i] + rpp[i]
			}
			for j1 := 1; j1 < m1j-1; j1++ {
				i := 2 * j1
				y2 := rmm[i] + rmp[i] + rpm[i] + rpp[i]
				x2 := rm[i] + rp[i] + rzm[i] + rzp[i]
				ss[j1] = 0.5*rc[i] + 0.25*(rc[i-1]+rc[i+1]+x2) + 0.125*(x1[i-1]+x1[i+1]+y2) + 0.0625*(y1[i-1]+y1[i+1])
			}
		}
	}
}

// interp adds the trilinear interpolation of the coarse z to the fine u,
// ghosts included (they come out periodic since z's are).
func (w *MGWorker) interp(c *mgLevel, z []float64, f *mgLevel, u []float64) {
	w.interpWith(c, z, f, u, useAVX)
}

// interpWith is interp, its rows in assembly when vec is set (useAVX
// must hold then).
func (w *MGWorker) interpWith(c *mgLevel, z []float64, f *mgLevel, u []float64, vec bool) {
	mm1, mm2, mm3 := c.m1, c.m2, c.m3
	n1, n2 := f.m1, f.m2
	if vec && n1 < 2*(mm1-1) {
		panic(fmt.Sprintf("npb: interp: fine rows of %d points, coarse of %d", n1, mm1))
	}
	z1, z2, z3 := w.t1[:mm1], w.t2[:mm1], w.t3[:mm1]
	psc, psf := mm1*mm2, n1*n2
	for i3 := 0; i3 < mm3-1; i3++ {
		for i2 := 0; i2 < mm2-1; i2++ {
			o := mm1 * (i2 + mm2*i3)
			zc := z[o : o+mm1]
			zy := z[o+mm1 : o+2*mm1]
			zz := z[o+psc : o+psc+mm1]
			zyz := z[o+psc+mm1 : o+psc+2*mm1]
			for i1 := range z1 {
				z1[i1] = zy[i1] + zc[i1]
				z2[i1] = zz[i1] + zc[i1]
				z3[i1] = zyz[i1] + zz[i1] + z1[i1]
			}
			fo := n1 * (2*i2 + n2*2*i3)
			u00 := u[fo : fo+n1]
			u10 := u[fo+n1 : fo+2*n1]
			u01 := u[fo+psf : fo+psf+n1]
			u11 := u[fo+psf+n1 : fo+psf+2*n1]
			if vec {
				// u00 += zc exactly as 1·zc: x·1 is x.
				mgInterpRow(&u00[0], &zc[0], mm1-1, 1, 0.5)
				mgInterpRow(&u10[0], &z1[0], mm1-1, 0.5, 0.25)
				mgInterpRow(&u01[0], &z2[0], mm1-1, 0.5, 0.25)
				mgInterpRow(&u11[0], &z3[0], mm1-1, 0.25, 0.125)
				continue
			}
			for i1 := 0; i1 < mm1-1; i1++ {
				u00[2*i1] += zc[i1]
				u00[2*i1+1] += 0.5 * (zc[i1+1] + zc[i1])
			}
			for i1 := 0; i1 < mm1-1; i1++ {
				u10[2*i1] += 0.5 * z1[i1]
				u10[2*i1+1] += 0.25 * (z1[i1] + z1[i1+1])
			}
			for i1 := 0; i1 < mm1-1; i1++ {
				u01[2*i1] += 0.5 * z2[i1]
				u01[2*i1+1] += 0.25 * (z2[i1] + z2[i1+1])
			}
			for i1 := 0; i1 < mm1-1; i1++ {
				u11[2*i1] += 0.25 * z3[i1]
				u11[2*i1+1] += 0.125 * (z3[i1] + z3[i1+1])
			}
		}
	}
}

// norm2u3 returns the root mean square of x's interior over the whole grid
// and the largest absolute value.
func (w *MGWorker) norm2u3(cm comm, l *mgLevel, x []float64) (rnm2, rnmu float64, err error) {
	m1, m2, m3 := l.m1, l.m2, l.m3
	var s, mx float64
	for i3 := 1; i3 < m3-1; i3++ {
		for i2 := 1; i2 < m2-1; i2++ {
			row := x[m1*(i2+m2*i3):][:m1]
			for _, v := range row[1 : m1-1] {
				s += v * v
				// Not max(): its NaN and signed-zero rules cost a chain of
				// eight instructions per point on mx; a NaN makes s NaN
				// anyway.
				if a := math.Abs(v); a > mx {
					mx = a
				}
			}
		}
	}
	acc := []float64{s, mx}
	if err := allreduceSafe(cm, acc, func(acc, in []float64) {
		acc[0] += in[0]
		acc[1] = max(acc[1], in[1])
	}); err != nil {
		return 0, 0, err
	}
	n := float64(l.n) * float64(l.n) * float64(l.n)
	return math.Sqrt(acc[0] / n), acc[1], nil
}

// mgPoint is a candidate charge: a value and its global interior position.
type mgPoint struct {
	v          float64
	i1, i2, i3 int
}

// zran3 fills v (the finest level) with the reference's random charges:
// +1 at the ten largest and -1 at the ten smallest of a random field, 0
// elsewhere.
func (w *MGWorker) zran3(cm comm) error {
	l := &w.lv[w.lt]
	n, m2 := l.n, l.m2
	z := w.v
	clear(z)
	// The field's value at interior (i, j, k) is r_{1 + i + n(j + n k)}.
	row := make([]float64, n)
	var hiPts, loPts []mgPoint
	keep := func(pts []mgPoint, p mgPoint, better func(a, b float64) bool) []mgPoint {
		if len(pts) < 10 {
			return append(pts, p)
		}
		worst := 0
		for i := range pts {
			if better(pts[worst].v, pts[i].v) {
				worst = i
			}
		}
		if better(p.v, pts[worst].v) {
			pts[worst] = p
		}
		return pts
	}
	gt := func(a, b float64) bool { return a > b }
	lt := func(a, b float64) bool { return a < b }
	for i3 := 1; i3 < l.m3-1; i3++ {
		g3 := l.p0 + i3 - 1
		x := Skip(Seed, uint64(n)*uint64(n)*uint64(g3))
		for i2 := 1; i2 < m2-1; i2++ {
			Vranlc(&x, RandA, row)
			for i1, v := range row {
				p := mgPoint{v, i1 + 1, i2, g3 + 1}
				hiPts = keep(hiPts, p, gt)
				loPts = keep(loPts, p, lt)
			}
		}
	}
	// Rank 0 picks the global extremes and tells everyone.
	enc := func(pts []mgPoint) []float64 {
		out := make([]float64, 0, 4*len(pts))
		for _, p := range pts {
			out = append(out, p.v, float64(p.i1), float64(p.i2), float64(p.i3))
		}
		return out
	}
	dec := func(b []float64) []mgPoint {
		var pts []mgPoint
		for i := 0; i+3 < len(b); i += 4 {
			pts = append(pts, mgPoint{b[i], int(b[i+1]), int(b[i+2]), int(b[i+3])})
		}
		return pts
	}
	pick := func() []float64 {
		slices.SortFunc(hiPts, func(a, b mgPoint) int { return cmp.Compare(b.v, a.v) })
		slices.SortFunc(loPts, func(a, b mgPoint) int { return cmp.Compare(a.v, b.v) })
		return append(enc(hiPts[:min(10, len(hiPts))]), enc(loPts[:min(10, len(loPts))])...)
	}
	np, me := cm.size(), cm.rank()
	var charges []float64
	if c, m, ok := teamOf(cm); ok {
		// Every rank gathers every rank's candidates, in rank order, at
		// safe points, and picks what rank 0 picks below.
		his, err := task.Allgatherv(c, m, enc(hiPts))
		if err != nil {
			return err
		}
		los, err := task.Allgatherv(c, m, enc(loPts))
		if err != nil {
			return err
		}
		hiPts, loPts = nil, nil
		for r := range his {
			hiPts, loPts = append(hiPts, dec(his[r])...), append(loPts, dec(los[r])...)
		}
		charges = pick()
	} else if me == 0 {
		for r := 1; r < np; r++ {
			var hb, lb []float64
			if err := cm.recv(r, tagGather, &hb); err != nil {
				return err
			}
			if err := cm.recv(r, tagGather, &lb); err != nil {
				return err
			}
			hiPts = append(hiPts, dec(hb)...)
			loPts = append(loPts, dec(lb)...)
		}
		charges = pick()
		for r := 1; r < np; r++ {
			if err := cm.send(r, tagBcast, charges); err != nil {
				return err
			}
		}
	} else {
		if err := cm.send(0, tagGather, enc(hiPts)); err != nil {
			return err
		}
		if err := cm.send(0, tagGather, enc(loPts)); err != nil {
			return err
		}
		if err := cm.recv(0, tagBcast, &charges); err != nil {
			return err
		}
	}
	pts := dec(charges)
	if len(pts) != mgCharges {
		return fmt.Errorf("MG zran3: %d charges, want %d", len(pts), mgCharges)
	}
	w.Charges = make([]int, 0, 3*mgCharges)
	for _, p := range pts {
		w.Charges = append(w.Charges, p.i1, p.i2, p.i3)
	}
	if err := checkCharges(w.Charges, n); err != nil {
		return fmt.Errorf("MG zran3: %w", err)
	}
	for lz := 1; lz < l.m3-1; lz++ {
		chargePlane(l, z, w.Charges, lz, l.p0+lz-1)
	}
	return w.comm3(cm, l, z)
}

// mgCharges is the number of zran3's charges: ten of +1, ten of -1.
const mgCharges = 20

// checkCharges checks that charges holds mgCharges coordinate triples, each
// coordinate an interior index 1..n.
func checkCharges(charges []int, n int) error {
	if len(charges) != 3*mgCharges {
		return fmt.Errorf("%d charge coordinates, want %d", len(charges), 3*mgCharges)
	}
	for i, c := range charges {
		if c < 1 || c > n {
			return fmt.Errorf("charge %d: coordinate %d out of 1..%d", i/3, c, n)
		}
	}
	return nil
}

// chargePlane sets into plane lz of z the charges on global interior plane
// g (0-based), in their order: a later one overwrites an earlier one at
// the same point.
func chargePlane(l *mgLevel, z []float64, charges []int, lz, g int) {
	m1, m2 := l.m1, l.m2
	for i := range mgCharges {
		i1, i2, i3 := charges[3*i], charges[3*i+1], charges[3*i+2]
		if i3-1 != g {
			continue
		}
		val := 1.0
		if i >= mgCharges/2 {
			val = -1
		}
		z[i1+m1*(i2+m2*lz)] = val
	}
}

// rebuildV rebuilds v, with its ghosts, from w.Charges (checked) without
// communication: every plane of the slab, ghost planes included, gets the
// charges of its global plane, periodic in the third dimension, then its
// in-plane ghosts as comm3 fills them. The result is what zran3 and its
// comm3 make.
func (w *MGWorker) rebuildV(l *mgLevel, v []float64) {
	clear(v)
	for lz := range l.m3 {
		g := ((l.p0+lz-1)%l.n + l.n) % l.n
		chargePlane(l, v, w.Charges, lz, g)
	}
	planeGhosts(l, v, 0, l.m3)
}

// rebuildR rebuilds r = resid(u, v) at a safe point without communication:
// the interior by resid's own code, the in-plane ghosts by comm3's, and the
// ghost planes from RLo and RHi (checked).
func (w *MGWorker) rebuildR(l *mgLevel, u, v, r []float64) {
	w.residInterior(l, u, v, r)
	planeGhosts(l, r, 1, l.m3-1)
	lo, hi := ghostPlanes(l, r)
	copy(lo, w.RLo)
	copy(hi, w.RHi)
}

// saveGhosts copies r's ghost planes into RLo and RHi.
func (w *MGWorker) saveGhosts(l *mgLevel, r []float64) {
	lo, hi := ghostPlanes(l, r)
	copy(w.RLo, lo)
	copy(w.RHi, hi)
}

// Stages of a timed MG iteration (MGWorker.Stage).
const (
	mgStep         = iota // at the iteration's start
	mgInterpolated        // the coarse correction is added to U
	mgSmoothed            // the finest smoothing is in U's interior
)

// mgHaloMsgs is the number of messages of one ghost-plane exchange: two
// planes sent, two received.
const mgHaloMsgs = 4

// mg3P is one V-cycle.
func (w *MGWorker) mg3P(cm comm) error {
	if err := w.coarse(cm); err != nil {
		return err
	}
	f := &w.lv[w.lt]
	w.interp(&w.lv[w.lt-1], w.lv[w.lt-1].u, f, f.u)
	if err := w.resid(cm, f, f.u, w.v, f.r); err != nil {
		return err
	}
	return w.psinv(cm, f, f.r, f.u)
}

// iterStaged is a timed iteration, mg3P and then the finest residual, on
// the team's task.Comm: the steps that change U each end at a safe point
// (w.Stage), so that U at every wait of a step is what the step started
// from, and the finest grid's exchanges, the only waits after the first
// of them, are haloStaged's, which Run re-entered carries on from where
// they stopped (w.Halo). The way down to the coarsest grid and up to the
// one below the finest reads the finest r and writes only the coarse
// levels, which the cycle rebuilds: Run re-entered there replays it.
func (w *MGWorker) iterStaged(cm comm, h *hooks) error {
	f := &w.lv[w.lt]
	if w.Stage == mgStep {
		if err := w.coarse(cm); err != nil {
			return err
		}
		w.interp(&w.lv[w.lt-1], w.lv[w.lt-1].u, f, f.u)
		w.Stage, w.Halo = mgInterpolated, 0
		if err := h.safe(); err != nil {
			return err
		}
	}
	if w.Stage == mgInterpolated {
		w.residInterior(f, f.u, w.v, f.r)
		planeGhosts(f, f.r, 1, f.m3-1)
		if err := w.haloStaged(cm, f, f.r, 0); err != nil {
			return err
		}
		w.smooth(f, f.r, f.u)
		w.Stage, w.Halo = mgSmoothed, 0
		if err := h.safe(); err != nil {
			return err
		}
	}
	if w.Halo < mgHaloMsgs {
		planeGhosts(f, f.u, 1, f.m3-1)
		if err := w.haloStaged(cm, f, f.u, 0); err != nil {
			return err
		}
	}
	w.residInterior(f, f.u, w.v, f.r)
	planeGhosts(f, f.r, 1, f.m3-1)
	return w.haloStaged(cm, f, f.r, mgHaloMsgs)
}

// haloStaged is exchange3 for x, the finest u or r, in a stage of
// iterStaged: the same messages, numbered from first on, w.Halo counting
// those of the stage that are done. Each receive is a safe point on the
// team's task.Comm (recvSliceSafe), where Run re-entered makes only the
// messages not done. r's boundary planes go in place, as exchange3's
// do; U's are copied into w.sendPlanes first and go in place from
// there (U is the state, which task.InPlace keeps for copies): a
// neighbour has received them before it sends the finest r's planes that
// this task receives before it writes them again, an iteration later.
// The ghost planes received for r are also kept in RLo and RHi, from
// which setup rebuilds them with r.
func (w *MGWorker) haloStaged(cm comm, l *mgLevel, x []float64, first int) error {
	ps, m3 := l.planeSize(), l.m3
	lo, hi := ghostPlanes(l, x)
	np, me := cm.size(), cm.rank()
	down, up := (me-1+np)%np, (me+1)%np
	isU := &x[0] == &w.U[0]
	send := func(to, tag int, plane, buf []float64) error {
		if isU {
			copy(buf, plane)
			plane = buf
		}
		return cm.sendInPlace(to, tag, plane)
	}
	recv := func(from, tag int, dst, keep []float64) error {
		in, err := recvSliceSafe(cm, from, tag, len(dst), task.Payload.Float64s)
		if err != nil {
			return err
		}
		copy(dst, in)
		if !isU {
			copy(keep, in)
		}
		return nil
	}
	msgs := [mgHaloMsgs]func() error{
		func() error { return send(down, tagHalo, x[ps:2*ps], w.sendPlanes[0]) },
		func() error { return send(up, tagHalo+100, x[ps*(m3-2):ps*(m3-1)], w.sendPlanes[1]) },
		func() error { return recv(up, tagHalo, hi, w.RHi) },
		func() error { return recv(down, tagHalo+100, lo, w.RLo) },
	}
	for i, msg := range msgs {
		if first+i < w.Halo {
			continue
		}
		if err := msg(); err != nil {
			return fmt.Errorf("MG halo: %w", err)
		}
		w.Halo = first + i + 1
	}
	return nil
}

// coarse is the V-cycle down to the coarsest grid and up to the one below
// the finest, from the finest r: it leaves the correction in lv[lt-1].u.
func (w *MGWorker) coarse(cm comm) error {
	lt, kr := w.lt, w.kr
	lv := w.lv
	bottom := 1
	if kr > 0 {
		bottom = kr
	}
	// Down the distributed levels.
	for k := lt; k > bottom; k-- {
		if err := w.rprj3(cm, &lv[k], lv[k].r, &lv[k-1], lv[k-1].r); err != nil {
			return err
		}
	}
	var solo comm = soloComm{}
	if kr > 0 {
		// Gather level kr and run the bottom of the cycle on every task.
		f := w.full
		bounds := make([]int, cm.size()+1)
		ps := lv[kr].m1 * lv[kr].m2
		for r := range bounds {
			bounds[r] = ps * (1 + r*(lv[kr].m3-2))
		}
		copy(f[kr].r[ps*(1+lv[kr].p0):], lv[kr].r[ps:ps*(lv[kr].m3-1)])
		if err := allgathervSafe(cm, f[kr].r, bounds); err != nil {
			return err
		}
		if err := w.comm3(solo, &f[kr], f[kr].r); err != nil {
			return err
		}
		for k := kr; k > 1; k-- {
			if err := w.rprj3(solo, &f[k], f[k].r, &f[k-1], f[k-1].r); err != nil {
				return err
			}
		}
		clear(f[1].u)
		if err := w.psinv(solo, &f[1], f[1].r, f[1].u); err != nil {
			return err
		}
		for k := 2; k <= kr; k++ {
			if err := w.upStep(solo, &f[k-1], &f[k]); err != nil {
				return err
			}
		}
		// Back to slabs: this task's planes of u at level kr, with ghosts.
		copy(lv[kr].u, f[kr].u[ps*lv[kr].p0:])
	} else {
		clear(lv[1].u)
		if err := w.psinv(cm, &lv[1], lv[1].r, lv[1].u); err != nil {
			return err
		}
	}
	for k := bottom + 1; k < lt; k++ {
		if err := w.upStep(cm, &lv[k-1], &lv[k]); err != nil {
			return err
		}
	}
	return nil
}

// upStep does one level of the cycle's way up: u(k) = interp(u(k-1)),
// r(k) -= A·u(k), u(k) += C·r(k).
func (w *MGWorker) upStep(cm comm, c, f *mgLevel) error {
	clear(f.u)
	w.interp(c, c.u, f, f.u)
	if err := w.resid(cm, f, f.u, f.r, f.r); err != nil {
		return err
	}
	return w.psinv(cm, f, f.r, f.u)
}

func (w *MGWorker) setup(cm comm) error {
	p, err := MGParamsFor(w.Class)
	if err != nil {
		return err
	}
	p.Nit = w.iters(p.Nit)
	w.p, w.lt = p, p.Levels()
	np, me := cm.size(), cm.rank()
	w.kr = 0
	if np > 2 {
		w.kr = ilog2(np)
	}
	w.lv = make([]mgLevel, w.lt+1)
	for k := 1; k < w.lt; k++ {
		if k < w.kr {
			continue // replicated only
		}
		w.lv[k] = newLevel(1<<k, np, me, true)
	}
	if w.kr > 0 {
		w.full = make([]mgLevel, w.kr+1)
		for k := 1; k <= w.kr; k++ {
			w.full[k] = newLevel(1<<k, np, me, false)
		}
	}
	// The finest level: u is the state, v and r are allocated here once
	// and rebuilt from the state when it holds a run in progress.
	fl := &w.lv[w.lt]
	*fl = levelShape(1<<w.lt, np, me, true)
	size, ps := fl.size(), fl.planeSize()
	if w.U == nil && !w.Init {
		w.U = make([]float64, size)
	}
	if len(w.U) != size {
		return fmt.Errorf("MG state: u has %d points, want %d", len(w.U), size)
	}
	if w.Warm && !w.Init {
		return errors.New("MG state: warmed up without charges")
	}
	if w.Init {
		if err := checkCharges(w.Charges, fl.n); err != nil {
			return fmt.Errorf("MG state: %w", err)
		}
	}
	if w.Warm {
		if len(w.RLo) != ps || len(w.RHi) != ps {
			return fmt.Errorf("MG state: r's ghost planes have %d and %d points, want %d", len(w.RLo), len(w.RHi), ps)
		}
	} else {
		w.RLo, w.RHi = make([]float64, ps), make([]float64, ps)
	}
	if err := w.checkStage(); err != nil {
		return fmt.Errorf("MG state: %w", err)
	}
	fl.u = w.U
	if np > 1 {
		w.sendPlanes = [2][]float64{make([]float64, ps), make([]float64, ps)}
	}
	w.v, fl.r = make([]float64, size), make([]float64, size)
	w.a = [4]float64{-8.0 / 3.0, 0, 1.0 / 6.0, 1.0 / 12.0}
	w.c = p.Smoother()
	w.t1 = make([]float64, fl.m1)
	w.t2 = make([]float64, fl.m1)
	w.t3 = make([]float64, fl.m1)
	if w.Init {
		w.rebuildV(fl, w.v)
	}
	if w.Warm {
		w.rebuildR(fl, fl.u, w.v, fl.r)
	}
	return nil
}

// checkStage checks Stage and Halo: a stage that exists, past the start
// only once warmed up, and messages within the stage's exchanges.
func (w *MGWorker) checkStage() error {
	most := map[int]int{mgStep: 0, mgInterpolated: mgHaloMsgs, mgSmoothed: 2 * mgHaloMsgs}
	m, ok := most[w.Stage]
	if !ok || (w.Stage != mgStep && !w.Warm) || w.Halo < 0 || w.Halo > m {
		return fmt.Errorf("stage %d with %d halo messages done (warmed up: %v)", w.Stage, w.Halo, w.Warm)
	}
	return nil
}

func (w *MGWorker) run(cm comm, h *hooks) (*Report, error) {
	if err := w.setup(cm); err != nil {
		return nil, err
	}
	p, fl := w.p, &w.lv[w.lt]
	// Each step below runs from a safe point to the next, its waits
	// safe points too (on the team's task.Comm): U changes only after a
	// step's last exchange, or at the start of the warm-up, which starts
	// from U = 0, and the step ends at a safe point, so Run re-entered at
	// a wait goes straight to the step (setup rebuilt v and r from the
	// fields) and replays it.
	_, _, staged := teamOf(cm)
	staged = (staged || h.stages) && cm.size() > 1
	if !w.Init {
		if err := w.zran3(cm); err != nil {
			return nil, err
		}
		w.Init = true
		if err := h.safe(); err != nil {
			return nil, err
		}
	}
	if !w.Warm {
		// Untimed: one V-cycle from u = 0, then start again from u = 0.
		clear(fl.u)
		if err := w.resid(cm, fl, fl.u, w.v, fl.r); err != nil {
			return nil, err
		}
		if err := w.mg3P(cm); err != nil {
			return nil, err
		}
		clear(fl.u)
		if err := barrierSafe(cm); err != nil {
			return nil, err
		}
		w.startTimer(cm, h)
		if err := w.resid(cm, fl, fl.u, w.v, fl.r); err != nil {
			return nil, err
		}
		if _, _, err := w.norm2u3(cm, fl, fl.r); err != nil {
			return nil, err
		}
		w.Warm = true
		w.saveGhosts(fl, fl.r)
		if err := h.safe(); err != nil {
			return nil, err
		}
	}
	for w.It < p.Nit {
		if staged {
			if err := w.iterStaged(cm, h); err != nil {
				return nil, err
			}
		} else {
			if err := w.mg3P(cm); err != nil {
				return nil, err
			}
			if err := w.resid(cm, fl, fl.u, w.v, fl.r); err != nil {
				return nil, err
			}
		}
		w.It, w.Stage, w.Halo = w.It+1, mgStep, 0
		h.report(w.It, p.Nit)
		w.saveGhosts(fl, fl.r)
		if err := h.safe(); err != nil {
			return nil, err
		}
	}
	rnm2, _, err := w.norm2u3(cm, fl, fl.r)
	if err != nil {
		return nil, err
	}
	if cm.rank() != 0 {
		return nil, nil
	}
	t := w.elapsed(h)
	r := w.finish("mg", p.Nit, t, p.Mop())
	r.Values.Rnm2 = &rnm2
	Verify(r)
	return r, nil
}
