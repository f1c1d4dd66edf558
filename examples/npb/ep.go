package npb

import (
	"fmt"
	"math"

	"github.com/dpvm/dpvm/task"
)

// EPWorker is one task of EP: it generates its share of the batches of
// Gaussian pairs and tallies them.
type EPWorker struct {
	Place
	Started bool
	Next    int // next batch to generate (global index)
	SX, SY  float64
	Q       []float64 // counts per annulus
}

func (w *EPWorker) place() *Place { return &w.Place }

// Run executes the worker as a dpvm task.
func (w *EPWorker) Run(c *task.Ctx) error { return runWorker(c, w) }

// epScratch holds a batch's kept pairs and their factors t2; both have
// room for one more pair, since epGauss works on two at a time.
type epScratch struct {
	x  [2*epNK + 2]float64
	t2 [epNK + 1]float64
}

// epBatch generates batch k (0-based) of EP's stream and adds its Gaussian
// deviates to sx, sy and q. an is a^(2·NK), the stream's stride per batch.
//
// The results are bit-identical to the reference's (epBatchPlain in the
// tests), with the work arranged for the processor in passes:
//   - the first draws the pairs and keeps those inside the unit circle,
//     without a branch. The two draws of a pair come from two interleaved
//     streams with multiplier a², so the two multiply chains run side by
//     side; a state (below 2^46) is converted through int64, one
//     instruction, where a uint64 conversion needs a test and a branch; and
//     2·(x·2^-46) is x·2^-45 exactly;
//   - epGauss computes every kept pair's factor sqrt(-2·log(t1)/t1), two
//     pairs at a time (the logarithm is most of EP's time);
//   - the last applies the factors and tallies the deviates in order.
func epBatch(k int, an uint64, q *[epNQ]float64, sx, sy *float64, sc *epScratch) {
	s := (SeedEP * Pow46(an, uint64(k))) & mask46
	const (
		a   = RandA
		a2  = (RandA * RandA) & mask46
		r45 = 0x1p-45
	)
	s1 := (s * a) & mask46
	s2 := (s1 * a) & mask46
	buf := &sc.x
	n := 0
	for range epNK {
		x1 := float64(int64(s1))*r45 - 1
		x2 := float64(int64(s2))*r45 - 1
		s1 = (s1 * a2) & mask46
		s2 = (s2 * a2) & mask46
		t1 := float64(x1*x1) + float64(x2*x2)
		// Every pair is written; the index moves on only past the kept
		// ones (a conditional move, not a branch). n is at most twice the
		// pairs drawn before this one, so the mask, there for the bounds
		// check, never wraps.
		j := n & (2*epNK - 2)
		buf[j] = x1
		buf[j+1] = x2
		inc := 0
		if t1 <= 1 {
			inc = 2
		}
		n += inc
	}
	pairs := n / 2
	// An odd count takes one more pair, whatever is in the buffer past the
	// kept ones; its factor is not used.
	epGauss(&buf[0], &sc.t2[0], (pairs+1)&^1)
	t2s := sc.t2[:pairs]
	xs := buf[:2*pairs]
	lsx, lsy := *sx, *sy
	for i, t2 := range t2s {
		x1, x2 := xs[2*i], xs[2*i+1]
		t3 := x1 * t2
		t4 := x2 * t2
		q[int(max(math.Abs(t3), math.Abs(t4)))]++
		lsx += t3
		lsy += t4
	}
	*sx, *sy = lsx, lsy
}

func (w *EPWorker) run(cm comm, h *hooks) (*Report, error) {
	p, err := EPParamsFor(w.Class)
	if err != nil {
		return nil, err
	}
	nn := p.Batches()
	b := blockBounds(nn, cm.size())
	lo, hi := b[cm.rank()], b[cm.rank()+1]
	// EP's only waits for other ranks, the barrier before the timed region
	// and the sums' reduction after the last batch, are safe points: the
	// fields say the run has not started, or has done every batch.
	if !w.Started {
		if err := barrierSafe(cm); err != nil {
			return nil, err
		}
		w.startTimer(cm, h)
		w.Next, w.Q, w.Started = lo, make([]float64, epNQ), true
	}
	if len(w.Q) != epNQ {
		return nil, fmt.Errorf("EP state: %d counts, want %d", len(w.Q), epNQ)
	}
	// an = a^(2^(MK+1)): the reference squares a MK+1 times.
	an := Pow46(RandA, 2*epNK)
	var q [epNQ]float64
	copy(q[:], w.Q)
	sc := new(epScratch)
	step := max(1, (hi-lo)/64)
	for w.Next < hi {
		epBatch(w.Next, an, &q, &w.SX, &w.SY, sc)
		w.Next++
		copy(w.Q, q[:])
		if (w.Next-lo)%step == 0 || w.Next == hi {
			h.report(w.Next-lo, hi-lo)
		}
		if err := h.safe(); err != nil {
			return nil, err
		}
	}
	sums := append([]float64{w.SX, w.SY}, w.Q...)
	if err := sumSafe(cm, sums); err != nil {
		return nil, err
	}
	if cm.rank() != 0 {
		return nil, nil
	}
	t := w.elapsed(h)
	sx, sy := sums[0], sums[1]
	r := w.finish("ep", nn, t, p.Mop())
	r.Values.SX, r.Values.SY = &sx, &sy
	Verify(r)
	return r, nil
}
