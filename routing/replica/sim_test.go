package replica

import (
	"bytes"
	"container/heap"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"testing/cryptotest"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// counter is the test's application: each op "client:seq:key" adds one
// to key's count and returns the new count. It remembers every op it
// ran, so an op run twice is counted in dups (Dedup must make it 0).
type counter struct {
	Counts map[string]int
	Ran    map[string]bool
	dups   int
}

func newCounter() *counter { return &counter{Counts: map[string]int{}, Ran: map[string]bool{}} }

func (c *counter) Apply(_ uint64, op []byte) []byte {
	if c.Ran[string(op)] {
		c.dups++
	}
	c.Ran[string(op)] = true
	key := op[bytes.LastIndexByte(op, ':')+1:]
	c.Counts[string(key)]++
	return strconv.AppendInt(nil, int64(c.Counts[string(key)]), 10)
}

func (c *counter) Snapshot() ([]byte, error) { return json.Marshal(c) } // sorted map keys: deterministic

func (c *counter) Restore(b []byte) error {
	var n counter
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	if n.Counts == nil || n.Ran == nil {
		return fmt.Errorf("counter snapshot without maps")
	}
	c.Counts, c.Ran = n.Counts, n.Ran
	return nil
}

// simConfig is one simulated scenario.
type simConfig struct {
	n                  int
	loss, dup          float64       // per message
	minDelay, maxDelay time.Duration // uniform: messages reorder
	partitions         bool          // isolate a random replica now and then
	kills              int           // leader deaths
	midProposal        bool          // some deaths right after the leader accepts a proposal
	down               [2]time.Duration
	measure            bool // kill only a settled leader of a whole group, one death at a time
	duration           time.Duration
	clients            int
	replica            Config // Peers and ID filled in per replica
}

type simNode struct {
	id      uint64
	r       *Replica // nil while dead
	dedup   *Dedup
	app     *counter
	st      State // what it persisted
	applied uint64
	restart time.Time // when dead: when it comes back
}

type delivery struct {
	at       time.Time
	seq      uint64
	from, to uint64
	b        []byte
}

type queue []delivery

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(delivery)) }
func (q *queue) Pop() any {
	old := *q
	d := old[len(old)-1]
	*q = old[:len(old)-1]
	return d
}

type simClient struct {
	id          uint64
	seq         uint64
	cmd         []byte // the command outstanding; nil: none
	target      uint64
	index, term uint64 // where it was accepted (0: not yet)
	sent        time.Time
	next        time.Time
	redirect    bool // next goes to target: a refusal or a lost entry said so
	acked       int
}

type ack struct {
	index uint64
	cmd   string
}

type failover struct {
	took   time.Duration
	rounds uint64 // terms the election took
}

// sim is one seeded run: replicas, a network, clients and faults on
// virtual time, one event at a time.
type sim struct {
	t    testing.TB
	cfg  simConfig
	rnd  *rand.Rand
	now  time.Time
	end  time.Time
	hash [32]byte
	h    []byte // trace lines since the last fold into hash

	nodes   []*simNode
	net     queue
	netSeq  uint64
	cut     map[[2]uint64]bool
	healAt  time.Time
	clients []*simClient

	kills    []time.Time // when to kill the leader, ascending
	armed    bool        // kill the leader at its next acceptance
	deathAt  time.Time   // a leader's death not yet followed by a new leader
	deadTerm uint64

	common    []string          // the one applied sequence: "term/data" by index-1
	results   []string          // what Apply returned at each index
	first     map[string]string // a command's result where it first committed
	twice     int               // commands committed more than once
	leaderAt  map[uint64]uint64
	stateAt   map[uint64][32]byte // snapshot data hash by index
	acks      []ack
	failovers []failover
	snapsSent int
	restores  int
}

func newSim(t testing.TB, seed uint64, cfg simConfig) *sim {
	// raft draws its election timeouts from crypto/rand: seeded, so the
	// seed fixes them too and a run replays.
	if tt, ok := t.(*testing.T); ok {
		cryptotest.SetGlobalRandom(tt, seed)
	}
	s := &sim{
		t: t, cfg: cfg, rnd: rand.New(rand.NewPCG(seed, 0x5eed)),
		now: time.Unix(1_000_000, 0).UTC(), cut: map[[2]uint64]bool{},
		leaderAt: map[uint64]uint64{}, stateAt: map[uint64][32]byte{}, first: map[string]string{},
	}
	s.end = s.now.Add(cfg.duration)
	peers := make([]uint64, cfg.n)
	for i := range peers {
		peers[i] = uint64(i + 1)
	}
	s.cfg.replica.Peers = peers
	for _, id := range peers {
		n := &simNode{id: id}
		s.nodes = append(s.nodes, n)
		s.start(n)
	}
	for i := range cfg.clients {
		s.clients = append(s.clients, &simClient{id: uint64(100 + i), target: peers[i%len(peers)], next: s.now.Add(time.Duration(i) * 7 * time.Millisecond)})
	}
	// Leader deaths at seeded moments after the first election.
	span := cfg.duration - 8*time.Second
	for range cfg.kills {
		s.kills = append(s.kills, s.now.Add(3*time.Second+time.Duration(s.rnd.Int64N(int64(span)))))
	}
	slices.SortFunc(s.kills, func(a, b time.Time) int { return a.Compare(b) })
	if cfg.partitions {
		s.healAt = s.now.Add(5 * time.Second)
	}
	return s
}

func (s *sim) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("%v: "+format, append([]any{s.now.Sub(time.Unix(1_000_000, 0))}, args...)...)
}

func (s *sim) node(id uint64) *simNode { return s.nodes[id-1] }

func (s *sim) start(n *simNode) {
	cfg := s.cfg.replica
	cfg.ID = n.id
	n.app = newCounter()
	n.dedup = NewDedup(n.app)
	r, err := New(cfg, n.dedup, n.st)
	if err != nil {
		s.fatalf("start %d: %v", n.id, err)
	}
	n.r = r
	if _, term := r.Leader(); term != n.st.HardState.GetTerm() {
		s.fatalf("replica %d restarted at term %d, persisted %d", n.id, term, n.st.HardState.GetTerm())
	}
	n.applied = n.st.Snapshot.GetMetadata().GetIndex()
	if n.applied > 0 {
		s.checkState(n, n.applied)
	}
	s.trace("start %d applied %d", n.id, n.applied)
	s.step(n, Event{Kind: EvTick})
}

func (s *sim) kill(n *simNode, why string) {
	lead, term := n.r.Leader()
	if lead == n.id && s.deathAt.IsZero() {
		s.deathAt, s.deadTerm = s.now, term
	}
	n.r = nil
	lo, hi := s.cfg.down[0], s.cfg.down[1]
	n.restart = s.now.Add(lo + time.Duration(s.rnd.Int64N(int64(hi-lo)+1)))
	s.trace("kill %d (%s) until %v", n.id, why, n.restart.Sub(s.now))
}

func (s *sim) trace(format string, args ...any) {
	s.h = fmt.Appendf(s.h, "%d ", s.now.UnixNano())
	s.h = fmt.Appendf(s.h, format, args...)
	s.h = append(s.h, '\n')
	if len(s.h) > 1<<16 {
		s.fold()
	}
}

func (s *sim) fold() {
	s.hash = sha256.Sum256(append(s.hash[:], s.h...))
	s.h = s.h[:0]
}

// step feeds n one event and performs its effects as a shell does.
func (s *sim) step(n *simNode, ev Event) []Effect {
	effs := n.r.Step(s.now, ev)
	s.perform(n, effs)
	return effs
}

func (s *sim) perform(n *simNode, effs []Effect) {
	var snaps []uint64
	for _, e := range effs {
		if n.r == nil {
			break // killed while performing: the rest never happens
		}
		switch e.Kind {
		case EffPersist, EffSnapshot:
			n.st.Persist(e)
			if e.Kind == EffSnapshot {
				idx := e.Snapshot.GetMetadata().GetIndex()
				sum := sha256.Sum256(e.Snapshot.GetData())
				if prev, ok := s.stateAt[idx]; ok && prev != sum {
					s.fatalf("replica %d's snapshot at %d differs from another's", n.id, idx)
				}
				s.stateAt[idx] = sum
				s.trace("%d snapshot %d", n.id, idx)
			} else if !raft.IsEmptySnap(e.Snapshot) {
				// Restored from a leader's snapshot.
				idx := e.Snapshot.GetMetadata().GetIndex()
				if idx < n.applied {
					s.fatalf("replica %d restored snapshot %d behind its applied %d", n.id, idx, n.applied)
				}
				n.applied = idx
				s.restores++
				s.checkState(n, idx)
				s.trace("%d restored %d", n.id, idx)
			}
		case EffSend:
			s.send(n.id, e.Msg)
			if e.Msg.GetType() == pb.MsgSnap {
				snaps = append(snaps, e.To)
				s.snapsSent++
			}
		case EffApplied:
			s.applied(n, e)
		case EffLeader:
			s.trace("%d leader %d term %d", n.id, e.Lead, e.Term)
			if e.Lead != 0 {
				if prev, ok := s.leaderAt[e.Term]; ok && prev != e.Lead {
					s.fatalf("two leaders in term %d: %d and %d (%d says)", e.Term, prev, e.Lead, n.id)
				}
				s.leaderAt[e.Term] = e.Lead
			}
		case EffLeading:
			s.trace("%d leading %d", n.id, e.Term)
			if !s.deathAt.IsZero() {
				s.failovers = append(s.failovers, failover{took: s.now.Sub(s.deathAt), rounds: e.Term - s.deadTerm})
				s.deathAt = time.Time{}
			}
		case EffAccepted, EffRefused:
			s.trace("%d %v %d/%d", n.id, e.Kind, e.Index, e.Term)
			s.answer(n, e)
		case EffRejected, EffStopped:
			s.fatalf("replica %d: %v", n.id, e)
		}
	}
	// The shell reports a snapshot sent once the transport took it.
	for _, to := range snaps {
		if n.r != nil {
			s.step(n, Event{Kind: EvSnapshotSent, Peer: to})
		}
	}
}

// checkState holds n's state machine against the snapshot any replica
// took at idx.
func (s *sim) checkState(n *simNode, idx uint64) {
	want, ok := s.stateAt[idx]
	if !ok {
		return
	}
	b, err := n.dedup.Snapshot()
	if err != nil {
		s.fatalf("snapshot %d: %v", n.id, err)
	}
	if sha256.Sum256(b) != want {
		s.fatalf("replica %d's state at %d is not the snapshot's", n.id, idx)
	}
}

func (s *sim) applied(n *simNode, e Effect) {
	if e.Index != n.applied+1 {
		s.fatalf("replica %d applied %d after %d", n.id, e.Index, n.applied)
	}
	n.applied = e.Index
	entry := fmt.Sprintf("%d/%s", e.Term, e.Data)
	switch {
	case e.Index <= uint64(len(s.common)):
		if s.common[e.Index-1] != entry {
			s.fatalf("replica %d applied %q at %d where another applied %q", n.id, entry, e.Index, s.common[e.Index-1])
		}
		if s.results[e.Index-1] != string(e.Result) {
			s.fatalf("replica %d's Apply at %d returned %q, another's %q", n.id, e.Index, e.Result, s.results[e.Index-1])
		}
	default:
		s.common = append(s.common, entry)
		s.results = append(s.results, string(e.Result))
		if _, ok := s.first[string(e.Data)]; ok {
			s.twice++ // a retry committed after its first copy: Dedup's case
		} else if len(e.Data) > 0 {
			s.first[string(e.Data)] = string(e.Result)
		}
	}
	if n.app.dups > 0 {
		s.fatalf("replica %d ran an op twice", n.id)
	}
	for _, c := range s.clients {
		if c.cmd == nil || c.target != n.id || c.index != e.Index {
			continue
		}
		if c.term != e.Term {
			// Another leader's entry took the index: the proposal is
			// lost; propose it again.
			c.index, c.next, c.redirect = 0, s.now, true
			continue
		}
		if !bytes.Equal(e.Data, c.cmd) {
			s.fatalf("client %d's entry at %d/%d is %q, not %q", c.id, e.Index, e.Term, e.Data, c.cmd)
		}
		if first := s.first[string(c.cmd)]; string(e.Result) != first {
			s.fatalf("client %d's command answered %q, but it ran with %q", c.id, e.Result, first)
		}
		s.acks = append(s.acks, ack{index: e.Index, cmd: string(c.cmd)})
		s.trace("client %d acked %d at %d", c.id, c.seq, e.Index)
		c.cmd, c.index, c.acked = nil, 0, c.acked+1
		c.next = s.now.Add(time.Duration(1+s.rnd.IntN(20)) * time.Millisecond)
	}
}

func (s *sim) answer(n *simNode, e Effect) {
	for _, c := range s.clients {
		if c.cmd == nil || c.target != n.id || !bytes.Equal(c.cmd, e.Data) {
			continue
		}
		if e.Kind == EffAccepted {
			c.index, c.term = e.Index, e.Term
			if s.armed {
				s.armed = false
				s.kill(n, "mid-proposal")
			}
			return
		}
		// Refused: go to the leader it names, or try the next replica.
		c.redirect = true
		if e.Lead != 0 && e.Lead != n.id {
			c.target, c.next = e.Lead, s.now.Add(time.Millisecond)
		} else {
			c.target, c.next = c.target%uint64(s.cfg.n)+1, s.now.Add(50*time.Millisecond)
		}
		return
	}
}

func (s *sim) send(from uint64, m *pb.Message) {
	b, err := EncodeMessage(nil, m)
	if err != nil {
		s.fatalf("encode: %v", err)
	}
	to := m.GetTo()
	s.trace("%d send %d %v t%d i%d c%d n%d", from, to, m.GetType(), m.GetTerm(), m.GetIndex(), m.GetCommit(), len(m.GetEntries()))
	if s.cut[[2]uint64{from, to}] || s.rnd.Float64() < s.cfg.loss {
		return
	}
	copies := 1
	if s.rnd.Float64() < s.cfg.dup {
		copies = 2
	}
	for range copies {
		d := s.cfg.minDelay + time.Duration(s.rnd.Int64N(int64(s.cfg.maxDelay-s.cfg.minDelay)+1))
		s.netSeq++
		heap.Push(&s.net, delivery{at: s.now.Add(d), seq: s.netSeq, from: from, to: to, b: b})
	}
}

// whole says whether every replica is up and has applied every entry.
func (s *sim) whole() bool {
	for _, n := range s.nodes {
		if n.r == nil || n.applied != uint64(len(s.common)) {
			return false
		}
	}
	return true
}

// runFor steps the simulation for d of virtual time.
func (s *sim) runFor(d time.Duration) {
	for end := s.now.Add(d); s.now.Before(end); {
		s.next()
	}
}

func (s *sim) leader() *simNode {
	for _, n := range s.nodes {
		if n.r != nil {
			if lead, _ := n.r.Leader(); lead == n.id {
				return n
			}
		}
	}
	return nil
}

// run steps the simulation to its end, then heals everything, lets the
// group settle and checks that every replica holds every acknowledged
// command once.
func (s *sim) run() {
	for s.now.Before(s.end) {
		s.next()
	}
	s.trace("settle")
	s.kills, s.armed = nil, false
	clear(s.cut)
	for _, n := range s.nodes {
		if n.r == nil {
			n.restart = s.now
		}
	}
	for _, c := range s.clients {
		c.next = s.now.Add(time.Hour) // no new commands; outstanding ones finish below
		if c.cmd != nil {
			c.next = s.now
		}
	}
	deadline := s.now.Add(30 * time.Second)
	for s.now.Before(deadline) {
		s.next()
		if s.settled() {
			break
		}
	}
	if !s.settled() {
		s.fatalf("not settled 30 s after the faults stopped")
	}
	s.fold()
	s.checkEnd()
}

func (s *sim) settled() bool {
	for _, c := range s.clients {
		if c.cmd != nil {
			return false
		}
	}
	for _, n := range s.nodes {
		if n.r == nil || n.applied != uint64(len(s.common)) {
			return false
		}
	}
	return s.leader() != nil
}

func (s *sim) checkEnd() {
	var want []byte
	for _, n := range s.nodes {
		b, err := n.dedup.Snapshot()
		if err != nil {
			s.fatalf("snapshot %d: %v", n.id, err)
		}
		if want == nil {
			want = b
		} else if !bytes.Equal(b, want) {
			s.fatalf("replica %d's state differs from replica 1's", n.id)
		}
		for _, a := range s.acks {
			if s.common[a.index-1][bytes.IndexByte([]byte(s.common[a.index-1]), '/')+1:] != a.cmd {
				s.fatalf("acknowledged %q at %d, but %q is there", a.cmd, a.index, s.common[a.index-1])
			}
			c, err := ParseCommand([]byte(a.cmd))
			if err != nil || !n.app.Ran[string(c.Op)] {
				s.fatalf("replica %d lost the acknowledged %q", n.id, a.cmd)
			}
		}
		if n.app.dups != 0 {
			s.fatalf("replica %d ran %d ops twice", n.id, n.app.dups)
		}
	}
}

// next performs the earliest thing due: a delivery, a replica's tick, a
// client's action, a restart, a fault.
func (s *sim) next() {
	at := s.end.Add(time.Hour)
	var what string
	consider := func(t time.Time, w string) {
		if !t.IsZero() && t.Before(at) {
			at, what = t, w
		}
	}
	if len(s.net) > 0 {
		consider(s.net[0].at, "net")
	}
	for _, n := range s.nodes {
		if n.r != nil {
			consider(n.r.Next(), "tick")
		} else {
			consider(n.restart, "restart")
		}
	}
	for _, c := range s.clients {
		consider(c.next, "client")
	}
	if len(s.kills) > 0 {
		consider(s.kills[0], "kill")
	}
	if s.cfg.partitions {
		consider(s.healAt, "partition")
	}
	if at.Before(s.now) {
		s.fatalf("time went back by %v (%s)", s.now.Sub(at), what)
	}
	s.now = at

	switch {
	case len(s.net) > 0 && !s.net[0].at.After(at):
		d := heap.Pop(&s.net).(delivery)
		n := s.node(d.to)
		if n.r == nil || s.cut[[2]uint64{d.from, d.to}] {
			return
		}
		m, err := DecodeMessage(d.b, n.r.Config().MaxMsgBytes)
		if err != nil {
			s.fatalf("decode: %v", err)
		}
		s.step(n, Event{Kind: EvMessage, Msg: m})
		return
	case len(s.kills) > 0 && !s.kills[0].After(at):
		s.kills = s.kills[1:]
		l := s.leader()
		switch {
		case l == nil || !l.r.Leading() || s.cfg.measure && (!s.deathAt.IsZero() || !s.whole()):
			// No leader to kill yet: try again shortly.
			s.kills = append(s.kills, s.now.Add(200*time.Millisecond))
			slices.SortFunc(s.kills, func(a, b time.Time) int { return a.Compare(b) })
		case s.cfg.midProposal && s.rnd.IntN(2) == 0:
			s.armed = true
		default:
			s.kill(l, "leader")
		}
		return
	case s.cfg.partitions && !s.healAt.IsZero() && !s.healAt.After(at):
		s.partition()
		return
	}
	for _, n := range s.nodes {
		if n.r == nil && !n.restart.After(at) {
			s.start(n)
			return
		}
		if n.r != nil && !n.r.Next().After(at) {
			s.step(n, Event{Kind: EvTick})
			return
		}
	}
	for _, c := range s.clients {
		if !c.next.After(at) {
			s.act(c)
			return
		}
	}
}

// partition heals the cut there is, or cuts a random replica off from
// the rest for up to 3 s.
func (s *sim) partition() {
	if len(s.cut) > 0 {
		clear(s.cut)
		s.healAt = s.now.Add(time.Duration(1+s.rnd.IntN(8)) * time.Second)
		s.trace("heal")
		return
	}
	victim := uint64(1 + s.rnd.IntN(s.cfg.n))
	for _, n := range s.nodes {
		if n.id != victim {
			s.cut[[2]uint64{victim, n.id}] = true
			s.cut[[2]uint64{n.id, victim}] = true
		}
	}
	s.healAt = s.now.Add(time.Duration(200+s.rnd.IntN(2800)) * time.Millisecond)
	s.trace("cut %d", victim)
}

// act is a client's move: a new command, or the outstanding one again:
// to the leader a refusal named, or, when its target stayed silent (or
// did not apply it) for a timeout, to the next replica.
func (s *sim) act(c *simClient) {
	const timeout = 500 * time.Millisecond
	switch {
	case c.cmd == nil:
		c.seq++
		key := fmt.Sprintf("k%d", s.rnd.IntN(8))
		c.cmd = AppendCommand(nil, Command{Client: c.id, Seq: c.seq, Op: fmt.Appendf(nil, "%d:%d:%s", c.id, c.seq, key)})
	case !c.redirect:
		c.target = c.target%uint64(s.cfg.n) + 1
	}
	c.redirect = false
	c.index, c.sent, c.next = 0, s.now, s.now.Add(timeout)
	s.trace("client %d proposes %d to %d", c.id, c.seq, c.target)
	n := s.node(c.target)
	if n.r == nil {
		return
	}
	s.step(n, Event{Kind: EvPropose, Data: c.cmd})
}

// defaultSim is the safety scenario: loss, duplication, reordering,
// partitions, leader deaths (some right after an acceptance), small
// snapshots so that compaction and catch-up by snapshot happen.
func defaultSim(n int) simConfig {
	return simConfig{
		n: n, loss: 0.05, dup: 0.02, minDelay: time.Millisecond, maxDelay: 15 * time.Millisecond,
		partitions: true, kills: 6, midProposal: true,
		down:     [2]time.Duration{300 * time.Millisecond, 6 * time.Second},
		duration: 60 * time.Second, clients: 3,
		replica: Config{SnapshotEvery: 50, KeepEntries: 10},
	}
}

// TestSimulation runs seeded histories of 3 and 5 replicas and checks,
// after every step: one leader a term at most; every replica's applied
// entries are a prefix of one sequence, with the same results; every
// restored snapshot equals the state a replica had at its index; no op
// runs twice, and a client's answer is the result of its command's first
// commit; at the end every acknowledged command is in every replica's
// state once. Each history has retries committed twice, catch-ups by
// snapshot and failovers.
func TestSimulation(t *testing.T) {
	seeds := 4
	switch {
	case testing.Short():
		seeds = 1
	case raceEnabled: // the package starts no goroutine: fewer seeds lose no race
		seeds = 2
	}
	for _, n := range []int{3, 5} {
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprintf("n%d/seed%d", n, seed), func(t *testing.T) {
				s := newSim(t, seed, defaultSim(n))
				s.run()
				acked := 0
				for _, c := range s.clients {
					acked += c.acked
				}
				if acked < 100 {
					t.Errorf("only %d commands acknowledged", acked)
				}
				// The history must reach the cases it is for.
				if s.twice == 0 || s.restores == 0 || len(s.failovers) == 0 {
					t.Errorf("%d commands committed twice, %d snapshots restored, %d failovers: a case untried", s.twice, s.restores, len(s.failovers))
				}
				t.Logf("%d entries, %d acked, %d committed twice, %d snapshots sent, %d restored, failovers %v, trace %x", len(s.common), acked, s.twice, s.snapsSent, s.restores, s.failovers, s.hash[:6])
			})
		}
	}
}

// TestReplay: the same seed gives the same history, event for event.
func TestReplay(t *testing.T) {
	for _, n := range []int{3, 5} {
		cfg := defaultSim(n)
		cfg.duration = 20 * time.Second
		a := newSim(t, 7, cfg)
		a.run()
		b := newSim(t, 7, cfg)
		b.run()
		if a.hash != b.hash {
			t.Errorf("n=%d: seed 7 ran twice gives traces %x and %x", n, a.hash[:8], b.hash[:8])
		}
		c := newSim(t, 8, cfg)
		c.run()
		if c.hash == a.hash {
			t.Errorf("n=%d: seeds 7 and 8 give the same trace", n)
		}
	}
}
