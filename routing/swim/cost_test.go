package swim

import (
	"fmt"
	"testing"
	"time"
)

// costRun is what one cluster size costs: in a quiet minute, and for one
// crash until every view holds it dead.
type costRun struct {
	n int
	// idle: messages the master heard per second with nothing failing.
	idle float64
	// probes: host-to-host messages one host sends per second, idle.
	probes float64
	// perFailure: messages the master heard for one crash, by kind.
	perFailure map[string]int
	// sent: messages the master sent for it (checks, refutations).
	sent int
	// detect: from the crash to the master's deletion.
	detect time.Duration
}

func measure(t *testing.T, n int) costRun {
	c := newCluster(t, n, Config{}, uint64(n))
	c.trace = nil
	// Let the first probes and joins settle, then measure a quiet span.
	c.run(c.now.Add(10*time.Second), nil)
	idleSpan := 30 * time.Second
	heard0, sent0 := c.heard(), c.sent
	c.run(c.now.Add(idleSpan), nil)
	r := costRun{n: n,
		idle:   float64(c.heard()-heard0) / idleSpan.Seconds(),
		probes: float64(c.sent-sent0) / idleSpan.Seconds() / float64(n)}
	sent0 = c.fromMaster
	before := map[string]int{}
	for k, v := range c.toMaster {
		before[k] = v
	}
	victim := c.hosts[n/2]
	c.crash(victim)
	crashed := c.now
	for step := 0; ; step++ {
		c.run(c.now.Add(time.Second), nil)
		if _, ok := c.deleted[victim.id]; ok && r.detect == 0 {
			r.detect = c.now.Sub(crashed)
		}
		if r.detect > 0 && c.allHoldDead(victim) {
			break
		}
		if c.now.Sub(crashed) > c.crashBound() {
			t.Fatalf("n=%d: crashed %v not confirmed and known dead everywhere within %v", n, victim.id, c.crashBound())
		}
	}
	// The stragglers' late reports, if any.
	c.run(c.now.Add(30*time.Second), nil)
	r.sent = c.fromMaster - sent0
	r.perFailure = map[string]int{}
	for k, v := range c.toMaster {
		if d := v - before[k]; d > 0 {
			r.perFailure[k] = d
		}
	}
	return r
}

// heard is how many messages the master has received.
func (c *cluster) heard() int {
	t := 0
	for _, v := range c.toMaster {
		t += v
	}
	return t
}

// allHoldDead: every live host holds h dead.
func (c *cluster) allHoldDead(h *simHost) bool {
	for _, o := range c.hosts {
		if o.crashed {
			continue
		}
		if st, _, _ := o.node.State(h.id); st != Dead {
			return false
		}
	}
	return true
}

// TestCostModel prints the master's cost, idle and per failure, and each
// host's probe load, at 1,000, 4,096 and 10,000 hosts in virtual time
// (default Config: a probe a second), and checks that the idle master
// hears nothing, that a failure costs it a number of messages that does
// not grow with N, and that a host's probe load does not either.
//
//	go test ./routing/swim -run TestCostModel -v
func TestCostModel(t *testing.T) {
	sizes := []int{1000, 4096, 10000}
	if testing.Short() {
		sizes = []int{1000}
	}
	for _, n := range sizes {
		r := measure(t, n)
		total := 0
		for _, v := range r.perFailure {
			total += v
		}
		// Today's heartbeats: every host's beat reaches the master, one
		// packet in (and one out) per host per heartbeat.
		t.Logf("N=%5d  master idle %.2f msg/s (heartbeats: %d msg/s)  per failure %3d msgs in %v, %d out  detected in %v  host probe load %.2f msg/s sent",
			n, r.idle, n, total, fmt.Sprint(r.perFailure), r.sent, r.detect.Round(time.Second), r.probes)
		if r.idle != 0 {
			t.Errorf("N=%d: the idle master heard %.2f msg/s, want none", n, r.idle)
		}
		// One suspicion report per accuser, death reports from the
		// accusers' timers, the check's answer: bounded by the suspicion
		// window in probe intervals, whatever N.
		_, hi, _ := suspicionBounds(Config{}.mustDefaults(), 10000)
		if limit := 2*int(hi/time.Second) + 10; total > limit {
			t.Errorf("N=%d: one failure cost the master %d messages, more than %d", n, total, limit)
		}
		// A host sends a ping and an ack a second, plus the indirect
		// probes of failures: a constant.
		if r.probes > 3 {
			t.Errorf("N=%d: a host sends %.2f msg/s, want at most 3", n, r.probes)
		}
	}
}
