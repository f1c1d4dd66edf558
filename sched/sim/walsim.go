package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/dpvm/dpvm/sched/share"
)

// WALPolicy names a policy of the WAL experiment: a load-balancing rule
// (none, CPU only, I/O only, weighted average) with or without the
// feedback controller.
type WALPolicy string

// The policies of the WAL experiment (Qin et al. §3).
const (
	NLB   WALPolicy = "nlb"    // no load balancing, static buffer
	NLBFC WALPolicy = "nlb-fc" // no load balancing, buffer feedback control
	CPU   WALPolicy = "cpu"    // balance on CPU load only (W_IO = 0)
	IO    WALPolicy = "io"     // balance on I/O load only (W_IO = 1)
	IOFC  WALPolicy = "io-fc"  // I/O-based with buffer feedback control
	WALP  WALPolicy = "wal"    // weighted average load, static weights and buffer
	WALFC WALPolicy = "wal-fc" // WAL with weights and buffer under feedback control
)

// WALPolicies lists every policy of the experiment.
var WALPolicies = []WALPolicy{NLB, NLBFC, CPU, IO, IOFC, WALP, WALFC}

// ParseWALPolicy accepts a policy name, case-insensitively.
func ParseWALPolicy(s string) (WALPolicy, error) {
	for _, p := range WALPolicies {
		if strings.EqualFold(s, string(p)) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: unknown WAL policy %q (known: nlb, nlb-fc, cpu, io, io-fc, wal, wal-fc)", ErrBadConfig, s)
}

func (p WALPolicy) balances() bool { return p != NLB && p != NLBFC }
func (p WALPolicy) bufferFC() bool { return p == NLBFC || p == IOFC || p == WALFC }
func (p WALPolicy) weightFC() bool { return p == WALFC }

// wio is the I/O weight the policy balances with (the initial one for
// wal-fc).
func (p WALPolicy) wio(cfg WALConfig) float64 {
	switch p {
	case CPU:
		return 0
	case IO, IOFC:
		return 1
	}
	return cfg.WIO
}

// WALConfig describes the memory- and I/O-intensive cluster of the WAL
// experiment. Jobs arrive at every node as a Poisson stream; each has a
// CPU demand, a memory demand, an explicit I/O rate (accesses per second of
// CPU progress), a data footprint and a re-access rate. A node's memory is
// split between the jobs and an I/O buffer; when the jobs' memory exceeds
// what is left, each faults at PageFaultRate times the overflow share. A
// buffer access hits with probability r/(r+1)·min(1, buffer share/data)
// (the paper's eq. 4). The CPU and the disk are shared: a job's time per
// second of CPU work is its CPU time plus its disk time, each stretched by
// the other jobs' expected presence at that resource.
type WALConfig struct {
	Policy WALPolicy
	Nodes  int
	// MemoryMB is each node's RAM; Buffer the initial buffer share of it.
	MemoryMB float64
	Buffer   float64
	// DiskAccess is the disk time of one explicit access (seek and rotation
	// plus transfer) and PageFault of one page fault, in seconds.
	DiskAccess, PageFault float64
	// PageFaultRate is the page faults per second of CPU work of a job on
	// a node whose memory is entirely over-committed.
	PageFaultRate float64
	// IORate is the mean explicit I/O accesses per second of CPU work
	// (uniform in [0, 2·IORate]).
	IORate float64
	// ArrivalRate is jobs per second per node; CPU holds the CPU demand's
	// mean and CV.
	ArrivalRate float64
	CPU         Dist
	// MemLow..MemHigh bound the uniform memory demand in MB; DataLow..
	// DataHigh the data footprint; ReaccessLow..ReaccessHigh the re-access
	// rate r.
	MemLow, MemHigh           float64
	DataLow, DataHigh         float64
	ReaccessLow, ReaccessHigh float64
	// NetworkMBps is the bandwidth used to move a job's memory image.
	NetworkMBps float64
	// Overload is the WAL load above which a node sends new jobs away.
	Overload float64
	// WIO is the I/O weight of wal (and wal-fc's starting weight).
	WIO float64
	// Controller configures WAL-FC's controller (one per node).
	Controller share.ControllerConfig
	// Jobs is how many jobs are simulated; the first Warmup are not counted.
	Jobs, Warmup int
	Seed         uint64
}

// DefaultWAL returns a six-node cluster after Qin et al.'s Figure 2: 640 MB
// of RAM with a 160 MB buffer, 8.0 ms seek and rotation plus 250 KB at
// 40 MB/s per access, 8.1 ms per page fault, a 1 Gb/s network; CPU demands
// with mean 20 s and CV 2, memory demands of 100–400 MB, I/O at 15 accesses
// per CPU second on average, 0.028 jobs per second per node, and W_IO 0.5.
func DefaultWAL() WALConfig {
	return WALConfig{
		Policy: WALP, Nodes: 6, MemoryMB: 640, Buffer: 0.25,
		DiskAccess: 0.008 + 0.25/40, PageFault: 0.0081, PageFaultRate: 60, IORate: 15,
		ArrivalRate: 0.028, CPU: Dist{Mean: 20, CV: 2},
		MemLow: 100, MemHigh: 400, DataLow: 20, DataHigh: 300, ReaccessLow: 1, ReaccessHigh: 4,
		NetworkMBps: 125, Overload: 2, WIO: 0.5,
		Jobs: 20000, Warmup: 2000, Seed: 1,
	}
}

// Validate reports an invalid configuration.
func (c WALConfig) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrBadConfig}, a...)...) }
	if _, err := ParseWALPolicy(string(c.Policy)); err != nil {
		return err
	}
	pos := func(v float64) bool { return v > 0 && !math.IsInf(v, 0) }
	nonneg := func(v float64) bool { return v >= 0 && !math.IsInf(v, 0) }
	switch {
	case c.Nodes < 2 || c.Nodes > 4096:
		return bad("nodes %d (2..4096)", c.Nodes)
	case !pos(c.MemoryMB) || !(c.Buffer >= 0 && c.Buffer < 1):
		return bad("memory %g MB (> 0), buffer share %g (0 ≤ b < 1)", c.MemoryMB, c.Buffer)
	case !nonneg(c.DiskAccess) || !nonneg(c.PageFault) || !nonneg(c.PageFaultRate) || !nonneg(c.IORate):
		return bad("disk access %g, page fault %g, page fault rate %g, I/O rate %g (all ≥ 0)", c.DiskAccess, c.PageFault, c.PageFaultRate, c.IORate)
	case !pos(c.ArrivalRate):
		return bad("arrival rate %g (> 0)", c.ArrivalRate)
	case !(c.MemLow >= 0 && c.MemHigh >= c.MemLow) || !(c.DataLow > 0 && c.DataHigh >= c.DataLow) || !(c.ReaccessLow >= 0 && c.ReaccessHigh >= c.ReaccessLow):
		return bad("ranges memory [%g, %g], data [%g, %g], re-access [%g, %g]", c.MemLow, c.MemHigh, c.DataLow, c.DataHigh, c.ReaccessLow, c.ReaccessHigh)
	case !pos(c.NetworkMBps) || !nonneg(c.Overload) || !(c.WIO >= 0 && c.WIO <= 1):
		return bad("network %g MB/s (> 0), overload %g (≥ 0), W_IO %g (0..1)", c.NetworkMBps, c.Overload, c.WIO)
	case c.Jobs < 1 || c.Jobs > 10_000_000 || c.Warmup < 0 || c.Warmup >= c.Jobs:
		return bad("jobs %d (1..10^7), warm-up %d (0 ≤ w < jobs)", c.Jobs, c.Warmup)
	}
	if err := c.CPU.Validate(); err != nil {
		return fmt.Errorf("cpu demand: %w", err)
	}
	cc := c.Controller
	if cc.Buffer == 0 {
		cc.Buffer = c.Buffer
	}
	if cc.WIO == 0 {
		cc.WIO = c.WIO
	}
	if err := cc.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	return nil
}

// WALResult is the outcome of one run.
type WALResult struct {
	Policy WALPolicy `json:"policy"`
	// PageFaultRate echoes the configuration, the usual x axis.
	PageFaultRate float64 `json:"page_fault_rate"`
	// MeanSlowdown is the mean over counted jobs of wall time divided by
	// CPU plus I/O time alone on a node with the initial buffer.
	MeanSlowdown float64 `json:"mean_slowdown"`
	// CI95 is the 95% half-width from 10 batches of counted jobs.
	CI95 float64 `json:"ci95"`
	// Migrations is the fraction of counted jobs moved at submission.
	Migrations float64 `json:"migrations"`
	// HitRate is the mean buffer hit probability of explicit accesses.
	HitRate float64 `json:"hit_rate"`
	// WIO and Buffer are the nodes' mean final I/O weight and buffer share.
	WIO    float64 `json:"w_io"`
	Buffer float64 `json:"buffer"`
}

type walJob struct {
	cpu, mem, io, data, r float64
	rem                   float64 // remaining CPU work
	arrive, ideal         float64
	migrated              bool
	q, h                  float64 // disk seconds per CPU second, hit rate (cached)
}

type walNode struct {
	jobs  []*walJob
	last  float64
	gen   uint32
	buf   float64 // buffer share
	ctl   *share.Controller
	rng   *rand.Rand
	xrate []float64
}

type walSim struct {
	cfg     WALConfig
	q       eventQueue
	now     float64
	nodes   []walNode
	cpu     sampler
	done    int
	counted []float64
	moves   int
	hitSum  float64
	hitN    int
	wal     share.WAL
}

const (
	walArrive uint8 = iota
	walDone
	walLand
)

// RunWAL runs the WAL experiment once.
func RunWAL(cfg WALConfig) (WALResult, error) {
	if err := cfg.Validate(); err != nil {
		return WALResult{}, fmt.Errorf("wal: %w", err)
	}
	s := &walSim{cfg: cfg, nodes: make([]walNode, cfg.Nodes), cpu: cfg.CPU.sampler(),
		wal: share.WAL{WIO: cfg.Policy.wio(cfg), Overload: cfg.Overload}}
	cc := cfg.Controller
	if cc.Buffer == 0 {
		cc.Buffer = cfg.Buffer
	}
	if cc.WIO == 0 {
		cc.WIO = cfg.WIO
	}
	for i := range s.nodes {
		n := &s.nodes[i]
		n.buf = cfg.Buffer
		n.rng = rand.New(rand.NewPCG(cfg.Seed, uint64(i)+100))
		if cfg.Policy.bufferFC() {
			ctl, err := share.NewController(cc)
			if err != nil {
				return WALResult{}, fmt.Errorf("wal: %w", err)
			}
			n.ctl = ctl
		}
		s.q.push(event{t: n.rng.ExpFloat64() / cfg.ArrivalRate, kind: walArrive, a: int32(i)})
	}
	pending := map[int32]*walJob{}
	var nextID int32
	for s.q.len() > 0 && s.done < cfg.Jobs {
		e := s.q.pop()
		s.now = e.t
		switch e.kind {
		case walArrive:
			i := int(e.a)
			n := &s.nodes[i]
			s.q.push(event{t: s.now + n.rng.ExpFloat64()/cfg.ArrivalRate, kind: walArrive, a: e.a})
			j := s.newJob(n.rng)
			dst := s.place(i, j)
			if dst == i {
				s.add(i, j)
				continue
			}
			j.migrated = true
			pending[nextID] = j
			s.q.push(event{t: s.now + j.mem/cfg.NetworkMBps, kind: walLand, a: int32(dst), b: nextID})
			nextID++
		case walLand:
			j := pending[e.b]
			delete(pending, e.b)
			s.add(int(e.a), j)
		case walDone:
			s.complete(int(e.a), e.gen)
		}
	}
	res := WALResult{Policy: cfg.Policy, PageFaultRate: cfg.PageFaultRate}
	const batches = 10
	if k := len(s.counted) / batches; k > 0 {
		bm := make([]float64, batches)
		for b := 0; b < batches; b++ {
			for _, v := range s.counted[b*k : (b+1)*k] {
				bm[b] += v / float64(k)
			}
		}
		_, res.CI95 = BatchMeans(bm)
	}
	for _, v := range s.counted {
		res.MeanSlowdown += v / float64(len(s.counted))
	}
	if len(s.counted) > 0 {
		res.Migrations = float64(s.moves) / float64(len(s.counted))
	}
	if s.hitN > 0 {
		res.HitRate = s.hitSum / float64(s.hitN)
	}
	for i := range s.nodes {
		n := &s.nodes[i]
		res.Buffer += n.buf
		w := s.wal.WIO
		if cfg.Policy.weightFC() {
			w = n.ctl.WIO()
		}
		res.WIO += w
	}
	res.Buffer /= float64(len(s.nodes))
	res.WIO /= float64(len(s.nodes))
	return res, nil
}

func uniform(r *rand.Rand, lo, hi float64) float64 { return lo + (hi-lo)*r.Float64() }

func (s *walSim) newJob(r *rand.Rand) *walJob {
	c := s.cfg
	j := &walJob{
		cpu:    s.cpu.sample(r),
		mem:    uniform(r, c.MemLow, c.MemHigh),
		io:     uniform(r, 0, 2*c.IORate),
		data:   uniform(r, c.DataLow, c.DataHigh),
		r:      uniform(r, c.ReaccessLow, c.ReaccessHigh),
		arrive: s.now,
	}
	j.rem = j.cpu
	// Alone on a node with the initial buffer: no page faults if it fits.
	bufMB := c.Buffer * c.MemoryMB
	q := j.io * (1 - hitRate(j, bufMB)) * c.DiskAccess
	if over := j.mem - (c.MemoryMB - bufMB); over > 0 {
		q += c.PageFaultRate * over / j.mem * c.PageFault
	}
	j.ideal = j.cpu * (1 + q)
	return j
}

// hitRate is eq. 4: r/(r+1) if the job's buffer share holds its data, scaled
// down by the share otherwise.
func hitRate(j *walJob, bufMB float64) float64 {
	h := j.r / (j.r + 1)
	if bufMB < j.data {
		h *= bufMB / j.data
	}
	return h
}

// refresh recomputes the hit rates and disk demands of node i's jobs: the
// buffer is shared in proportion to the jobs' I/O rates; memory beyond what
// the buffer leaves causes page faults in proportion to the overflow.
func (s *walSim) refresh(i int) {
	n := &s.nodes[i]
	c := s.cfg
	bufMB := n.buf * c.MemoryMB
	var ioSum, memSum float64
	for _, j := range n.jobs {
		ioSum += j.io
		memSum += j.mem
	}
	pf := 0.0
	if over := memSum - (c.MemoryMB - bufMB); over > 0 && memSum > 0 {
		pf = c.PageFaultRate * over / memSum
	}
	for _, j := range n.jobs {
		share := 0.0
		if ioSum > 0 {
			share = bufMB * j.io / ioSum
		}
		j.h = hitRate(j, share)
		j.q = j.io*(1-j.h)*c.DiskAccess + pf*c.PageFault
	}
}

// loads returns node i's CPU load (jobs) and I/O load (disk seconds
// demanded per second, the sum of the jobs' explicit and page-fault load).
func (s *walSim) loads(i int) (float64, float64) {
	n := &s.nodes[i]
	io := 0.0
	for _, j := range n.jobs {
		io += j.q
	}
	return float64(len(n.jobs)), io
}

func (s *walSim) place(i int, j *walJob) int {
	if !s.cfg.Policy.balances() {
		return i
	}
	w := s.wal
	if s.cfg.Policy.weightFC() {
		w.WIO = s.nodes[i].ctl.WIO()
	}
	d := share.Demand{CPU: 1, IO: j.ideal/j.cpu - 1}
	return w.Choose(len(s.nodes), i, d, s.loads)
}

// rates sets each job's progress rate (CPU seconds per second): its time
// per CPU second is its CPU time stretched by the others' expected CPU
// presence plus its disk time stretched by their expected disk presence.
func (s *walSim) rates(i int) {
	n := &s.nodes[i]
	var cpuP, diskP float64
	for _, j := range n.jobs {
		cpuP += 1 / (1 + j.q)
		diskP += j.q / (1 + j.q)
	}
	n.xrate = n.xrate[:0]
	for _, j := range n.jobs {
		oc := cpuP - 1/(1+j.q)
		od := diskP - j.q/(1+j.q)
		n.xrate = append(n.xrate, 1/((1+oc)+j.q*(1+od)))
	}
}

func (s *walSim) advance(i int) {
	n := &s.nodes[i]
	if dt := s.now - n.last; dt > 0 {
		for k, j := range n.jobs {
			j.rem -= n.xrate[k] * dt
		}
	}
	n.last = s.now
}

func (s *walSim) reschedule(i int) {
	n := &s.nodes[i]
	s.refresh(i)
	s.rates(i)
	n.gen++
	next := math.Inf(1)
	for k, j := range n.jobs {
		next = math.Min(next, math.Max(0, j.rem)/n.xrate[k])
	}
	if !math.IsInf(next, 1) {
		s.q.push(event{t: s.now + next, kind: walDone, a: int32(i), gen: n.gen})
	}
}

func (s *walSim) add(i int, j *walJob) {
	s.advance(i)
	n := &s.nodes[i]
	n.jobs = append(n.jobs, j)
	s.reschedule(i)
}

func (s *walSim) complete(i int, gen uint32) {
	n := &s.nodes[i]
	if gen != n.gen {
		return
	}
	s.advance(i)
	k := 0
	for _, j := range n.jobs {
		if j.rem > 1e-9 {
			n.jobs[k] = j
			k++
			continue
		}
		s.done++
		sd := (s.now - j.arrive) / j.ideal
		if s.done > s.cfg.Warmup {
			s.counted = append(s.counted, sd)
			if j.migrated {
				s.moves++
			}
			s.hitSum += j.h
			s.hitN++
		}
		if n.ctl != nil {
			_, n.buf = n.ctl.Observe(sd)
		}
	}
	for x := k; x < len(n.jobs); x++ {
		n.jobs[x] = nil
	}
	n.jobs = n.jobs[:k]
	s.reschedule(i)
}
