package sim

// event is one scheduled occurrence. Its fields are interpreted by the model
// that pushed it; a and b name nodes or jobs, gen lets a model cancel an
// event lazily by bumping a counter.
type event struct {
	t    float64
	seq  uint64
	a    int32
	b    int32
	gen  uint32
	kind uint8
}

// eventQueue is a binary min-heap of events ordered by time, then by the
// order they were pushed, so equal times resolve deterministically.
type eventQueue struct {
	h   []event
	seq uint64
}

func (q *eventQueue) len() int { return len(q.h) }

func less(x, y *event) bool {
	return x.t < y.t || (x.t == y.t && x.seq < y.seq)
}

func (q *eventQueue) push(e event) {
	e.seq = q.seq
	q.seq++
	q.h = append(q.h, e)
	h := q.h
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(&e, &h[p]) {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = e
}

func (q *eventQueue) pop() event {
	h := q.h
	top := h[0]
	n := len(h) - 1
	last := h[n]
	q.h = h[:n]
	h = q.h
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && less(&h[r], &h[l]) {
			c = r
		}
		if !less(&h[c], &last) {
			break
		}
		h[i] = h[c]
		i = c
	}
	if n > 0 {
		h[i] = last
	}
	return top
}

// ring is a FIFO of int32 that grows by doubling and never shrinks.
type ring struct {
	buf  []int32
	head int
	n    int
}

func (r *ring) len() int { return r.n }

func (r *ring) push(v int32) {
	if r.n == len(r.buf) {
		nb := make([]int32, max(8, 2*len(r.buf)))
		for i := 0; i < r.n; i++ {
			nb[i] = r.buf[(r.head+i)&(len(r.buf)-1)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = v
	r.n++
}

func (r *ring) front() int32 { return r.buf[r.head] }

func (r *ring) pop() int32 {
	v := r.buf[r.head]
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return v
}
