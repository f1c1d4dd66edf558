package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Dist is a positive distribution given by its mean and coefficient of
// variation (standard deviation over mean): deterministic for CV 0, a
// shifted exponential for 0 < CV < 1, exponential for CV 1 and a two-phase
// hyperexponential with balanced means for CV > 1 (the paper's choice).
type Dist struct {
	Mean float64
	CV   float64
}

// Validate reports a non-positive mean or a negative CV.
func (d Dist) Validate() error {
	if !(d.Mean > 0) || math.IsInf(d.Mean, 0) || !(d.CV >= 0) || d.CV > 100 {
		return fmt.Errorf("%w: distribution mean %g (> 0), CV %g (0..100)", ErrBadConfig, d.Mean, d.CV)
	}
	return nil
}

// sampler draws from a Dist without recomputing its parameters.
type sampler struct {
	kind   uint8 // 0 constant, 1 shifted exponential, 2 exponential, 3 H2
	c      float64
	m1, m2 float64
	p1     float64
}

func (d Dist) sampler() sampler {
	switch {
	case d.CV == 0:
		return sampler{kind: 0, c: d.Mean}
	case d.CV < 1:
		return sampler{kind: 1, c: d.Mean * (1 - d.CV), m1: d.Mean * d.CV}
	case d.CV == 1:
		return sampler{kind: 2, m1: d.Mean}
	}
	c2 := d.CV * d.CV
	p1 := 0.5 * (1 + math.Sqrt((c2-1)/(c2+1)))
	return sampler{kind: 3, p1: p1, m1: d.Mean / (2 * p1), m2: d.Mean / (2 * (1 - p1))}
}

func (s *sampler) sample(r *rand.Rand) float64 {
	switch s.kind {
	case 0:
		return s.c
	case 1:
		return s.c + s.m1*r.ExpFloat64()
	case 2:
		return s.m1 * r.ExpFloat64()
	}
	if r.Float64() < s.p1 {
		return s.m1 * r.ExpFloat64()
	}
	return s.m2 * r.ExpFloat64()
}

// Sample draws one value from d.
func (d Dist) Sample(r *rand.Rand) float64 {
	s := d.sampler()
	return s.sample(r)
}
