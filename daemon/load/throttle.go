package load

import (
	"math"
	"time"
)

// DefaultQuantum is Throttle's default smallest pause.
const DefaultQuantum = time.Millisecond

// Throttle makes a daemon's tasks really run Factor times slower
// (emulation): at each safe point the daemon asks how long the task must
// pause for the time it has just computed, and sleeps that long, so a task
// computing for b pauses (Factor−1)·b and progresses at 1/Factor of its
// speed. Pauses shorter than Quantum are carried to a later safe point, so
// a task with frequent safe points is not put to sleep for microseconds at
// a time. Throttle is a value; its methods are pure functions of their
// inputs, and the daemon keeps the carried time per task.
type Throttle struct {
	// Factor is the slow-down, ≥ 1 (α for a declared speed; see
	// EmulatedFactor); a Factor ≤ 1 or NaN means no throttling.
	Factor float64
	// Quantum is the smallest pause; 0 means DefaultQuantum.
	Quantum time.Duration
}

// Sleep is the pause owed for busy time of computation: (Factor−1)·busy,
// saturating at the largest Duration, 0 when Factor ≤ 1 or busy ≤ 0.
func (t Throttle) Sleep(busy time.Duration) time.Duration {
	if !(t.Factor > 1) || busy <= 0 {
		return 0
	}
	s := (t.Factor - 1) * float64(busy)
	if s >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(s)
}

// Pause adds the pause owed for busy to the time carried from earlier safe
// points and returns how long to sleep now and what to carry on: the whole
// amount once it reaches the quantum, otherwise nothing (and it is carried).
func (t Throttle) Pause(carried, busy time.Duration) (sleep, carry time.Duration) {
	owed := satAdd(carried, t.Sleep(busy))
	if owed < t.quantum() {
		return 0, owed
	}
	return owed, 0
}

// Settle corrects the carried time after a pause that took slept instead
// of the planned sleep: oversleeping is credited to the next pauses (at
// most one quantum of credit, so a long descheduling does not buy a burst
// of unthrottled computation), undersleeping (an interrupted pause) is
// owed.
func (t Throttle) Settle(carry, sleep, slept time.Duration) time.Duration {
	c := satAdd(carry, sleep-slept)
	return max(c, -t.quantum())
}

func (t Throttle) quantum() time.Duration {
	if t.Quantum > 0 {
		return t.Quantum
	}
	return DefaultQuantum
}

// EmulatedFactor is the slow-down for a task on a host of speed factor
// alpha sharing its processor round-robin with emulatedLoad processes that
// do not really exist (Sample.EmulatedLoad): alpha·(1 + emulatedLoad),
// with alpha below 1 taken as 1 (a task cannot be made faster). Real load
// slows tasks by itself and must not be counted here.
func EmulatedFactor(alpha, emulatedLoad float64) float64 {
	if !(alpha > 1) || math.IsInf(alpha, 0) {
		alpha = 1
	}
	if !(emulatedLoad > 0) || math.IsInf(emulatedLoad, 0) {
		emulatedLoad = 0
	}
	return alpha * (1 + emulatedLoad)
}

func satAdd(a, b time.Duration) time.Duration {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s > 0:
		return math.MinInt64
	}
	return s
}

// Meter keeps one task's account of emulated slowness between the points
// where it is charged: its safe points, and every message it sends (so that
// no result of its computation leaves it before the slowed task would have
// produced it, and the computation after its last safe point is charged
// too). The time it spends waiting for messages is not computation and is
// not charged: a task sharing its processor with other processes is slowed
// while it computes, not while it waits. A Meter is used by one goroutine;
// its zero value has never been charged.
type Meter struct {
	last   time.Time     // when the task was last charged
	waited time.Duration // time spent waiting since then
	owed   time.Duration // pause owed but below the quantum, or credit
}

// Waited records time the task spent waiting for a message.
func (m *Meter) Waited(d time.Duration) {
	if d > 0 {
		m.waited = satAdd(m.waited, d)
	}
}

// Due charges the task at now: it returns how long to pause for the time
// computed since the last charge under th (0 the first time, which only
// starts the account). The caller sleeps, then calls Slept.
func (m *Meter) Due(now time.Time, th Throttle) time.Duration {
	if m.last.IsZero() {
		m.last, m.waited = now, 0
		return 0
	}
	busy := now.Sub(m.last) - m.waited
	m.waited = 0
	sleep, carry := th.Pause(m.owed, busy)
	m.owed, m.last = carry, now
	return sleep
}

// Slept settles a pause of sleep that took slept (shorter when it was cut
// short, longer when the task was descheduled) and ended at now, which
// starts the next stretch of computation.
func (m *Meter) Slept(th Throttle, sleep, slept time.Duration, now time.Time) {
	m.owed = th.Settle(m.owed, sleep, slept)
	m.last = now
}
