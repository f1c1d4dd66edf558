package member

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestBucket: a burst is admitted at once, then one a 1/rate; the answer
// to a refused take is the time until the next token.
func TestBucket(t *testing.T) {
	b := NewBucket(10, 3)
	now := t0
	for i := range 3 {
		if w := b.Take(now); w != 0 {
			t.Fatalf("take %d of the burst: wait %v", i, w)
		}
	}
	if w := b.Take(now); w != 100*time.Millisecond {
		t.Fatalf("empty bucket: wait %v, want 100ms", w)
	}
	if w := b.Take(now.Add(50 * time.Millisecond)); w != 50*time.Millisecond {
		t.Fatalf("half a token: wait %v, want 50ms", w)
	}
	if w := b.Take(now.Add(100 * time.Millisecond)); w != 0 {
		t.Fatalf("a token later: wait %v", w)
	}
	// A long pause refills to the burst, no more.
	now = now.Add(time.Hour)
	n := 0
	for b.Take(now) == 0 {
		n++
	}
	if n != 3 {
		t.Errorf("refilled to %d, want the burst 3", n)
	}
	// A clock going back takes nothing back.
	if w := b.Take(now.Add(-time.Minute)); w == 0 {
		t.Error("a token appeared from a clock going back")
	}
	if w := NewBucket(0, 0).Take(now); w != 0 {
		t.Errorf("rate 0 admits everything: wait %v", w)
	}
}

// TestBucketPacesAStorm: 1000 hosts asking at once and retrying after the
// hint plus a jittered backoff are all admitted, at the bucket's rate.
func TestBucketPacesAStorm(t *testing.T) {
	b := NewBucket(50, 20)
	bo := Backoff{Base: 100 * time.Millisecond, Max: 5 * time.Second}
	rng := rand.New(rand.NewPCG(1, 2))
	type host struct {
		at      time.Time
		attempt int
	}
	hosts := make([]host, 1000)
	for i := range hosts {
		hosts[i].at = t0
	}
	admitted, last := 0, t0
	for step := 0; admitted < len(hosts) && step < 1_000_000; step++ {
		// The earliest host tries next.
		k := -1
		for i, h := range hosts {
			if h.attempt >= 0 && (k < 0 || h.at.Before(hosts[k].at)) {
				k = i
			}
		}
		h := &hosts[k]
		if w := b.Take(h.at); w == 0 {
			admitted++
			last = h.at
			h.attempt = -1
			continue
		} else {
			h.at = h.at.Add(bo.Delay(h.attempt, w, rng.Uint64()))
			h.attempt++
		}
	}
	if admitted != len(hosts) {
		t.Fatalf("admitted %d of %d", admitted, len(hosts))
	}
	// 20 at once, then 50 a second: at least 19.6 s.
	if took := last.Sub(t0); took < 19*time.Second || took > 60*time.Second {
		t.Errorf("the storm took %v", took)
	}
}

func TestBackoff(t *testing.T) {
	bo := Backoff{Base: 100 * time.Millisecond, Max: time.Second}
	for attempt, top := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		top *= time.Millisecond
		if attempt >= 4 {
			top = time.Second
		}
		for _, r := range []uint64{0, 1, 12345678901, ^uint64(0)} {
			got := bo.Delay(attempt, 7*time.Millisecond, r)
			if got < 7*time.Millisecond || got > 7*time.Millisecond+top {
				t.Errorf("attempt %d r %d: %v, want in [7ms, 7ms+%v]", attempt, r, got, top)
			}
		}
	}
	if got := (Backoff{}).Delay(50, 0, ^uint64(0)); got > 100*time.Millisecond {
		t.Errorf("zero Backoff: %v", got)
	}
}
