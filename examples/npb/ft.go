package npb

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/dpvm/dpvm/task"
)

// FTWorker is one task of FT. The grid is split into slabs of z-planes
// (layout A: x fastest, then y, then z); the x and y transforms run on the
// slab, and with more than one task the z transforms run after a transpose
// into slabs of y-planes (layout B: x fastest, then z, then y), where the
// spectrum then lives. With one task the z transforms run in place. The
// evolving spectrum is the worker's state.
type FTWorker struct {
	Place
	Warm bool         // the untimed warm-up is done
	Init bool         // the timed region's set-up and forward FFT are done
	It   int          // iterations done
	U0   []float64    // the spectrum (complex, re/im interleaved)
	Sums [][2]float64 // checksums of the iterations done

	p        FTParams
	nzl, nyl int // local planes in layouts A and B
	z0, y0   int
	spec     bool // true: the spectrum is in layout B
	u1       []complex128
	tw       []float64 // the evolution factors, in the spectrum's layout
	roots    map[int][]complex128
	x, y     []complex128 // transform scratch
	// planes are the two y-planes (layout B) the inverse transform
	// alternates between: each holds a plane's z-transforms while its
	// lines go to the other tasks in place (see inverseZ).
	planes [2][]complex128
	chunk  int // values per transpose message; 0 is ftChunk
}

func (w *FTWorker) place() *Place { return &w.Place }

// Run executes the worker as a dpvm task.
func (w *FTWorker) Run(c *task.Ctx) error { return runWorker(c, w) }

// cplx views interleaved re/im floats as complex numbers.
func cplx(f []float64) []complex128 {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*complex128)(unsafe.Pointer(&f[0])), len(f)/2)
}

// ftBlock is how many lines are transformed together.
const ftBlock = 32

// rootsFor returns ω_n^k = exp(-2πi k/n) for k < n.
func (w *FTWorker) rootsFor(n int) []complex128 {
	if r, ok := w.roots[n]; ok {
		return r
	}
	r := make([]complex128, n)
	for k := range r {
		s, c := math.Sincos(-2 * math.Pi * float64(k) / float64(n))
		r[k] = complex(c, s)
	}
	w.roots[n] = r
	return r
}

// fftLines transforms nl lines of length n in place: line l's element t is
// u[off + l*lineStep + t*stride]. inverse selects the conjugate roots (no
// scaling, as in the reference).
func (w *FTWorker) fftLines(u []complex128, off, lineStep, stride, n, nl int, inverse bool) {
	roots := w.rootsFor(n)
	for l0 := 0; l0 < nl; l0 += ftBlock {
		b := min(ftBlock, nl-l0)
		x, y := w.x[:n*b], w.y[:n*b]
		base := off + l0*lineStep
		if lineStep == 1 {
			for t := range n {
				o := base + t*stride
				copy(x[t*b:t*b+b], u[o:o+b])
			}
		} else {
			gatherLines(x, u, base, lineStep, stride, n, b)
		}
		res := stockham(x, y, n, b, roots, inverse, useAVX)
		if lineStep == 1 {
			for t := range n {
				o := base + t*stride
				copy(u[o:o+b], res[t*b:t*b+b])
			}
		} else {
			scatterLines(u, res, base, lineStep, stride, n, b)
		}
	}
}

// gatherLines interleaves b lines of n elements (line l's element t at
// u[base + l·lineStep + t·stride]) into x (at x[t·b + l]), four lines at a
// time: four read streams and whole cache lines written, where one line
// per element t would hit b addresses lineStep apart (the same cache set
// when lineStep·16 is a multiple of 4 KiB) for every t.
func gatherLines(x, u []complex128, base, lineStep, stride, n, b int) {
	l := 0
	for ; l+4 <= b; l += 4 {
		u0, u1 := u[base+l*lineStep:], u[base+(l+1)*lineStep:]
		u2, u3 := u[base+(l+2)*lineStep:], u[base+(l+3)*lineStep:]
		for t := range n {
			o := t * stride
			d := x[t*b+l:][:4]
			d[0], d[1], d[2], d[3] = u0[o], u1[o], u2[o], u3[o]
		}
	}
	for ; l < b; l++ {
		for t := range n {
			x[t*b+l] = u[base+l*lineStep+t*stride]
		}
	}
}

// scatterLines is the inverse of gatherLines: it copies x[t·b + l] back to
// u[base + l·lineStep + t·stride], four lines at a time.
func scatterLines(u, x []complex128, base, lineStep, stride, n, b int) {
	l := 0
	for ; l+4 <= b; l += 4 {
		u0, u1 := u[base+l*lineStep:], u[base+(l+1)*lineStep:]
		u2, u3 := u[base+(l+2)*lineStep:], u[base+(l+3)*lineStep:]
		for t := range n {
			o := t * stride
			s := x[t*b+l:][:4]
			u0[o], u1[o], u2[o], u3[o] = s[0], s[1], s[2], s[3]
		}
	}
	for ; l < b; l++ {
		for t := range n {
			u[base+l*lineStep+t*stride] = x[t*b+l]
		}
	}
}

// stockham transforms b interleaved sequences of length n (element t of
// sequence l at x[t*b+l]) with the Stockham autosort algorithm (radix 4,
// and one radix-2 pass when log2 n is odd), using y as scratch, and returns
// the buffer holding the result. roots holds ω_n^k for k < n; inverse
// uses their conjugates. With vec (useAVX must hold then), each group of
// butterflies runs in assembly (ft_amd64.s), bit-identical.
func stockham(x, y []complex128, n, b int, roots []complex128, inverse, vec bool) []complex128 {
	x, y = x[:n*b], y[:n*b]
	m, s := n, 1
	if ilog2(n)%2 == 1 {
		half := n / 2
		run := b
		for p := range half {
			wr, wi := real(roots[p]), imag(roots[p])
			if inverse {
				wi = -wi
			}
			if vec {
				ftRadix2(&y[run*2*p:][:2*run][0], &x[run*p:][:run+run*half][0], run, run*half, wr, wi)
				continue
			}
			a := x[run*p:][:run]
			c := x[run*(p+half):][:run]
			y0 := y[run*2*p:][:run]
			y1 := y[run*(2*p+1):][:run]
			for q, av := range a {
				cv := c[q]
				y0[q] = av + cv
				dr, di := real(av)-real(cv), imag(av)-imag(cv)
				y1[q] = complex(float64(dr*wr)-float64(di*wi), float64(dr*wi)+float64(di*wr))
			}
		}
		x, y = y, x
		m, s = half, 2
	}
	sign := 1.0 // j·(b-d) with j = i forward, -i inverse
	if inverse {
		sign = -1
	}
	for ; m >= 4; m, s = m/4, s*4 {
		q4 := m / 4
		run := s * b
		for p := range q4 {
			w1, w2, w3 := roots[p*s], roots[2*p*s], roots[3*p*s]
			w1r, w1i := real(w1), imag(w1)
			w2r, w2i := real(w2), imag(w2)
			w3r, w3i := real(w3), imag(w3)
			if inverse {
				w1i, w2i, w3i = -w1i, -w2i, -w3i
			}
			if vec {
				tw := [6]float64{w1r, w1i, w2r, w2i, w3r, w3i}
				ftRadix4(&y[run*4*p:][:4*run][0], &x[run*p:][:run+3*run*q4][0], run, run*q4, &tw, sign)
				continue
			}
			xa := x[run*p:][:run]
			xb := x[run*(p+q4):][:run]
			xc := x[run*(p+2*q4):][:run]
			xd := x[run*(p+3*q4):][:run]
			y0 := y[run*4*p:][:run]
			y1 := y[run*(4*p+1):][:run]
			y2 := y[run*(4*p+2):][:run]
			y3 := y[run*(4*p+3):][:run]
			for q, a := range xa {
				bb, c, d := xb[q], xc[q], xd[q]
				apcR, apcI := real(a)+real(c), imag(a)+imag(c)
				amcR, amcI := real(a)-real(c), imag(a)-imag(c)
				bpdR, bpdI := real(bb)+real(d), imag(bb)+imag(d)
				// j·(b-d)
				jR, jI := float64(-sign*(imag(bb)-imag(d))), float64(sign*(real(bb)-real(d)))
				y0[q] = complex(apcR+bpdR, apcI+bpdI)
				t1R, t1I := amcR-jR, amcI-jI
				y1[q] = complex(float64(t1R*w1r)-float64(t1I*w1i), float64(t1R*w1i)+float64(t1I*w1r))
				t2R, t2I := apcR-bpdR, apcI-bpdI
				y2[q] = complex(float64(t2R*w2r)-float64(t2I*w2i), float64(t2R*w2i)+float64(t2I*w2r))
				t3R, t3I := amcR+jR, amcI+jI
				y3[q] = complex(float64(t3R*w3r)-float64(t3I*w3i), float64(t3R*w3i)+float64(t3I*w3r))
			}
		}
		x, y = y, x
	}
	return x
}

// forward transforms u (layout A) in 3-D and returns the spectrum: u itself
// with one task; with more, spec (layout B), which u is transposed into.
func (w *FTWorker) forward(cm comm, u, spec []complex128) ([]complex128, error) {
	p := w.p
	nx, ny, nz := p.NX, p.NY, p.NZ
	for k := range w.nzl {
		w.fftLines(u, nx*ny*k, nx, 1, nx, ny, false)
		w.fftLines(u, nx*ny*k, 1, nx, ny, nx, false)
	}
	if !w.spec {
		for j := range ny {
			w.fftLines(u, nx*j, 1, nx*ny, nz, nx, false)
		}
		return u, nil
	}
	if err := w.transposeAB(cm, u, spec); err != nil {
		return nil, err
	}
	for j := range w.nyl {
		w.fftLines(spec, nx*nz*j, 1, nx, nz, nx, false)
	}
	return spec, nil
}

// evolveInverse multiplies the spectrum u0 by the evolution factors tw
// and transforms the product back in 3-D into out (layout A); u0 is left
// as it is (advance makes it the next iteration's spectrum once the
// step's exchanges are done). With one task
// the product goes into out and is transformed there; with more,
// inverseZ transforms and transposes it plane by plane, so no grid-sized
// copy of the spectrum is made.
func (w *FTWorker) evolveInverse(cm comm, u0 []complex128, tw []float64, out []complex128) error {
	p := w.p
	nx, ny, nz := p.NX, p.NY, p.NZ
	if !w.spec {
		evolve(u0, tw, out[:len(u0)])
		for j := range ny {
			w.fftLines(out, nx*j, 1, nx*ny, nz, nx, true)
		}
	} else if err := w.inverseZ(cm, u0, tw, out); err != nil {
		return err
	}
	for k := range w.nzl {
		w.fftLines(out, nx*ny*k, 1, nx, ny, nx, true)
		w.fftLines(out, nx*ny*k, nx, 1, nx, ny, true)
	}
	return nil
}

// evolve writes the product of u0 and tw, element-wise, into dst.
func evolve(u0 []complex128, tw []float64, dst []complex128) {
	tw, dst = tw[:len(u0)], dst[:len(u0)]
	for i, t := range tw {
		dst[i] = complex(real(u0[i])*t, imag(u0[i])*t)
	}
}

// advance multiplies u0 by tw element-wise, in place: the product evolve
// computed, to the bit.
func advance(u0 []complex128, tw []float64) {
	evolve(u0, tw, u0)
}

// inverseZ evolves the spectrum u0 (layout B) and runs its inverse z
// transforms y-plane by y-plane, each in one of two plane buffers, and
// sends each task the plane's lines of its z-planes straight from that
// buffer, in place and in chunks of whole lines: the lines for a task are
// consecutive there. It unpacks the lines received into out (layout A).
//
// A buffer is written again two planes later. By then this task has
// received a chunk of the next plane from every other task, which that
// task sent only after it had received, and unpacked, every chunk of this
// plane: the receivers are done with the buffer.
func (w *FTWorker) inverseZ(cm comm, u0 []complex128, tw []float64, out []complex128) error {
	nx, nzl := w.p.NX, w.nzl
	plane := nx * w.p.NZ
	for jl := range w.nyl {
		pl := w.planes[jl%2]
		evolve(u0[plane*jl:][:plane], tw[plane*jl:][:plane], pl)
		w.fftLines(pl, 0, 1, nx, w.p.NZ, nx, true)
		if err := w.exchangeLines(cm, nzl,
			func(q, kl int) []complex128 { return pl[nx*(q*nzl+kl):] },
			func(q, kl int, line []complex128) { copy(out[w.lineA(q, jl, kl):][:nx], line) }); err != nil {
			return err
		}
	}
	return nil
}

// transposeAB moves every x-line of u (layout A, z-slabs) to spec (layout
// B, y-slabs), z-plane by z-plane. The lines of a plane that go to one
// task are consecutive in u, so each task gets them straight from u, in
// place and in chunks of whole lines; the lines received are unpacked into
// spec. u is written again only after the barrier that ends the
// transpose, once every task has unpacked what it received.
func (w *FTWorker) transposeAB(cm comm, u, spec []complex128) error {
	nx := w.p.NX
	for kl := range w.nzl {
		if err := w.exchangeLines(cm, w.nyl,
			func(q, jl int) []complex128 { return u[w.lineA(q, jl, kl):] },
			func(q, jl int, line []complex128) { copy(spec[w.lineB(q, jl, kl):][:nx], line) }); err != nil {
			return err
		}
	}
	if err := barrierSafe(cm); err != nil {
		return fmt.Errorf("FT transpose: %w", err)
	}
	return nil
}

// exchangeLines is the all-to-all of a transpose: this task has n x-lines
// for each task q, line l starting at from(q, l) (q's n lines consecutive
// there), and hands every line l it gets from task q to to(q, l, line).
// Its own lines go straight across; the others are sent in place, in
// chunks of whole lines (w.chunk values at most, at least one line), and
// handed over from the message they arrived in.
//
// On the team's task.Comm (teamOf) each chunk goes in one task.Alltoallv
// (copied, not in place), a safe point while it waits, whose results Run
// re-entered replays.
func (w *FTWorker) exchangeLines(cm comm, n int, from func(q, l int) []complex128, to func(q, l int, line []complex128)) error {
	nx := w.p.NX
	np, me := cm.size(), cm.rank()
	for l := range n {
		to(me, l, from(me, l)[:nx])
	}
	chunk := w.chunk
	if chunk <= 0 {
		chunk = ftChunk
	}
	step := max(1, chunk/nx)
	c, team, safe := teamOf(cm)
	for l0 := 0; l0 < n; l0 += step {
		l1 := min(n, l0+step)
		m := (l1 - l0) * nx
		if safe {
			if err := w.exchangeChunk(c, team, l0, l1, from, to); err != nil {
				return err
			}
			continue
		}
		for k := 1; k < np; k++ {
			dst, src := (me+k)%np, (me-k+np)%np
			if err := cm.sendInPlace(dst, tagTranspose, from(dst, l0)[:m]); err != nil {
				return fmt.Errorf("FT transpose: %w", err)
			}
			in, err := recvSlice(cm, src, tagTranspose, m, task.Payload.Complex128s)
			if err != nil {
				return fmt.Errorf("FT transpose: %w", err)
			}
			for l := l0; l < l1; l++ {
				to(src, l, in[nx*(l-l0):][:nx])
			}
		}
	}
	return nil
}

// exchangeChunk is exchangeLines' all-to-all of lines l0..l1-1 on the
// team's task.Comm.
func (w *FTWorker) exchangeChunk(c *task.Ctx, team *task.Comm, l0, l1 int, from func(q, l int) []complex128, to func(q, l int, line []complex128)) error {
	nx, m := w.p.NX, (l1-l0)*w.p.NX
	send := make([][]complex128, team.Size())
	for q := range send {
		if q != team.Rank {
			send[q] = from(q, l0)[:m]
		}
	}
	got, err := task.Alltoallv(c, team, send)
	if err != nil {
		return fmt.Errorf("FT transpose: %w", err)
	}
	for q, in := range got {
		if q == team.Rank {
			continue
		}
		if len(in) != m {
			return fmt.Errorf("FT transpose: %d values from rank %d, want %d", len(in), q, m)
		}
		for l := l0; l < l1; l++ {
			to(q, l, in[nx*(l-l0):][:nx])
		}
	}
	return nil
}

// lineA is where x-line (jl, kl) of block q starts in layout A, whose
// local planes are z-planes: global y = q·nyl + jl, local z = kl.
func (w *FTWorker) lineA(q, jl, kl int) int {
	return w.p.NX * ((q*w.nyl + jl) + w.p.NY*kl)
}

// lineB is the same in layout B, whose local planes are y-planes: global
// z = q·nzl + kl, local y = jl.
func (w *FTWorker) lineB(q, jl, kl int) int {
	return w.p.NX * ((q*w.nzl + kl) + w.p.NZ*jl)
}

// ftChunk is the most complex values one transpose message carries (2 MiB).
// A task's lines for another are sent in chunks of whole lines, so that
// each message stays small.
const ftChunk = 1 << 17

// initialConditions fills u (layout A) with the reference's random field:
// one stream, 2·nx numbers per x-line.
func (w *FTWorker) initialConditions(u []complex128) {
	nx, ny := w.p.NX, w.p.NY
	f := unsafe.Slice((*float64)(unsafe.Pointer(&u[0])), 2*len(u))
	for kl := range w.nzl {
		x := Skip(Seed, 2*uint64(nx)*uint64(ny)*uint64(w.z0+kl))
		Vranlc(&x, RandA, f[2*nx*ny*kl:2*nx*ny*(kl+1)])
	}
}

// indexMap computes the evolution factors exp(-4απ²(i²+j²+k²)) for the
// spectrum's layout, with frequencies folded to [-n/2, n/2).
func (w *FTWorker) indexMap() {
	nx, ny, nz := w.p.NX, w.p.NY, w.p.NZ
	ap := -4 * ftAlpha * math.Pi * math.Pi
	fold := func(i, n int) int { v := (i+n/2)%n - n/2; return v * v }
	idx := 0
	if w.spec {
		for jl := range w.nyl {
			jj := fold(w.y0+jl, ny)
			for k := range nz {
				kk := fold(k, nz)
				for i := range nx {
					w.tw[idx] = math.Exp(ap * float64(fold(i, nx)+jj+kk))
					idx++
				}
			}
		}
		return
	}
	for kl := range w.nzl {
		kk := fold(w.z0+kl, nz)
		for j := range ny {
			jj := fold(j, ny)
			for i := range nx {
				w.tw[idx] = math.Exp(ap * float64(fold(i, nx)+jj+kk))
				idx++
			}
		}
	}
}

// checksum sums the reference's 1024 sample points of u (layout A) over
// all tasks, divided by the number of points.
func (w *FTWorker) checksum(cm comm, u []complex128) (complex128, error) {
	nx, ny, nz := w.p.NX, w.p.NY, w.p.NZ
	var s complex128
	for j := 1; j <= 1024; j++ {
		q, r, k := j%nx, (3*j)%ny, (5*j)%nz
		if k >= w.z0 && k < w.z0+w.nzl {
			s += u[q+nx*(r+ny*(k-w.z0))]
		}
	}
	acc := []float64{real(s), imag(s)}
	if err := sumSafe(cm, acc); err != nil {
		return 0, err
	}
	n := float64(nx) * float64(ny) * float64(nz)
	return complex(acc[0]/n, acc[1]/n), nil
}

func (w *FTWorker) setup(cm comm) error {
	p, err := FTParamsFor(w.Class)
	if err != nil {
		return err
	}
	p.Niter = w.iters(p.Niter)
	w.p = p
	np, me := cm.size(), cm.rank()
	w.nzl, w.nyl = p.NZ/np, p.NY/np
	w.z0, w.y0 = me*w.nzl, me*w.nyl
	w.spec = np > 1
	local := p.NX * p.NY * w.nzl
	w.u1 = make([]complex128, local)
	if w.spec {
		plane := p.NX * p.NZ
		w.planes = [2][]complex128{make([]complex128, plane), make([]complex128, plane)}
	}
	w.tw = make([]float64, local)
	w.roots = map[int][]complex128{}
	nmax := max(p.NX, p.NY, p.NZ)
	w.x, w.y = make([]complex128, nmax*ftBlock), make([]complex128, nmax*ftBlock)
	return nil
}

// spectrum computes the forward transform of the initial conditions into
// U0: with more than one task u1 is transposed straight into it.
func (w *FTWorker) spectrum(cm comm) error {
	w.indexMap()
	// The timed set-up recomputes the warm-up's spectrum: it reuses the
	// array rather than leave a grid's worth of garbage.
	if len(w.U0) != 2*len(w.tw) {
		w.U0 = make([]float64, 2*len(w.tw))
	}
	w.initialConditions(w.u1)
	s, err := w.forward(cm, w.u1, cplx(w.U0))
	if err != nil {
		return err
	}
	if !w.spec {
		copy(cplx(w.U0), s)
	}
	return nil
}

func (w *FTWorker) run(cm comm, h *hooks) (*Report, error) {
	if err := w.setup(cm); err != nil {
		return nil, err
	}
	p := w.p
	// Each step below runs from a safe point to the next, its waits safe
	// points too (on the team's task.Comm): fields change only after a
	// step's last exchange and the step ends at a safe point, so Run
	// re-entered at a wait goes straight to the step and replays it.
	if !w.Warm {
		if err := w.spectrum(cm); err != nil {
			return nil, err
		}
		if err := barrierSafe(cm); err != nil {
			return nil, err
		}
		w.Warm = true
		w.startTimer(cm, h)
		if err := h.safe(); err != nil {
			return nil, err
		}
	}
	if !w.Init {
		if err := w.spectrum(cm); err != nil {
			return nil, err
		}
		w.Init, w.It, w.Sums = true, 0, nil
		if err := h.safe(); err != nil {
			return nil, err
		}
	} else {
		w.indexMap()
	}
	if want := 2 * len(w.tw); len(w.U0) != want {
		return nil, fmt.Errorf("FT state: spectrum of %d values, want %d", len(w.U0), want)
	}
	for w.It < p.Niter {
		if err := w.evolveInverse(cm, cplx(w.U0), w.tw, w.u1); err != nil {
			return nil, err
		}
		s, err := w.checksum(cm, w.u1)
		if err != nil {
			return nil, err
		}
		advance(cplx(w.U0), w.tw)
		w.Sums = append(w.Sums, [2]float64{real(s), imag(s)})
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
	r := w.finish("ft", p.Niter, t, p.Mop())
	r.Values.Checksums = append([][2]float64(nil), w.Sums...)
	Verify(r)
	return r, nil
}
