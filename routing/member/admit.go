package member

import (
	"time"
)

// Bucket is a token bucket pacing admissions: Rate tokens a second, at
// most Burst held. It is not safe for concurrent use.
type Bucket struct {
	rate   float64 // tokens per second
	burst  float64
	tokens float64
	at     time.Time // when tokens was computed (zero: full)
}

// NewBucket returns a full bucket of burst tokens refilled at rate a
// second; rate <= 0 admits everything.
func NewBucket(rate float64, burst int) *Bucket {
	return &Bucket{rate: rate, burst: float64(max(burst, 1)), tokens: float64(max(burst, 1))}
}

// Take takes a token at now: it returns 0 if one was there, otherwise how
// long until one will be (nothing is taken then).
func (b *Bucket) Take(now time.Time) time.Duration {
	if b.rate <= 0 {
		return 0
	}
	if !b.at.IsZero() && now.After(b.at) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.at).Seconds()*b.rate)
	}
	if b.at.IsZero() || now.After(b.at) {
		b.at = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	wait := time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
	return max(wait, time.Millisecond)
}

// Backoff is a host's retry schedule towards a busy master: exponential
// from Base, doubling per attempt up to Max, with full jitter.
type Backoff struct {
	Base, Max time.Duration
}

// Delay is how long to wait before attempt (0 for the first retry) given
// the master's hint (its "retry after", 0 if none) and a random number r
// (uniform over uint64, from the caller's seeded source): the hint plus a
// jittered share of the exponential step, so that hosts refused together
// do not come back together.
func (b Backoff) Delay(attempt int, hint time.Duration, r uint64) time.Duration {
	base, top := b.Base, b.Max
	if base <= 0 {
		base = 100 * time.Millisecond
	}
	if top < base {
		top = base
	}
	step := base
	for i := 0; i < attempt && step < top; i++ {
		step *= 2
	}
	step = min(step, top)
	jitter := time.Duration(r % uint64(step+1))
	return hint + jitter
}
