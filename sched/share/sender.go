package share

import (
	"fmt"
	"math/rand/v2"
)

// SenderInitiated is threshold-based sender-initiated load sharing: a new
// task stays local while the host runs fewer than Threshold tasks per core;
// otherwise up to ProbeLimit random hosts are probed and the task goes to the
// first one running fewer than Threshold tasks per core, or stays local when
// every probe fails (Dandamudi, TR-97-12, §2).
type SenderInitiated struct {
	// Threshold is T (= T_S = T_M): the job queue length per core at which a
	// host becomes a sender and below which it accepts remote tasks.
	Threshold int
	// ProbeLimit is P_l, the most hosts probed for one task.
	ProbeLimit int
}

// DefaultSenderInitiated returns the paper's defaults: T = 2, P_l = 3.
func DefaultSenderInitiated() SenderInitiated {
	return SenderInitiated{Threshold: 2, ProbeLimit: 3}
}

// Validate reports an out-of-range parameter.
func (p SenderInitiated) Validate() error {
	if p.Threshold < 1 || p.ProbeLimit < 0 {
		return fmt.Errorf("%w: sender-initiated threshold %d (≥ 1), probe limit %d (≥ 0)", ErrBadParam, p.Threshold, p.ProbeLimit)
	}
	return nil
}

// Name returns "si".
func (SenderInitiated) Name() string { return "si" }

// IsSender reports whether a host with queueLen tasks on cores cores must
// try to send a new task away.
func (p SenderInitiated) IsSender(queueLen, cores int) bool {
	return queueLen >= p.Threshold*cores
}

// Accepts reports whether a probed host with queueLen tasks on cores cores
// accepts a remote task.
func (p SenderInitiated) Accepts(queueLen, cores int) bool {
	return queueLen < p.Threshold*cores
}

// Locate runs the location policy for a sender among n hosts: it probes up
// to ProbeLimit random hosts other than self through pr and returns the
// first that accepts (or -1) and the number of probes.
func (p SenderInitiated) Locate(rng *rand.Rand, n, self int, pr Prober) (host, probes int) {
	return ProbeRandom(rng, n, self, p.ProbeLimit, pr)
}

type siSnapshot struct {
	p     SenderInitiated
	hosts []Host
}

func (s *siSnapshot) Probe(h int) bool {
	return s.p.Accepts(s.hosts[h].Tasks, s.hosts[h].Cores)
}

// Place implements Placer.
func (p SenderInitiated) Place(origin int, hosts []Host, rng *rand.Rand) (Decision, error) {
	if err := p.Validate(); err != nil {
		return Decision{}, fmt.Errorf("si: %w", err)
	}
	if err := validate(origin, hosts); err != nil {
		return Decision{}, fmt.Errorf("si: %w", err)
	}
	o := hosts[origin]
	if !p.IsSender(o.Tasks, o.Cores) {
		return Decision{Host: origin}, nil
	}
	h, probes := p.Locate(rng, len(hosts), origin, &siSnapshot{p: p, hosts: hosts})
	if h < 0 {
		return Decision{Host: origin, Probes: probes}, nil
	}
	return Decision{Host: h, Probes: probes}, nil
}
