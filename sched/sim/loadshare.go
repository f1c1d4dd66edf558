package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/dpvm/dpvm/sched/share"
)

// ErrBadConfig is returned (wrapped) for an invalid simulation configuration.
var ErrBadConfig = errors.New("sim: invalid configuration")

// Policy names a load-sharing policy of the load-sharing model.
type Policy string

// The load-sharing policies the model simulates.
const (
	NLS      Policy = "nls"       // no load sharing
	SI       Policy = "si"        // sender-initiated
	RI       Policy = "ri"        // receiver-initiated, no reinitiation
	RIReinit Policy = "ri-reinit" // receiver-initiated with reinitiation period δ
	Index    Policy = "index"     // load acceptance index, emitter-initiated
)

// Policies lists the policies in the order reports use.
var Policies = []Policy{NLS, SI, RI, RIReinit, Index}

// ParsePolicy accepts a policy name, case-insensitively.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range Policies {
		if strings.EqualFold(s, string(p)) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: unknown policy %q (known: nls, si, ri, ri-reinit, index)", ErrBadConfig, s)
}

// Sched is a node scheduling discipline.
type Sched string

// The node scheduling disciplines.
const (
	FCFS Sched = "fcfs" // non-preemptive first come, first served
	RR   Sched = "rr"   // preemptive round robin with a quantum
)

// ParseSched accepts "fcfs" or "rr", case-insensitively.
func ParseSched(s string) (Sched, error) {
	switch strings.ToLower(s) {
	case "fcfs":
		return FCFS, nil
	case "rr":
		return RR, nil
	}
	return "", fmt.Errorf("%w: unknown node scheduling %q (known: fcfs, rr)", ErrBadConfig, s)
}

// LoadShareConfig describes one run of the load-sharing model. Start from
// DefaultLoadShare, which holds the defaults of Dandamudi's Appendix A.
type LoadShareConfig struct {
	Policy Policy
	Sched  Sched
	// Nodes is the number of identical nodes.
	Nodes int
	// Util is the offered utilisation λ/μ of every node (0 < Util < 1).
	Util float64
	// ServiceMean is 1/μ; CA and CS are the coefficients of variation of
	// the inter-arrival and service times.
	ServiceMean float64
	CA, CS      float64
	// Threshold is T = T_M = T_S; ReceiverThreshold is T_R; ProbeLimit P_l.
	Threshold         int
	ReceiverThreshold int
	ProbeLimit        int
	// Reinit is the reinitiation period δ of ri-reinit.
	Reinit float64
	// Quantum and ContextSwitch are the round-robin quantum Q and the cost
	// of a preemption.
	Quantum       float64
	ContextSwitch float64
	// ProbeCost (T_probe) is the CPU cost of sending or receiving a probe,
	// TransferCost (T_jx) of sending or receiving a job; a transfer takes a
	// time uniform in [TransferMin, TransferMax] on the network.
	ProbeCost    float64
	TransferCost float64
	TransferMin  float64
	TransferMax  float64
	// IndexRecipient and IndexEmitter are the load index thresholds of the
	// index policy; IndexCandidates the recipients asked per operation.
	IndexRecipient  float64
	IndexEmitter    float64
	IndexCandidates int
	// Warmup is simulated time discarded before the first batch;
	// Batches × BatchLength is the measured time.
	Warmup      float64
	Batches     int
	BatchLength float64
	// Seed selects the random streams.
	Seed uint64
}

// DefaultLoadShare returns Appendix A's defaults: 32 nodes, exponential
// arrivals and service with mean 1, FCFS, T = 2, T_R = 1, P_l = 3, δ = 1,
// Q = 0.1 with a 1% context switch, T_probe = 0.003, T_jx = 0.02, transfer
// time U(0.009, 0.011), and 30 batches of 1000 time units after a warm-up
// of 1000.
func DefaultLoadShare() LoadShareConfig {
	return LoadShareConfig{
		Policy: NLS, Sched: FCFS, Nodes: 32, Util: 0.5,
		ServiceMean: 1, CA: 1, CS: 1,
		Threshold: 2, ReceiverThreshold: 1, ProbeLimit: 3, Reinit: 1,
		Quantum: 0.1, ContextSwitch: 0.001,
		ProbeCost: 0.003, TransferCost: 0.02, TransferMin: 0.009, TransferMax: 0.011,
		IndexRecipient: 0.7, IndexEmitter: 0.4, IndexCandidates: 3,
		Warmup: 1000, Batches: 30, BatchLength: 1000, Seed: 1,
	}
}

// Validate reports an invalid configuration.
func (c LoadShareConfig) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrBadConfig}, a...)...) }
	if _, err := ParsePolicy(string(c.Policy)); err != nil {
		return err
	}
	if _, err := ParseSched(string(c.Sched)); err != nil {
		return err
	}
	switch {
	case c.Nodes < 2 || c.Nodes > 1<<16:
		return bad("nodes %d (2..65536)", c.Nodes)
	case !(c.Util > 0 && c.Util < 1):
		return bad("utilisation %g (0 < u < 1)", c.Util)
	case c.Threshold < 1 || c.ReceiverThreshold < 1 || c.ProbeLimit < 0 || c.ProbeLimit > 16:
		return bad("threshold %d, receiver threshold %d (≥ 1), probe limit %d (0..16)", c.Threshold, c.ReceiverThreshold, c.ProbeLimit)
	case c.Policy == RIReinit && !(c.Reinit > 0):
		return bad("reinitiation period %g (> 0)", c.Reinit)
	case c.Sched == RR && (!(c.Quantum > 0) || !(c.ContextSwitch >= 0)):
		return bad("quantum %g (> 0), context switch %g (≥ 0)", c.Quantum, c.ContextSwitch)
	case !(c.ProbeCost >= 0) || !(c.TransferCost >= 0) || !(c.TransferMin >= 0) || !(c.TransferMax >= c.TransferMin):
		return bad("costs probe %g, transfer %g, transfer time [%g, %g]", c.ProbeCost, c.TransferCost, c.TransferMin, c.TransferMax)
	case !(c.Warmup >= 0) || c.Batches < 2 || c.Batches > 10000 || !(c.BatchLength > 0):
		return bad("warm-up %g (≥ 0), batches %d (2..10000), batch length %g (> 0)", c.Warmup, c.Batches, c.BatchLength)
	case math.IsInf(c.Warmup+float64(c.Batches)*c.BatchLength, 0):
		return bad("run length overflows")
	}
	if err := (Dist{Mean: c.ServiceMean, CV: c.CS}).Validate(); err != nil {
		return fmt.Errorf("service time: %w", err)
	}
	if err := (Dist{Mean: c.ServiceMean / c.Util, CV: c.CA}).Validate(); err != nil {
		return fmt.Errorf("inter-arrival time: %w", err)
	}
	if c.Policy == Index {
		ip := share.IndexPolicy{RecipientThreshold: c.IndexRecipient, EmitterThreshold: c.IndexEmitter, Candidates: c.IndexCandidates}
		if err := ip.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrBadConfig, err)
		}
	}
	return nil
}

// LoadShareResult is the outcome of one run.
type LoadShareResult struct {
	Policy Policy  `json:"policy"`
	Sched  Sched   `json:"sched"`
	Util   float64 `json:"util"`
	CA     float64 `json:"ca"`
	CS     float64 `json:"cs"`
	// MeanResponse is the grand mean of the batch means of job response
	// time (completion minus arrival); CI95 the half-width of its 95%
	// confidence interval.
	MeanResponse float64 `json:"mean_response"`
	CI95         float64 `json:"ci95"`
	// Jobs is the number of jobs completed in the measured batches.
	Jobs int64 `json:"jobs"`
	// TransferRate is the fraction of measured-period arrivals moved to
	// another node; ProbesPerJob the probes sent per arrival.
	TransferRate float64 `json:"transfer_rate"`
	ProbesPerJob float64 `json:"probes_per_job"`
	// MeasuredUtil is the fraction of CPU time nodes spent on jobs and
	// overhead during the measured period.
	MeasuredUtil float64 `json:"measured_util"`
	// Events is the number of events the simulator processed.
	Events int64 `json:"events"`
	// Batches holds the per-batch mean response times.
	Batches []float64 `json:"batches,omitempty"`
}

// event kinds of the load-sharing model.
const (
	lsArrival uint8 = iota
	lsSliceEnd
	lsTransfer
	lsReinit
)

type lsJob struct {
	arrive float64
	rem    float64
}

type lsNode struct {
	jobq, waitq   ring
	incoming      int32
	running       bool
	reinitPending bool
	state         share.State
	gen           uint32
	ohEnd         float64 // CPU busy with overhead until then (when no job runs)
	due           float64 // planned end of the running slice, overheads included
	slice         float64 // service the running slice gives its job
	sliceStart    float64
	busy          float64 // CPU time spent on jobs and overhead within the measured period
	arr, svc      sampler
	rng           *rand.Rand // workload stream: arrivals and service times
}

type lsSim struct {
	cfg                            LoadShareConfig
	q                              eventQueue
	now                            float64
	nodes                          []lsNode
	jobs                           []lsJob
	free                           []int32
	rng                            *rand.Rand // policy stream: probes and transfer times
	si                             share.SenderInitiated
	ri                             share.ReceiverInitiated
	ip                             share.IndexPolicy
	rq                             *share.RecipientQueue
	probe                          uint8 // what Probe checks
	self                           int
	cands                          []int
	index                          func(h int) float64 // s.indexOf, bound once
	rr                             bool
	start                          float64 // measurement start
	end                            float64
	sum                            []float64
	cnt                            []int64
	events                         int64
	arrMeasured, transfers, probes int64
}

const (
	probeSI uint8 = iota
	probeRI
	probeIndex
)

// Probe implements share.Prober on the simulated cluster: it charges the
// probe's CPU cost on both ends and answers with the probed node's state.
func (s *lsSim) Probe(h int) bool {
	s.overhead(s.self, s.cfg.ProbeCost)
	s.overhead(h, s.cfg.ProbeCost)
	if s.now >= s.start {
		s.probes++
	}
	n := &s.nodes[h]
	switch s.probe {
	case probeSI:
		return s.si.Accepts(n.jobq.len(), 1)
	case probeRI:
		return n.waitq.len() > 0
	}
	return s.ip.Classify(1, 1, 1, n.jobq.len()+int(n.incoming)) == share.Recipient
}

// RunLoadShare runs the load-sharing model once.
func RunLoadShare(cfg LoadShareConfig) (LoadShareResult, error) {
	if err := cfg.Validate(); err != nil {
		return LoadShareResult{}, fmt.Errorf("loadshare: %w", err)
	}
	s := &lsSim{
		cfg:   cfg,
		nodes: make([]lsNode, cfg.Nodes),
		rng:   rand.New(rand.NewPCG(cfg.Seed, 0x5eed_0001)),
		si:    share.SenderInitiated{Threshold: cfg.Threshold, ProbeLimit: cfg.ProbeLimit},
		ri:    share.ReceiverInitiated{Threshold: cfg.Threshold, ReceiverThreshold: cfg.ReceiverThreshold, ProbeLimit: cfg.ProbeLimit},
		ip:    share.IndexPolicy{RecipientThreshold: cfg.IndexRecipient, EmitterThreshold: cfg.IndexEmitter, Candidates: cfg.IndexCandidates},
		rr:    cfg.Sched == RR,
		start: cfg.Warmup,
		end:   cfg.Warmup + float64(cfg.Batches)*cfg.BatchLength,
		sum:   make([]float64, cfg.Batches),
		cnt:   make([]int64, cfg.Batches),
		cands: make([]int, 0, 16),
	}
	s.index = s.indexOf
	if cfg.Policy == RIReinit {
		s.ri.Reinit = cfg.Reinit
	}
	s.q.h = make([]event, 0, 4*cfg.Nodes)
	s.jobs = make([]lsJob, 0, 64*cfg.Nodes)
	arr := Dist{Mean: cfg.ServiceMean / cfg.Util, CV: cfg.CA}.sampler()
	svc := Dist{Mean: cfg.ServiceMean, CV: cfg.CS}.sampler()
	if cfg.Policy == Index {
		s.rq = share.NewRecipientQueue(cfg.Nodes)
	}
	for i := range s.nodes {
		n := &s.nodes[i]
		n.arr, n.svc = arr, svc
		// Every node has its own workload stream, so all policies see the
		// same arrivals and service demands for a given seed.
		n.rng = rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1))
		s.q.push(event{t: n.arr.sample(n.rng), kind: lsArrival, a: int32(i)})
		if s.rq != nil {
			s.rq.Update(i, share.Neutral, share.Recipient)
		}
		if s.ri.Reinit > 0 {
			n.reinitPending = true
			s.q.push(event{t: s.rng.Float64() * s.ri.Reinit, kind: lsReinit, a: int32(i)})
		}
	}
	for s.q.len() > 0 {
		e := s.q.pop()
		if e.t >= s.end {
			break
		}
		s.now = e.t
		s.events++
		switch e.kind {
		case lsArrival:
			s.arrival(int(e.a))
		case lsSliceEnd:
			s.sliceEnd(int(e.a), e.gen)
		case lsTransfer:
			s.transferIn(int(e.a), e.b)
		case lsReinit:
			s.reinit(int(e.a))
		}
	}
	s.now = s.end
	return s.result(), nil
}

func (s *lsSim) result() LoadShareResult {
	r := LoadShareResult{Policy: s.cfg.Policy, Sched: s.cfg.Sched, Util: s.cfg.Util, CA: s.cfg.CA, CS: s.cfg.CS, Events: s.events}
	r.Batches = make([]float64, len(s.sum))
	for i := range s.sum {
		r.Jobs += s.cnt[i]
		if s.cnt[i] > 0 {
			r.Batches[i] = s.sum[i] / float64(s.cnt[i])
		} else {
			r.Batches[i] = math.NaN()
		}
	}
	r.MeanResponse, r.CI95 = BatchMeans(r.Batches)
	if s.arrMeasured > 0 {
		r.TransferRate = float64(s.transfers) / float64(s.arrMeasured)
		r.ProbesPerJob = float64(s.probes) / float64(s.arrMeasured)
	}
	var busy float64
	for i := range s.nodes {
		n := &s.nodes[i]
		busy += n.busy
		if n.running {
			busy += s.end - math.Max(n.sliceStart, s.start)
		}
	}
	r.MeasuredUtil = busy / (float64(len(s.nodes)) * (s.end - s.start))
	return r
}

// overhead charges x units of CPU time on node i with preemptive priority
// over jobs: a running slice ends x later, an idle CPU is busy x longer.
func (s *lsSim) overhead(i int, x float64) {
	if x == 0 {
		return
	}
	n := &s.nodes[i]
	if n.running {
		n.due += x
		return
	}
	b := math.Max(n.ohEnd, s.now)
	if s.now >= s.start {
		n.busy += x
	} else if b+x > s.start {
		n.busy += b + x - s.start
	}
	n.ohEnd = b + x
}

func (s *lsSim) newJob(work float64) int32 {
	j := lsJob{arrive: s.now, rem: work}
	if k := len(s.free); k > 0 {
		id := s.free[k-1]
		s.free = s.free[:k-1]
		s.jobs[id] = j
		return id
	}
	s.jobs = append(s.jobs, j)
	return int32(len(s.jobs) - 1)
}

// dispatch starts a slice on node i if it is idle and has jobs.
func (s *lsSim) dispatch(i int) {
	n := &s.nodes[i]
	if n.running || n.jobq.len() == 0 {
		return
	}
	j := &s.jobs[n.jobq.front()]
	n.slice = j.rem
	if s.rr && n.slice > s.cfg.Quantum {
		n.slice = s.cfg.Quantum
	}
	n.running = true
	n.gen++
	n.sliceStart = math.Max(n.ohEnd, s.now)
	n.due = math.Max(n.ohEnd, s.now) + n.slice
	s.q.push(event{t: n.due, kind: lsSliceEnd, a: int32(i), gen: n.gen})
}

func (s *lsSim) enqueue(i int, id int32) {
	s.nodes[i].jobq.push(id)
	s.dispatch(i)
	s.indexUpdate(i)
}

// indexUpdate re-evaluates node i's load index state and, on a change to or
// from recipient, updates the shared recipient queue and charges the
// broadcast: T_probe on the sender and on every other node.
func (s *lsSim) indexUpdate(i int) {
	if s.rq == nil {
		return
	}
	n := &s.nodes[i]
	st := s.ip.Classify(1, 1, 1, n.jobq.len())
	if st == n.state {
		return
	}
	old := n.state
	n.state = st
	if s.rq.Update(i, old, st) && s.cfg.ProbeCost > 0 {
		for h := range s.nodes {
			s.overhead(h, s.cfg.ProbeCost)
		}
	}
}

func (s *lsSim) arrival(i int) {
	n := &s.nodes[i]
	s.q.push(event{t: s.now + n.arr.sample(n.rng), kind: lsArrival, a: int32(i)})
	id := s.newJob(n.svc.sample(n.rng))
	measured := s.now >= s.start
	if measured {
		s.arrMeasured++
	}
	switch s.cfg.Policy {
	case NLS:
		s.enqueue(i, id)
	case SI:
		if !s.si.IsSender(n.jobq.len(), 1) {
			s.enqueue(i, id)
			return
		}
		s.probe, s.self = probeSI, i
		h, _ := s.si.Locate(s.rng, len(s.nodes), i, s)
		if h < 0 {
			s.enqueue(i, id)
			return
		}
		s.send(i, h, id)
	case RI, RIReinit:
		if s.ri.Admits(n.jobq.len(), 1) {
			s.enqueue(i, id)
		} else {
			n.waitq.push(id)
		}
	case Index:
		if n.state != share.Emitter {
			s.enqueue(i, id)
			return
		}
		s.cands = s.rq.Sample(s.rng, s.ip.Candidates, i, s.cands[:0])
		if len(s.cands) == 0 { // globally overloaded: balancing is off
			s.enqueue(i, id)
			return
		}
		// Ask each candidate for its current index, sort, and send to the
		// first that still accepts.
		s.probe, s.self = probeIndex, i
		for _, h := range s.cands {
			s.overhead(i, s.cfg.ProbeCost)
			s.overhead(h, s.cfg.ProbeCost)
			if measured {
				s.probes++
			}
		}
		share.SortByIndex(s.cands, s.index)
		for _, h := range s.cands {
			hn := &s.nodes[h]
			if s.ip.Classify(1, 1, 1, hn.jobq.len()+int(hn.incoming)) == share.Recipient {
				s.send(i, h, id)
				return
			}
		}
		s.enqueue(i, id)
	}
}

func (s *lsSim) indexOf(h int) float64 {
	n := &s.nodes[h]
	return share.LoadIndex(1, 1, 1, n.jobq.len()+int(n.incoming))
}

// send moves job id from node from to node to: T_jx on the sender now, the
// network time, then T_jx on the receiver when it arrives.
func (s *lsSim) send(from, to int, id int32) {
	s.overhead(from, s.cfg.TransferCost)
	s.nodes[to].incoming++
	if s.now >= s.start {
		s.transfers++
	}
	d := s.cfg.TransferMin + (s.cfg.TransferMax-s.cfg.TransferMin)*s.rng.Float64()
	s.q.push(event{t: s.now + d, kind: lsTransfer, a: int32(to), b: id})
}

func (s *lsSim) transferIn(i int, id int32) {
	s.nodes[i].incoming--
	s.overhead(i, s.cfg.TransferCost)
	s.enqueue(i, id)
}

func (s *lsSim) sliceEnd(i int, gen uint32) {
	n := &s.nodes[i]
	if gen != n.gen || !n.running {
		return
	}
	if s.now < n.due { // overheads arrived during the slice: it ends later
		s.q.push(event{t: n.due, kind: lsSliceEnd, a: int32(i), gen: gen})
		return
	}
	n.running = false
	n.ohEnd = s.now
	if s.now > s.start {
		n.busy += s.now - math.Max(n.sliceStart, s.start)
	}
	id := n.jobq.front()
	j := &s.jobs[id]
	j.rem -= n.slice
	if j.rem > 1e-12 {
		// Round robin: the quantum expired. Preempt only if another job waits.
		if n.jobq.len() > 1 {
			n.jobq.pop()
			n.jobq.push(id)
			s.overhead(i, s.cfg.ContextSwitch)
		}
		s.dispatch(i)
		return
	}
	n.jobq.pop()
	s.complete(j)
	s.free = append(s.free, id)
	switch s.cfg.Policy {
	case RI, RIReinit:
		if n.waitq.len() > 0 {
			n.jobq.push(n.waitq.pop())
		}
		s.dispatch(i)
		if n.waitq.len() == 0 && s.ri.IsReceiver(n.jobq.len()+int(n.incoming), 1) {
			s.pull(i)
		}
	default:
		s.dispatch(i)
		s.indexUpdate(i)
	}
}

func (s *lsSim) complete(j *lsJob) {
	if s.now < s.start {
		return
	}
	b := int((s.now - s.start) / s.cfg.BatchLength)
	if b >= len(s.sum) {
		b = len(s.sum) - 1
	}
	s.sum[b] += s.now - j.arrive
	s.cnt[b]++
}

// pull is the receiver-initiated location policy at node i.
func (s *lsSim) pull(i int) {
	s.probe, s.self = probeRI, i
	d, _ := s.ri.Pull(s.rng, len(s.nodes), i, s)
	if d >= 0 {
		s.send(d, i, s.nodes[d].waitq.pop())
		return
	}
	n := &s.nodes[i]
	if s.ri.Reinit > 0 && !n.reinitPending {
		n.reinitPending = true
		s.q.push(event{t: s.now + s.ri.Reinit, kind: lsReinit, a: int32(i)})
	}
}

func (s *lsSim) reinit(i int) {
	n := &s.nodes[i]
	n.reinitPending = false
	if n.waitq.len() == 0 && s.ri.IsReceiver(n.jobq.len()+int(n.incoming), 1) {
		s.pull(i)
	}
}
