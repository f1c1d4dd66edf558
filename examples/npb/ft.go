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
//
// With more than one task a step's waits are the transposes' receives
// (safe points on the team's task.Comm) and its collectives, and the state
// says where in the step the task is: Stage, the transpose's messages
// done (Xfers, XSent), and during an iteration's inverse transform the
// grid it fills (Lines). Run re-entered there carries on: it recomputes
// the plane or grid its next messages come from, sends only what it had
// not sent, and receives the rest.
type FTWorker struct {
	Place
	Warm bool         // the untimed warm-up is done
	Init bool         // the timed region's set-up and forward FFT are done
	It   int          // iterations done
	U0   []float64    // the spectrum (complex, re/im interleaved)
	Sums [][2]float64 // checksums of the iterations done

	// Stage is where the step under way stands (ftStep, ftInverse,
	// ftSummed, ftSpectrum).
	Stage int `msgpack:",omitempty"`
	// Xfers counts the exchanges of the transpose under way that are
	// done: exchangeLines' messages, one sent to a task and one received
	// from another per exchange, in its order. XSent is set once the
	// next exchange's message is sent.
	Xfers int  `msgpack:",omitempty"`
	XSent bool `msgpack:",omitempty"`
	// Lines is u1 (layout A, re/im interleaved) while an iteration's
	// inverse transform fills it (Stage ftInverse) and its checksum is
	// taken (ftSummed); nil between steps.
	Lines []float64 `msgpack:",omitempty"`

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

// Stages of an FT step (FTWorker.Stage).
const (
	ftStep     = iota // at a step's start (or in a set-up's transpose)
	ftInverse         // in an iteration's inverse transform: U0 evolves plane by plane
	ftSummed          // the iteration's inverse transform is in u1 and U0 evolved
	ftSpectrum        // a set-up's spectrum is in U0
)

// floats views complex numbers as interleaved re/im floats.
func floats(c []complex128) []float64 {
	if len(c) == 0 {
		return nil
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(&c[0])), 2*len(c))
}

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
// (u0 keeps the product: it is the next iteration's spectrum) and
// transforms the product back in 3-D into out (layout A). With one task
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

// evolve multiplies u0 by tw element-wise, in place, and copies the
// product into dst.
func evolve(u0 []complex128, tw []float64, dst []complex128) {
	tw, dst = tw[:len(u0)], dst[:len(u0)]
	for i, t := range tw {
		v := complex(real(u0[i])*t, imag(u0[i])*t)
		u0[i], dst[i] = v, v
	}
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
//
// Run re-entered in a plane's exchanges (w.Xfers, w.XSent) starts at that
// plane, whose part of u0 has evolved already: its buffer is that part,
// transformed again (the same bits), and the plane's exchanges carry on
// where they stopped; the planes before it are in out.
func (w *FTWorker) inverseZ(cm comm, u0 []complex128, tw []float64, out []complex128) error {
	nx, nzl := w.p.NX, w.nzl
	plane := nx * w.p.NZ
	per := w.xfersPer(cm, nzl)
	for jl := w.Xfers / per; jl < w.nyl; jl++ {
		pl := w.planes[jl%2]
		if w.Xfers > jl*per || w.XSent {
			copy(pl, u0[plane*jl:][:plane])
		} else {
			evolve(u0[plane*jl:][:plane], tw[plane*jl:][:plane], pl)
		}
		w.fftLines(pl, 0, 1, nx, w.p.NZ, nx, true)
		if err := w.exchangeLines(cm, jl*per, nzl,
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
// transpose, once every task has unpacked what it received. Run re-entered
// in the transpose (w.Xfers, w.XSent) carries on where it stopped: spec
// (U0, the state) holds the lines received before.
func (w *FTWorker) transposeAB(cm comm, u, spec []complex128) error {
	nx := w.p.NX
	per := w.xfersPer(cm, w.nyl)
	for kl := w.Xfers / per; kl < w.nzl; kl++ {
		if err := w.exchangeLines(cm, kl*per, w.nyl,
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

// linesPer is how many x-lines one transpose message carries: w.chunk
// values at most (ftChunk when 0), at least one line.
func (w *FTWorker) linesPer() int {
	chunk := w.chunk
	if chunk <= 0 {
		chunk = ftChunk
	}
	return max(1, chunk/w.p.NX)
}

// xfersPer is how many exchanges exchangeLines makes for n lines per task:
// one per chunk of lines and other task.
func (w *FTWorker) xfersPer(cm comm, n int) int {
	step := w.linesPer()
	return (n + step - 1) / step * (cm.size() - 1)
}

// exchangeLines is the all-to-all of a transpose: this task has n x-lines
// for each task q, line l starting at from(q, l) (q's n lines consecutive
// there), and hands every line l it gets from task q to to(q, l, line).
// Its own lines go straight across; the others are sent in place, in
// chunks of whole lines (linesPer), and handed over from the message they
// arrived in.
//
// Each exchange sends one chunk to one task and receives one from another;
// they are numbered from first on, and w.Xfers counts those of the
// transpose that are done, w.XSent whether the next one's chunk is sent:
// Run re-entered in a receive (a safe point on the team's task.Comm:
// recvSliceSafe) makes only the exchanges not done and sends only what it
// had not sent.
func (w *FTWorker) exchangeLines(cm comm, first, n int, from func(q, l int) []complex128, to func(q, l int, line []complex128)) error {
	nx := w.p.NX
	np, me := cm.size(), cm.rank()
	for l := range n {
		to(me, l, from(me, l)[:nx])
	}
	step := w.linesPer()
	x := first
	for l0 := 0; l0 < n; l0 += step {
		l1 := min(n, l0+step)
		m := (l1 - l0) * nx
		for k := 1; k < np; k, x = k+1, x+1 {
			if x < w.Xfers {
				continue
			}
			dst, src := (me+k)%np, (me-k+np)%np
			if !w.XSent {
				if err := cm.sendInPlace(dst, tagTranspose, from(dst, l0)[:m]); err != nil {
					return fmt.Errorf("FT transpose: %w", err)
				}
				w.XSent = true
			}
			in, err := recvSliceSafe(cm, src, tagTranspose, m, task.Payload.Complex128s)
			if err != nil {
				return fmt.Errorf("FT transpose: %w", err)
			}
			for l := l0; l < l1; l++ {
				to(src, l, in[nx*(l-l0):][:nx])
			}
			w.Xfers, w.XSent = x+1, false
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
	if err := w.checkStage(cm, local); err != nil {
		return fmt.Errorf("FT state: %w", err)
	}
	if w.Lines != nil {
		w.u1 = cplx(w.Lines) // Run re-entered in an iteration's inverse transform
	} else {
		w.u1 = make([]complex128, local)
	}
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

// checkStage checks the fields that say where a step stands against a
// slab of local points: a stage that exists, exchanges within a
// transpose's count, and Lines, when set, one slab (and set exactly in
// the iteration's stages that fill it).
func (w *FTWorker) checkStage(cm comm, local int) error {
	inv := ftInverse <= w.Stage && w.Stage <= ftSummed
	switch {
	case w.Stage < ftStep || w.Stage > ftSpectrum:
		return fmt.Errorf("stage %d", w.Stage)
	case inv && !w.Init:
		return fmt.Errorf("stage %d before the set-up", w.Stage)
	case inv != (w.Lines != nil):
		return fmt.Errorf("stage %d with %d values of u1", w.Stage, len(w.Lines))
	case w.Stage == ftSpectrum && w.Warm && w.Init:
		return fmt.Errorf("stage %d after the set-up", w.Stage)
	case inv && len(w.Lines) != 2*local:
		return fmt.Errorf("u1 of %d values, want %d", len(w.Lines), 2*local)
	}
	if cm.size() > 1 {
		most := max(w.nzl*w.xfersPer(cm, w.nyl), w.nyl*w.xfersPer(cm, w.nzl))
		if w.Xfers < 0 || w.Xfers > most || (w.XSent && w.Xfers == most) {
			return fmt.Errorf("%d exchanges of a transpose done (sent: %v), of %d", w.Xfers, w.XSent, most)
		}
	}
	return nil
}

// endStep marks the step done: the next starts afresh.
func (w *FTWorker) endStep() {
	w.Stage, w.Xfers, w.XSent, w.Lines = ftStep, 0, false, nil
}

// spectrum computes the forward transform of the initial conditions into
// U0: with more than one task u1 is transposed straight into it. Run
// re-entered in the transpose recomputes u1 and carries on (transposeAB);
// re-entered in a wait after the spectrum was made (ftSpectrum), it
// replays the transpose's barrier.
func (w *FTWorker) spectrum(cm comm) error {
	w.indexMap()
	// The timed set-up recomputes the warm-up's spectrum: it reuses the
	// array rather than leave a grid's worth of garbage.
	if len(w.U0) != 2*len(w.tw) {
		w.U0 = make([]float64, 2*len(w.tw))
	}
	if w.Stage == ftSpectrum {
		if w.spec {
			return barrierSafe(cm)
		}
		return nil
	}
	w.initialConditions(w.u1)
	s, err := w.forward(cm, w.u1, cplx(w.U0))
	if err != nil {
		return err
	}
	if !w.spec {
		copy(cplx(w.U0), s)
	}
	w.Stage, w.Xfers = ftSpectrum, 0
	return nil
}

func (w *FTWorker) run(cm comm, h *hooks) (*Report, error) {
	if err := w.setup(cm); err != nil {
		return nil, err
	}
	p := w.p
	// Each step below runs from a safe point to the next, its waits safe
	// points too (on the team's task.Comm): the fields say where in the
	// step the task is (Stage, Xfers, XSent, Lines), so Run re-entered at
	// a wait goes straight to it and carries on, its collectives since the
	// step began replayed; the step ends at a safe point.
	if !w.Warm {
		if err := w.spectrum(cm); err != nil {
			return nil, err
		}
		if err := barrierSafe(cm); err != nil {
			return nil, err
		}
		w.Warm = true
		w.endStep()
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
		w.endStep()
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
		if w.Stage == ftStep {
			// u1 is the state while the step fills it: the lines
			// received so far.
			w.Stage, w.Lines = ftInverse, floats(w.u1)
		}
		if w.Stage == ftInverse {
			if err := w.evolveInverse(cm, cplx(w.U0), w.tw, w.u1); err != nil {
				return nil, err
			}
			w.Stage = ftSummed
		}
		s, err := w.checksum(cm, w.u1)
		if err != nil {
			return nil, err
		}
		w.Sums = append(w.Sums, [2]float64{real(s), imag(s)})
		w.It++
		w.endStep()
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
