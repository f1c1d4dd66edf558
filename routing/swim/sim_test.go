package swim

import (
	"container/heap"
	"flag"
	"fmt"
	"hash"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// The whole cluster on one goroutine: N hosts' Nodes and the master's
// Referee, under a seeded scheduler of deliveries (each message delayed at
// random, lost at random between hosts), partitions of any shape (the
// master is in one of the groups), frozen hosts (overloaded: what comes
// for them waits until they thaw, then arrives late) and crashed hosts, in
// virtual time. The links to the master are the daemon's QUIC streams:
// reliable while connected, cut by partitions.

type simKind uint8

const (
	sDeliver    simKind = iota + 1 // Msg to a host
	sTick                          // a host's timer
	sToMaster                      // a host's effect reaching the master
	sFromMaster                    // a master's event reaching a host
	sMasterTick
	sFault // run fault f
)

type simEv struct {
	at   time.Time
	seq  uint64
	kind simKind
	to   task.HostID
	from task.HostID
	msg  Msg
	eff  Effect // sToMaster
	ev   Event  // sFromMaster
	f    func()
}

type evHeap []*simEv

func (h evHeap) Len() int { return len(h) }
func (h evHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h evHeap) Swap(i, j int)  { h[i], h[j] = h[j], h[i] }
func (h *evHeap) Push(x any)    { *h = append(*h, x.(*simEv)) }
func (h *evHeap) Pop() any      { old := *h; x := old[len(old)-1]; *h = old[:len(old)-1]; return x }
func (h evHeap) peek() *simEv   { return h[0] }
func (h *evHeap) push(e *simEv) { heap.Push(h, e) }

type simHost struct {
	id      task.HostID
	node    *Node
	crashed bool
	crashAt time.Time
	frozen  bool
	held    []*simEv
	tickAt  time.Time
	lastInc uint32
	// excusedUntil: the master may rightly delete this host until then
	// (it was frozen or cut off from the master within the check window).
	excusedUntil time.Time
}

type cluster struct {
	t     testing.TB
	cfg   Config
	rnd   *rand.Rand
	now   time.Time
	q     evHeap
	seq   uint64
	hosts []*simHost // by ID-1
	ref   *Referee
	refAt time.Time
	group map[task.HostID]int // partition group; absent: 0
	// cut: directed links between hosts that carry nothing (one-way
	// partitions: a→b cut, b→a not).
	cut     map[[2]task.HostID]bool
	loss    float64
	delay   [2]time.Duration
	trace   hash.Hash64 // nil: no trace (the cost model's large runs)
	verbose bool

	// What the master received, by kind of effect.
	toMaster map[string]int
	// fromMaster: what the master sent, checks and gossip.
	fromMaster int
	deletes    []string
	deleted    map[task.HostID]uint32 // confirmed dead, at incarnation
	// healedAt is when the last partition healed (crash bounds count
	// from it).
	healedAt time.Time
	sent     int // host-to-host messages sent
	steps    int
}

func newCluster(t testing.TB, n int, cfg Config, seed uint64) *cluster {
	c := &cluster{t: t, rnd: rand.New(rand.NewPCG(seed, seed^0x5eed)), now: time.Unix(1_000_000, 0).UTC(),
		group: map[task.HostID]int{}, delay: [2]time.Duration{time.Millisecond, 20 * time.Millisecond},
		trace: fnv.New64a(), toMaster: map[string]int{}, deleted: map[task.HostID]uint32{}}
	ref, err := NewReferee(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.ref = ref
	c.cfg = ref.cfg
	roster := make([]task.HostID, n)
	for i := range roster {
		roster[i] = task.HostID(i + 1)
	}
	for i := range n {
		id := task.HostID(i + 1)
		node, err := New(id, 0, cfg, rand.New(rand.NewPCG(seed, uint64(id))))
		if err != nil {
			t.Fatal(err)
		}
		h := &simHost{id: id, node: node}
		c.hosts = append(c.hosts, h)
		c.ref.Step(c.now, RefEvent{Kind: RefAdmit, Host: id})
	}
	for _, h := range c.hosts {
		c.stepHost(h, Event{Kind: EvJoin, Roster: roster})
	}
	return c
}

func (c *cluster) host(id task.HostID) *simHost { return c.hosts[id-1] }

func (c *cluster) push(e *simEv) {
	c.seq++
	e.seq = c.seq
	c.q.push(e)
}

// linked: a and b (either may be the master) can reach each other.
func (c *cluster) linked(a, b task.HostID) bool {
	return c.group[a] == c.group[b] && !c.cut[[2]task.HostID{a, b}]
}

func (c *cluster) lat() time.Duration {
	return c.delay[0] + time.Duration(c.rnd.Int64N(int64(c.delay[1]-c.delay[0])+1))
}

func (c *cluster) log(format string, args ...any) {
	if c.trace == nil {
		return
	}
	s := fmt.Sprintf("%d "+format+"\n", append([]any{c.now.UnixMicro()}, args...)...)
	c.trace.Write([]byte(s))
	if c.verbose {
		c.t.Log(s)
	}
}

// stepHost steps h's node, performs its effects and sets its timer.
func (c *cluster) stepHost(h *simHost, ev Event) {
	effs := h.node.Step(c.now, ev)
	if c.verbose || ev.Kind != EvTick {
		c.log("%v %v", h.id, ev.Kind)
	}
	if inc := h.node.Incarnation(); inc < h.lastInc {
		c.t.Fatalf("%v: incarnation went back from %d to %d", h.id, h.lastInc, inc)
	} else {
		h.lastInc = inc
	}
	for _, e := range effs {
		c.log("%v %v", h.id, e)
		switch e.Kind {
		case EffSend:
			c.sent++
			if e.Msg.To == h.id || e.Msg.To == master {
				c.t.Fatalf("%v sends to itself or the master: %v", h.id, e.Msg)
			}
			if !c.linked(h.id, e.Msg.To) || c.rnd.Float64() < c.loss {
				continue
			}
			c.push(&simEv{at: c.now.Add(c.lat()), kind: sDeliver, to: e.Msg.To, msg: e.Msg})
		default:
			if c.linked(h.id, master) {
				c.push(&simEv{at: c.now.Add(c.lat()), kind: sToMaster, from: h.id, eff: e})
			}
		}
	}
	c.schedule(h)
}

func (c *cluster) schedule(h *simHost) {
	t := h.node.Next()
	if !t.After(c.now) {
		t = c.now.Add(time.Millisecond)
	}
	if !t.Equal(h.tickAt) {
		h.tickAt = t
		c.push(&simEv{at: t, kind: sTick, to: h.id})
	}
}

// stepMaster steps the referee and performs its effects.
func (c *cluster) stepMaster(ev RefEvent) {
	for _, e := range c.ref.Step(c.now, ev) {
		c.log("master %v", e)
		switch e.Kind {
		case RefCheck:
			c.toHost(e.Host, Event{Kind: EvCheck, Seq: e.Seq, Inc: e.Inc})
		case RefGossip:
			if e.Update.Host == e.To && e.Update.State == Dead {
				c.tellDeleted(e.To)
			} else {
				c.toHost(e.To, Event{Kind: EvGossip, Update: e.Update})
			}
		case RefDelete:
			c.deleteHost(e.Host, e.Inc)
		}
	}
	if t := c.ref.Next(); !t.IsZero() && (c.refAt.IsZero() || t.Before(c.refAt) || !c.refAt.After(c.now)) {
		c.refAt = t
		c.push(&simEv{at: t, kind: sMasterTick})
	}
}

func (c *cluster) toHost(h task.HostID, ev Event) {
	c.fromMaster++
	if c.linked(master, h) {
		c.push(&simEv{at: c.now.Add(c.lat()), kind: sFromMaster, to: h, ev: ev})
	}
}

// tellDeleted tells a deleted host so over its master connection, which
// (as QUIC's) outlasts a partition: retried every second until the host
// is linked again, unless it rejoined meanwhile.
func (c *cluster) tellDeleted(h task.HostID) {
	inc, ok := c.deleted[h]
	if !ok {
		return
	}
	if c.linked(master, h) {
		c.toHost(h, Event{Kind: EvGossip, Update: Update{State: Dead, Host: h, Inc: inc}})
		return
	}
	c.at(time.Second, func() { c.tellDeleted(h) })
}

// deleteHost is the master's lost-host path. The oracle: the host is
// crashed, or was frozen or cut off from the master within the window
// of the checks — a live host the master can reach is never deleted.
func (c *cluster) deleteHost(h task.HostID, inc uint32) {
	sh := c.host(h)
	if !sh.crashed && !sh.frozen && c.linked(master, h) && c.now.After(sh.excusedUntil) {
		c.t.Fatalf("%v: the master deleted %v#%d, live and reachable (incarnation %d)", c.now, h, inc, sh.node.Incarnation())
	}
	c.deleted[h] = inc
	c.deletes = append(c.deletes, fmt.Sprintf("%v#%d", h, inc))
}

// excuse marks h as rightly deletable for the check window from now.
func (c *cluster) excuse(h *simHost) {
	w := time.Duration(c.cfg.CheckTries+1)*c.cfg.CheckTimeout + 4*c.delay[1]
	h.excusedUntil = c.now.Add(w)
}

// run processes events until the virtual clock reaches end.
func (c *cluster) run(end time.Time, check func()) {
	for c.q.Len() > 0 && !c.q.peek().at.After(end) {
		e := heap.Pop(&c.q).(*simEv)
		c.now = e.at
		c.steps++
		switch e.kind {
		case sFault:
			e.f()
		case sMasterTick:
			if e.at.Equal(c.refAt) {
				c.stepMaster(RefEvent{Kind: RefTick})
			}
		case sToMaster:
			c.masterReceives(e.from, e.eff)
		default:
			h := c.host(e.to)
			if h.crashed {
				continue
			}
			if e.kind == sTick && !e.at.Equal(h.tickAt) {
				continue
			}
			if h.frozen {
				if e.kind != sTick {
					h.held = append(h.held, e)
				}
				continue
			}
			c.hostReceives(h, e)
		}
		if check != nil {
			check()
		}
	}
	c.now = end
}

func (c *cluster) hostReceives(h *simHost, e *simEv) {
	switch e.kind {
	case sTick:
		c.stepHost(h, Event{Kind: EvTick})
	case sDeliver:
		c.stepHost(h, Event{Kind: EvMsg, Msg: e.msg})
	case sFromMaster:
		if e.ev.Kind == EvRejoined {
			if d, ok := c.deleted[h.id]; ok && h.node.Rejoining() {
				c.stepHost(h, e.ev)
				if h.node.Incarnation() <= d {
					c.t.Fatalf("%v rejoined at #%d, not above its death at #%d", h.id, h.node.Incarnation(), d)
				}
				delete(c.deleted, h.id)
				c.stepMaster(RefEvent{Kind: RefAdmit, Host: h.id, Inc: h.node.Incarnation()})
				return
			}
		}
		c.stepHost(h, e.ev)
	}
}

// masterReceives is the master's side of a host's effect.
func (c *cluster) masterReceives(from task.HostID, e Effect) {
	c.log("master hears %v: %v", from, e)
	switch e.Kind {
	case EffReport:
		c.toMaster[e.Update.State.String()]++
		c.stepMaster(RefEvent{Kind: RefReport, From: from, Update: e.Update})
	case EffCheckAck:
		c.toMaster["check-ack"]++
		c.stepMaster(RefEvent{Kind: RefCheckAck, Host: from, Seq: e.Seq, Inc: e.Inc})
	case EffRejoin:
		c.toMaster["rejoin"]++
		// The master's readmission: a deleted host is taken back (its
		// tasks stopped), a member is told it still is one.
		c.toHost(from, Event{Kind: EvRejoined})
	}
}

func (c *cluster) at(d time.Duration, f func()) {
	c.push(&simEv{at: c.now.Add(d), kind: sFault, f: f})
}

func (c *cluster) crash(h *simHost) {
	c.log("crash %v", h.id)
	h.crashed, h.crashAt = true, c.now
}

func (c *cluster) freeze(h *simHost, d time.Duration) {
	if h.crashed || h.frozen {
		return
	}
	c.log("freeze %v %v", h.id, d)
	h.frozen = true
	c.at(d, func() {
		c.log("thaw %v", h.id)
		h.frozen = false
		c.excuse(h)
		held := h.held
		h.held = nil
		for _, e := range held {
			if !h.crashed {
				c.hostReceives(h, e)
			}
		}
		if !h.crashed {
			c.stepHost(h, Event{Kind: EvTick})
		}
	})
}

// partition splits the hosts and the master into groups; heal joins them.
func (c *cluster) partition(groups map[task.HostID]int) {
	c.log("partition %v", groups)
	c.group = groups
	for _, h := range c.hosts {
		if !c.linked(master, h.id) {
			h.excusedUntil = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
		}
	}
}

func (c *cluster) heal() {
	c.log("heal")
	for _, h := range c.hosts {
		if !c.linked(master, h.id) {
			c.excuse(h)
		}
	}
	c.group = map[task.HostID]int{}
	c.healedAt = c.now
}

// crashBound is how long after a crash (or the last heal) the master must
// have confirmed it: every live host probes each member once a pass of
// the rotation, the suspicion runs its longest twice over, the checks,
// and slack for health-scaled intervals.
func (c *cluster) crashBound() time.Duration {
	n := len(c.hosts)
	_, hi, _ := suspicionBounds(c.cfg, n)
	return time.Duration(2*n+20)*c.cfg.ProbeInterval + 2*hi + time.Duration(c.cfg.CheckTries+1)*c.cfg.CheckTimeout
}

// checkCrashes fails if a crashed host went unconfirmed past the bound.
func (c *cluster) checkCrashes() {
	bound := c.crashBound()
	for _, h := range c.hosts {
		if !h.crashed {
			continue
		}
		if _, ok := c.deleted[h.id]; ok {
			continue
		}
		from := h.crashAt
		if c.healedAt.After(from) {
			from = c.healedAt
		}
		if c.now.Sub(from) > bound {
			c.t.Fatalf("%v: crashed %v at %v, not confirmed dead within %v", c.now, h.id, h.crashAt, bound)
		}
	}
}

// checkConverged: after the faults, every live host is a member at the
// master, not rejoining, and alive at its incarnation in every live
// host's view; every crashed host is confirmed dead and held dead.
func (c *cluster) checkConverged() {
	for _, h := range c.hosts {
		if h.crashed {
			if _, ok := c.deleted[h.id]; !ok {
				c.t.Errorf("crashed %v not confirmed dead", h.id)
			}
			continue
		}
		if _, ok := c.ref.Member(h.id); !ok {
			c.t.Errorf("live %v is not a member at the master", h.id)
		}
		if h.node.Rejoining() {
			c.t.Errorf("live %v still rejoining", h.id)
		}
		for _, o := range c.hosts {
			if o.crashed {
				if st, _, ok := h.node.State(o.id); ok && st != Dead {
					c.t.Errorf("%v holds crashed %v %v", h.id, o.id, st)
				}
				continue
			}
			st, inc, _ := h.node.State(o.id)
			if st != Alive || inc != o.node.Incarnation() {
				c.t.Errorf("%v holds %v %v#%d, it is alive#%d", h.id, o.id, st, inc, o.node.Incarnation())
			}
		}
	}
}

// faults schedules a random fault history over span: crashes, freezes of
// up to a minute, one-way cuts of random links between hosts, partitions
// of random shape (the master in one group) that heal.
func (c *cluster) faults(span time.Duration, crashes int) {
	r := c.rnd
	n := len(c.hosts)
	victims := r.Perm(n)[:crashes]
	for _, i := range victims {
		h := c.hosts[i]
		c.at(time.Duration(r.Int64N(int64(span))), func() { c.crash(h) })
	}
	for range n / 2 {
		h := c.hosts[r.IntN(n)]
		d := time.Duration(r.Int64N(int64(60 * time.Second)))
		c.at(time.Duration(r.Int64N(int64(span))), func() { c.freeze(h, d) })
	}
	// One-way cuts: a random tenth of the directed links between hosts
	// carry nothing for a while.
	for range 3 {
		at := time.Duration(r.Int64N(int64(span)))
		d := time.Duration(r.Int64N(int64(60 * time.Second)))
		cut := map[[2]task.HostID]bool{}
		for _, a := range c.hosts {
			for _, b := range c.hosts {
				if a != b && r.IntN(10) == 0 {
					cut[[2]task.HostID{a.id, b.id}] = true
				}
			}
		}
		c.at(at, func() { c.log("cut %d links", len(cut)); c.cut = cut })
		c.at(at+d, func() { c.log("uncut"); c.cut = nil })
	}
	// Partitions, one at a time.
	t := time.Duration(0)
	for {
		t += time.Duration(r.Int64N(int64(span / 3)))
		d := time.Duration(r.Int64N(int64(90 * time.Second)))
		if t+d > span {
			break
		}
		k := 2 + r.IntN(3)
		groups := map[task.HostID]int{master: r.IntN(k)}
		for _, h := range c.hosts {
			groups[h.id] = r.IntN(k)
		}
		c.at(t, func() { c.partition(groups) })
		c.at(t+d, func() { c.heal() })
		t += d
	}
}

// simulate runs one seeded fault history and checks it; it returns the
// trace's hash.
func simulate(t testing.TB, seed uint64, n int, cfg Config) (uint64, *cluster) {
	c := newCluster(t, n, cfg, seed)
	c.loss = 0.03 * c.rnd.Float64()
	span := 10 * time.Minute
	c.faults(span, n/6)
	c.run(c.now.Add(span), c.checkCrashes)
	// The quiet after the faults: every partition healed, every host
	// thawed; long enough for the rotation, the suspicions and the
	// rejoins.
	quiet := 2*c.crashBound() + 2*time.Minute
	c.run(c.now.Add(quiet), c.checkCrashes)
	c.checkConverged()
	return c.trace.Sum64(), c
}

var simSeeds = flag.Int("seeds", 6, "how many seeded fault histories TestSimulation runs")

// TestSimulation runs seeded fault histories of 8, 24 and 48 hosts and
// checks, after every step, that no live host the master can reach is
// deleted and that every crashed host is confirmed within the bound; at
// the end, that the healed hosts rejoined and every view converged. Each
// seed runs twice and must replay event for event.
func TestSimulation(t *testing.T) {
	seeds := *simSeeds
	if testing.Short() {
		seeds = min(seeds, 2)
	}
	hashes := map[uint64]uint64{}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		n := []int{24, 8, 48}[seed%3]
		t.Run(fmt.Sprintf("seed%d-hosts%d", seed, n), func(t *testing.T) {
			h1, c := simulate(t, seed, n, Config{})
			h2, _ := simulate(t, seed, n, Config{})
			if h1 != h2 {
				t.Fatalf("seed %d does not replay: trace %x then %x", seed, h1, h2)
			}
			if prev, dup := hashes[h1]; dup {
				t.Fatalf("seeds %d and %d give the same trace", prev, seed)
			}
			hashes[h1] = seed
			keys := make([]string, 0, len(c.toMaster))
			for k := range c.toMaster {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			var msgs []string
			for _, k := range keys {
				msgs = append(msgs, fmt.Sprintf("%s=%d", k, c.toMaster[k]))
			}
			t.Logf("seed %d: trace %x, %d steps, loss %.3f, deleted %v, master heard %v, sent %d", seed, h1, c.steps, c.loss, c.deletes, msgs, c.fromMaster)
		})
	}
}

// catcher records the oracle's first complaint and stops the run.
type catcher struct {
	testing.TB
	failed string
}

func (c *catcher) Fatalf(format string, args ...any) {
	c.failed = fmt.Sprintf(format, args...)
	panic(c)
}
func (c *catcher) Errorf(format string, args ...any) { c.Fatalf(format, args...) }
func (c *catcher) Fatal(args ...any)                 { c.Fatalf("%s", fmt.Sprint(args...)) }

// TestSimulationCatchesHastyMaster: the oracle is not blind. A referee
// whose checks time out before any answer can come (1µs) deletes live
// hosts it could reach, and the simulation must say so.
func TestSimulationCatchesHastyMaster(t *testing.T) {
	c := &catcher{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != c {
				panic(r)
			}
		}()
		simulate(c, 1, 24, Config{CheckTimeout: time.Microsecond, CheckTries: 1})
	}()
	if !strings.Contains(c.failed, "live and reachable") {
		t.Fatalf("a hasty master went unnoticed (oracle said %q)", c.failed)
	}
	t.Logf("caught: %s", c.failed)
}

// TestRefutedThenCrashed: a host whose messages to the other hosts are
// lost (one way: it hears them, they do not hear it) is suspected and
// refutes, over and over; only the master, which hears its refutations,
// knows its latest incarnation. Then it crashes. The others report the
// death of the incarnation they hold, older than the master's, and the
// master must still confirm it within the bound; while it was alive and
// reachable it must not have been deleted.
func TestRefutedThenCrashed(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			c := newCluster(t, 8, Config{}, seed)
			start := c.now
			victim := c.host(3)
			cut := map[[2]task.HostID]bool{}
			for _, o := range c.hosts {
				if o != victim {
					cut[[2]task.HostID{victim.id, o.id}] = true
				}
			}
			c.cut = cut
			// Run until a refutation has reached the master and not all
			// the others: the moment to crash.
			var inc uint32
			for stale := 0; stale == 0; {
				if c.now.Sub(start) > time.Minute {
					t.Fatalf("in a minute the master never knew a later incarnation of %v than the others", victim.id)
				}
				c.run(c.now.Add(100*time.Millisecond), c.checkCrashes)
				var ok bool
				if inc, ok = c.ref.Member(victim.id); !ok {
					t.Fatalf("%v deleted while the master reached it", victim.id)
				}
				for _, o := range c.hosts {
					if _, held, _ := o.node.State(victim.id); o != victim && held < inc {
						stale++
					}
				}
			}
			c.crash(victim)
			c.cut = nil
			c.run(c.now.Add(c.crashBound()+time.Minute), c.checkCrashes)
			if d, ok := c.deleted[victim.id]; !ok || d < inc {
				t.Fatalf("%v crashed at #%d: confirmed %v at #%d", victim.id, inc, ok, d)
			}
			c.checkConverged()
		})
	}
}
