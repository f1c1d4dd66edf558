package sim

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/dpvm/dpvm/sched/share"
)

// Node is a host of a heterogeneous cluster: its computational power
// (operations per unit time of one core, any unit) and core count.
type Node struct {
	Name  string  `json:"name"`
	Power float64 `json:"power"`
	Cores int     `json:"cores"`
}

// Table1 is the 10-node heterogeneous cluster of Bosque et al., Table 1
// (power in MFlops per core, from the NAS benchmarks).
func Table1() []Node {
	return []Node{
		{"c0-0", 669.02, 2}, {"c0-1", 664.64, 2},
		{"c0-9", 628.57, 4}, {"c0-10", 666.86, 4}, {"c0-11", 669.08, 4}, {"c0-14", 772.84, 4},
		{"c2-32", 1201.67, 8}, {"c2-33", 1198.34, 8}, {"c2-34", 1203.87, 8}, {"c2-35", 1205.68, 8},
	}
}

// IndexConfig describes the load-index experiment: Tasks tasks submitted to
// the Origins nodes (split evenly) one every Spacing time units, balanced by
// the load acceptance index policy, against the same tasks distributed
// evenly and statically over all nodes.
type IndexConfig struct {
	Nodes []Node
	// Origins names the nodes tasks are submitted to.
	Origins []string
	Tasks   int
	// TaskMean is the mean work of a task in time units on the most powerful
	// node's core; works are uniform in TaskMean·[1−TaskSpread, 1+TaskSpread].
	TaskMean, TaskSpread float64
	// Spacing is the time between two submissions at an origin.
	Spacing float64
	// Interval is the Load process's measurement period.
	Interval float64
	// Policy holds the state thresholds and the number of candidates.
	Policy share.IndexPolicy
	// TransferDelay is the time a task takes to reach a remote node.
	TransferDelay float64
	Seed          uint64
}

// DefaultIndex returns the paper's second experiment: Table 1's cluster,
// 100 tasks on c0-0, thresholds 0.7 and 0.4, three candidates, a 1 s
// measurement interval. Task works (mean 120 s on the fastest core, ±50%)
// are chosen so the even distribution takes about as long as the paper's
// 1090 s baseline; tasks are submitted every 0.5 s.
func DefaultIndex() IndexConfig {
	return IndexConfig{
		Nodes: Table1(), Origins: []string{"c0-0"}, Tasks: 100,
		TaskMean: 120, TaskSpread: 0.5, Spacing: 0.5, Interval: 1,
		Policy: share.DefaultIndexPolicy(), TransferDelay: 0.05, Seed: 1,
	}
}

// Validate reports an invalid configuration.
func (c IndexConfig) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrBadConfig}, a...)...) }
	if len(c.Nodes) < 2 || len(c.Nodes) > 4096 {
		return bad("%d nodes (2..4096)", len(c.Nodes))
	}
	names := map[string]bool{}
	for _, n := range c.Nodes {
		if !(n.Power > 0) || math.IsInf(n.Power, 0) || n.Cores < 1 || n.Cores > 1<<12 || names[n.Name] {
			return bad("node %q: power %g (> 0), cores %d (1..4096), names unique", n.Name, n.Power, n.Cores)
		}
		names[n.Name] = true
	}
	if len(c.Origins) == 0 {
		return bad("no origin")
	}
	for _, o := range c.Origins {
		if !names[o] {
			return bad("origin %q is not a node", o)
		}
	}
	switch {
	case c.Tasks < 1 || c.Tasks > 1_000_000:
		return bad("tasks %d (1..1000000)", c.Tasks)
	case !(c.TaskMean > 0) || !(c.TaskSpread >= 0 && c.TaskSpread < 1):
		return bad("task mean %g (> 0), spread %g (0 ≤ s < 1)", c.TaskMean, c.TaskSpread)
	case !(c.Spacing >= 0) || !(c.Interval > 0) || !(c.TransferDelay >= 0):
		return bad("spacing %g (≥ 0), interval %g (> 0), transfer delay %g (≥ 0)", c.Spacing, c.Interval, c.TransferDelay)
	}
	if err := c.Policy.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	return nil
}

// IndexRun is the outcome of one distribution of the tasks.
type IndexRun struct {
	// Makespan is when the last task finished.
	Makespan float64 `json:"makespan"`
	// TasksPerNode counts the tasks each node executed, in Nodes order.
	TasksPerNode []int `json:"tasks_per_node"`
	// Operations is the number of balancing operations, Messages the
	// remote requests plus state-change broadcasts they and the Load
	// process sent, Remote the tasks sent away from their origin.
	Operations int `json:"operations"`
	Messages   int `json:"messages"`
	Remote     int `json:"remote"`
	// Index samples each node's load index every sample period, for plots.
	Times []float64   `json:"-"`
	Index [][]float64 `json:"-"`
}

// IndexResult compares the even static distribution with the index policy.
type IndexResult struct {
	Nodes   []Node   `json:"nodes"`
	Static  IndexRun `json:"static"`
	Dynamic IndexRun `json:"dynamic"`
	// Speedup is Static.Makespan / Dynamic.Makespan.
	Speedup float64 `json:"speedup"`
}

const (
	ixSubmit uint8 = iota
	ixTick
	ixDone
	ixArrive
)

type ixNode struct {
	speed   float64 // power relative to the most powerful node
	cores   int
	rem     []float64 // remaining work of running tasks
	last    float64   // time rem was last brought up to date
	gen     uint32
	incom   int // tasks in flight to this node
	state   share.State
	pending []float64 // submitted, not yet launched (origins only)
}

type ixSim struct {
	cfg     IndexConfig
	q       eventQueue
	now     float64
	nodes   []ixNode
	rq      *share.RecipientQueue
	rng     *rand.Rand
	run     IndexRun
	left    int
	cands   []int
	dynamic bool
}

// RunIndex runs the experiment: once with the tasks spread evenly and
// statically over all nodes, once submitted to the origins and balanced by
// the load index policy.
func RunIndex(cfg IndexConfig) (IndexResult, error) {
	if err := cfg.Validate(); err != nil {
		return IndexResult{}, fmt.Errorf("index: %w", err)
	}
	wr := rand.New(rand.NewPCG(cfg.Seed, 0x1dec))
	works := make([]float64, cfg.Tasks)
	for i := range works {
		works[i] = cfg.TaskMean * (1 + cfg.TaskSpread*(2*wr.Float64()-1))
	}
	res := IndexResult{Nodes: cfg.Nodes}
	res.Static = runIndexOnce(cfg, works, false)
	res.Dynamic = runIndexOnce(cfg, works, true)
	res.Speedup = res.Static.Makespan / res.Dynamic.Makespan
	return res, nil
}

func runIndexOnce(cfg IndexConfig, works []float64, dynamic bool) IndexRun {
	pmax := 0.0
	for _, n := range cfg.Nodes {
		pmax = math.Max(pmax, n.Power)
	}
	s := &ixSim{cfg: cfg, nodes: make([]ixNode, len(cfg.Nodes)), rq: share.NewRecipientQueue(len(cfg.Nodes)),
		rng: rand.New(rand.NewPCG(cfg.Seed, 0xba1a)), left: len(works), dynamic: dynamic}
	s.run.TasksPerNode = make([]int, len(cfg.Nodes))
	s.run.Index = make([][]float64, len(cfg.Nodes))
	idx := map[string]int{}
	for i, n := range cfg.Nodes {
		s.nodes[i] = ixNode{speed: n.Power / pmax, cores: n.Cores}
		idx[n.Name] = i
		s.rq.Update(i, share.Neutral, share.Recipient) // every node starts idle
	}
	if !dynamic {
		for k, w := range works {
			s.start(k%len(s.nodes), w)
		}
	} else {
		for k := range works {
			o := idx[cfg.Origins[k%len(cfg.Origins)]]
			slot := k / len(cfg.Origins)
			s.q.push(event{t: float64(slot) * cfg.Spacing, kind: ixSubmit, a: int32(o), b: int32(k)})
		}
	}
	s.sample()
	s.q.push(event{t: cfg.Interval, kind: ixTick})
	for s.q.len() > 0 && s.left > 0 {
		e := s.q.pop()
		s.now = e.t
		switch e.kind {
		case ixSubmit:
			n := &s.nodes[e.a]
			n.pending = append(n.pending, works[e.b])
			s.balance(int(e.a))
		case ixTick:
			s.tick()
			s.q.push(event{t: s.now + cfg.Interval, kind: ixTick})
		case ixDone:
			s.done(int(e.a), e.gen)
		case ixArrive:
			s.nodes[e.a].incom--
			s.start(int(e.a), math.Float64frombits(uint64(e.b)<<32|uint64(e.gen)))
		}
	}
	s.sample()
	s.run.Makespan = s.now
	return s.run
}

// advance brings node i's remaining works up to now under processor
// sharing: each task runs at speed·min(1, cores/tasks).
func (s *ixSim) advance(i int) {
	n := &s.nodes[i]
	if len(n.rem) > 0 && s.now > n.last {
		r := n.speed * math.Min(1, float64(n.cores)/float64(len(n.rem))) * (s.now - n.last)
		for k := range n.rem {
			n.rem[k] -= r
		}
	}
	n.last = s.now
}

// reschedule pushes node i's next completion.
func (s *ixSim) reschedule(i int) {
	n := &s.nodes[i]
	n.gen++
	if len(n.rem) == 0 {
		return
	}
	m := math.Inf(1)
	for _, w := range n.rem {
		m = math.Min(m, w)
	}
	rate := n.speed * math.Min(1, float64(n.cores)/float64(len(n.rem)))
	s.q.push(event{t: s.now + math.Max(0, m)/rate, kind: ixDone, a: int32(i), gen: n.gen})
}

func (s *ixSim) start(i int, w float64) {
	s.advance(i)
	n := &s.nodes[i]
	n.rem = append(n.rem, w)
	s.run.TasksPerNode[i]++
	s.reschedule(i)
}

func (s *ixSim) done(i int, gen uint32) {
	n := &s.nodes[i]
	if gen != n.gen {
		return
	}
	s.advance(i)
	k := 0
	for _, w := range n.rem {
		if w > 1e-9 {
			n.rem[k] = w
			k++
		} else {
			s.left--
		}
	}
	n.rem = n.rem[:k]
	s.reschedule(i)
	if s.dynamic && len(n.pending) > 0 {
		s.balance(i)
	}
}

// tasks is node h's task count as a remote request sees it: running tasks
// plus tasks already on their way.
func (s *ixSim) tasks(h int) int { return len(s.nodes[h].rem) + s.nodes[h].incom }

func (s *ixSim) classify(h int) share.State {
	n := &s.nodes[h]
	return s.cfg.Policy.Classify(n.speed, 1, n.cores, s.tasks(h))
}

func (s *ixSim) index(h int) float64 {
	n := &s.nodes[h]
	return share.LoadIndex(n.speed, 1, n.cores, s.tasks(h))
}

// tick is the Load process on every node: measure the index, and broadcast
// changes to or from recipient, which update every recipient queue. Then
// origins with pending tasks retry balancing.
func (s *ixSim) tick() {
	for h := range s.nodes {
		n := &s.nodes[h]
		st := s.classify(h)
		if st != n.state {
			if s.rq.Update(h, n.state, st) {
				s.run.Messages++
			}
			n.state = st
		}
	}
	if s.now-float64(len(s.run.Times)-1)*s.sampleEvery() >= s.sampleEvery() {
		s.sample()
	}
	for h := range s.nodes {
		if len(s.nodes[h].pending) > 0 {
			s.balance(h)
		}
	}
}

func (s *ixSim) sampleEvery() float64 { return math.Max(s.cfg.Interval, 5) }

func (s *ixSim) sample() {
	s.run.Times = append(s.run.Times, s.now)
	for h := range s.nodes {
		s.run.Index[h] = append(s.run.Index[h], s.index(h))
	}
}

// balance is the Balance process of origin o: launch pending tasks locally
// while o is not an emitter; as an emitter, run one balancing operation:
// ask a few random recipients from the queue for their current index, sort
// them, and send each as many tasks as turn it neutral. Tasks that find no
// partner wait for the next state change.
func (s *ixSim) balance(o int) {
	n := &s.nodes[o]
	for len(n.pending) > 0 && s.classify(o) != share.Emitter {
		s.start(o, n.pending[0])
		n.pending = n.pending[1:]
	}
	if len(n.pending) == 0 {
		return
	}
	s.cands = s.rq.Sample(s.rng, s.cfg.Policy.Candidates, o, s.cands[:0])
	if len(s.cands) == 0 {
		return // globally overloaded: balancing is off
	}
	s.run.Operations++
	s.run.Messages += len(s.cands)
	share.SortByIndex(s.cands, s.index)
	for _, h := range s.cands {
		if len(n.pending) == 0 {
			break
		}
		hn := &s.nodes[h]
		c := s.cfg.Policy.Capacity(hn.speed, 1, hn.cores, s.tasks(h))
		for ; c > 0 && len(n.pending) > 0; c-- {
			w := n.pending[0]
			n.pending = n.pending[1:]
			hn.incom++
			s.run.Remote++
			bits := math.Float64bits(w)
			s.q.push(event{t: s.now + s.cfg.TransferDelay, kind: ixArrive, a: int32(h), b: int32(bits >> 32), gen: uint32(bits)})
		}
	}
}
