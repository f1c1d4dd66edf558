package load

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestThrottleSleep(t *testing.T) {
	for _, c := range []struct {
		factor float64
		busy   time.Duration
		want   time.Duration
	}{
		{4, 10 * time.Millisecond, 30 * time.Millisecond},
		{2, time.Second, time.Second},
		{1.5, 4 * time.Millisecond, 2 * time.Millisecond},
		{1, time.Second, 0},
		{0.5, time.Second, 0},
		{0, time.Second, 0},
		{math.NaN(), time.Second, 0},
		{4, 0, 0},
		{4, -time.Second, 0},
		{1e12, time.Hour, math.MaxInt64},
		{math.Inf(1), time.Nanosecond, math.MaxInt64},
	} {
		if got := (Throttle{Factor: c.factor}).Sleep(c.busy); got != c.want {
			t.Errorf("factor %g, busy %v: sleep %v, want %v", c.factor, c.busy, got, c.want)
		}
	}
}

func TestThrottlePauseCarries(t *testing.T) {
	th := Throttle{Factor: 2, Quantum: time.Millisecond}
	carry := time.Duration(0)
	steps := []struct {
		busy, sleep, carry time.Duration
	}{
		{300 * time.Microsecond, 0, 300 * time.Microsecond},
		{300 * time.Microsecond, 0, 600 * time.Microsecond},
		{500 * time.Microsecond, 1100 * time.Microsecond, 0},
		{5 * time.Millisecond, 5 * time.Millisecond, 0},
	}
	for i, s := range steps {
		var sleep time.Duration
		sleep, carry = th.Pause(carry, s.busy)
		if sleep != s.sleep || carry != s.carry {
			t.Errorf("step %d: sleep %v carry %v, want %v %v", i, sleep, carry, s.sleep, s.carry)
		}
	}
	// Oversleeping is credited, at most one quantum; undersleeping is owed.
	if c := th.Settle(0, 2*time.Millisecond, 2*time.Millisecond+300*time.Microsecond); c != -300*time.Microsecond {
		t.Errorf("overslept 300µs: carry %v", c)
	}
	if c := th.Settle(0, 2*time.Millisecond, time.Second); c != -time.Millisecond {
		t.Errorf("overslept 998ms: carry %v, want −1ms", c)
	}
	if c := th.Settle(0, 2*time.Millisecond, 500*time.Microsecond); c != 1500*time.Microsecond {
		t.Errorf("interrupted: carry %v", c)
	}
	if sleep, carry := th.Pause(-time.Millisecond, 1500*time.Microsecond); sleep != 0 || carry != 500*time.Microsecond {
		t.Errorf("credit used: sleep %v carry %v", sleep, carry)
	}
	if sleep, carry := (Throttle{Factor: 3}).Pause(math.MaxInt64-5, time.Second); sleep != math.MaxInt64 || carry != 0 {
		t.Errorf("saturation: sleep %v carry %v", sleep, carry)
	}
}

// TestThrottleDutyCycle runs a task through many safe points at seeded
// random intervals with a clock that oversleeps now and then: the time
// paused (plus what is still carried) stays (α−1) times the time computed,
// so the task progresses at 1/α of its speed.
func TestThrottleDutyCycle(t *testing.T) {
	for _, alpha := range []float64{1, 1.25, 2, 4, 7.5} {
		rng := rand.New(rand.NewPCG(uint64(alpha*100), 3))
		th := Throttle{Factor: alpha}
		var busyTotal, slept, carry time.Duration
		for range 20000 {
			busy := time.Duration(rng.IntN(400)) * time.Microsecond
			busyTotal += busy
			sleep, c := th.Pause(carry, busy)
			actual := sleep
			if sleep > 0 && rng.IntN(4) == 0 {
				actual += time.Duration(rng.IntN(200)) * time.Microsecond // timer slack
			}
			slept += actual
			carry = th.Settle(c, sleep, actual)
		}
		want := (alpha - 1) * float64(busyTotal)
		got := float64(slept + carry)
		// Each busy interval's pause is truncated to a whole nanosecond
		// (at most 20000 ns lost); oversleep beyond the one-quantum credit
		// is forgiven, so more may have been paused.
		if got < want-20000 {
			t.Errorf("α %g: paused %v + carry %v, want %v", alpha, slept, carry, time.Duration(want))
		}
		if ratio := float64(busyTotal+slept) / float64(busyTotal); alpha > 1 && math.Abs(ratio-alpha)/alpha > 0.01 {
			t.Errorf("α %g: wall/busy = %.4f", alpha, ratio)
		}
		if carry >= time.Millisecond || carry < -time.Millisecond {
			t.Errorf("α %g: carry %v beyond one quantum", alpha, carry)
		}
	}
}

func TestEmulatedFactor(t *testing.T) {
	for _, c := range []struct{ alpha, load, want float64 }{
		{1, 0, 1},
		{4, 0, 4},
		{1, 3, 4},
		{2, 0.5, 3},
		{0.5, 1, 2}, // α < 1 cannot be emulated
		{math.NaN(), math.NaN(), 1},
		{math.Inf(1), math.Inf(1), 1},
		{2, -1, 2},
	} {
		if got := EmulatedFactor(c.alpha, c.load); got != c.want {
			t.Errorf("EmulatedFactor(%g, %g) = %g, want %g", c.alpha, c.load, got, c.want)
		}
	}
}

// TestMeter follows one task's account on a synthetic clock: computation is
// charged (Factor−1) times, waiting for messages is not, pauses below the
// quantum are carried, a pause cut short is owed and an overlong one
// credited.
func TestMeter(t *testing.T) {
	th := Throttle{Factor: 3, Quantum: time.Millisecond}
	t0 := time.Unix(1000, 0)
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	var m Meter
	if d := m.Due(at(0), th); d != 0 {
		t.Fatalf("first charge: %v", d)
	}
	// 10 ms computed: 20 ms owed.
	if d := m.Due(at(10), th); d != 20*time.Millisecond {
		t.Fatalf("10 ms computed: pause %v, want 20ms", d)
	}
	m.Slept(th, 20*time.Millisecond, 20*time.Millisecond, at(30))
	// 10 ms until the next charge, 6 of them waiting: 4 ms computed.
	m.Waited(6 * time.Millisecond)
	if d := m.Due(at(40), th); d != 8*time.Millisecond {
		t.Fatalf("4 ms computed: pause %v, want 8ms", d)
	}
	// The pause was cut short at 3 ms: 5 ms still owed, paid with the next.
	m.Slept(th, 8*time.Millisecond, 3*time.Millisecond, at(43))
	if d := m.Due(at(44), th); d != 7*time.Millisecond {
		t.Fatalf("1 ms computed with 5 owed: pause %v, want 7ms", d)
	}
	m.Slept(th, 7*time.Millisecond, 7*time.Millisecond, at(51))
	// 0.2 ms computed: 0.4 ms owed, below the quantum, carried.
	if d := m.Due(at(51.2), th); d != 0 {
		t.Fatalf("0.2 ms computed: pause %v, want none yet", d)
	}
	if d := m.Due(at(51.5), th); d != 1000*time.Microsecond {
		t.Fatalf("0.5 ms computed in all: pause %v, want 1ms", d)
	}
	// Overslept by 5 ms: credited up to one quantum.
	m.Slept(th, time.Millisecond, 6*time.Millisecond, at(57.5))
	if d := m.Due(at(58), th); d != 0 {
		t.Fatalf("0.5 ms computed with 1 ms credit: pause %v, want 0", d)
	}
	// Waiting longer than the stretch (a clock step) charges nothing.
	m.Waited(time.Hour)
	if d := m.Due(at(60), th); d != 0 {
		t.Fatalf("only waiting: pause %v", d)
	}
	// Without a factor nothing is owed.
	var free Meter
	free.Due(at(0), Throttle{Factor: 1})
	if d := free.Due(at(100), Throttle{Factor: 1}); d != 0 {
		t.Fatalf("factor 1: pause %v", d)
	}
}
