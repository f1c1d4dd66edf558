package share

import (
	"fmt"
	"math/rand/v2"
)

// ReceiverInitiated is threshold-based receiver-initiated load sharing: a new
// task joins the job queue while the host runs fewer than Threshold tasks per
// core and otherwise waits in the host's waiting queue; a host whose job
// queue drops below ReceiverThreshold per core (idle, with the default
// T_R = 1) probes up to ProbeLimit random hosts for one with waiting tasks
// and pulls one. With Reinit > 0 a receiver whose probes all failed probes
// again every Reinit time units while it stays a receiver (Dandamudi,
// TR-97-12, §2 and Observation 2).
type ReceiverInitiated struct {
	// Threshold is T (= T_M): the job queue length per core above which new
	// tasks wait in the waiting queue.
	Threshold int
	// ReceiverThreshold is T_R: a host whose job queue is shorter (per core)
	// looks for work.
	ReceiverThreshold int
	// ProbeLimit is P_l, the most hosts probed per attempt.
	ProbeLimit int
	// Reinit is the reinitiation period δ; 0 disables reinitiation.
	Reinit float64
}

// DefaultReceiverInitiated returns the paper's defaults: T = 2, T_R = 1,
// P_l = 3, no reinitiation.
func DefaultReceiverInitiated() ReceiverInitiated {
	return ReceiverInitiated{Threshold: 2, ReceiverThreshold: 1, ProbeLimit: 3}
}

// Validate reports an out-of-range parameter.
func (p ReceiverInitiated) Validate() error {
	if p.Threshold < 1 || p.ReceiverThreshold < 1 || p.ProbeLimit < 0 || !(p.Reinit >= 0) {
		return fmt.Errorf("%w: receiver-initiated threshold %d (≥ 1), receiver threshold %d (≥ 1), probe limit %d (≥ 0), reinit %g (≥ 0)",
			ErrBadParam, p.Threshold, p.ReceiverThreshold, p.ProbeLimit, p.Reinit)
	}
	return nil
}

// Name returns "ri".
func (ReceiverInitiated) Name() string { return "ri" }

// Admits reports whether a new task on a host with queueLen tasks on cores
// cores joins the job queue (true) or the waiting queue (false).
func (p ReceiverInitiated) Admits(queueLen, cores int) bool {
	return queueLen < p.Threshold*cores
}

// IsReceiver reports whether a host with queueLen tasks on cores cores
// should look for work.
func (p ReceiverInitiated) IsReceiver(queueLen, cores int) bool {
	return queueLen < p.ReceiverThreshold*cores
}

// Pull runs the location policy for a receiver among n hosts: it probes up
// to ProbeLimit random hosts other than self through pr (which accepts a
// host with a non-empty waiting queue) and returns the donor (or -1) and the
// number of probes.
func (p ReceiverInitiated) Pull(rng *rand.Rand, n, self int, pr Prober) (donor, probes int) {
	return ProbeRandom(rng, n, self, p.ProbeLimit, pr)
}

type riSnapshot struct{ hosts []Host }

func (s *riSnapshot) Probe(h int) bool { return s.hosts[h].Waiting > 0 }

// PullFrom is Pull on a snapshot: the donor a receiver at hosts[receiver]
// would find, or -1.
func (p ReceiverInitiated) PullFrom(receiver int, hosts []Host, rng *rand.Rand) (donor, probes int, err error) {
	if err := p.Validate(); err != nil {
		return -1, 0, fmt.Errorf("ri: %w", err)
	}
	if err := validate(receiver, hosts); err != nil {
		return -1, 0, fmt.Errorf("ri: %w", err)
	}
	donor, probes = p.Pull(rng, len(hosts), receiver, &riSnapshot{hosts: hosts})
	return donor, probes, nil
}

// Place implements Placer. A task whose origin is below the threshold runs
// there. Otherwise it waits at the origin for a receiver to pull it; a
// placer that sees the whole cluster knows which hosts are receivers now, so
// when there are any the task goes straight to one of them chosen at random
// (the one whose probe would have reached the origin first), and Hold is set
// only when no host is a receiver.
func (p ReceiverInitiated) Place(origin int, hosts []Host, rng *rand.Rand) (Decision, error) {
	if err := p.Validate(); err != nil {
		return Decision{}, fmt.Errorf("ri: %w", err)
	}
	if err := validate(origin, hosts); err != nil {
		return Decision{}, fmt.Errorf("ri: %w", err)
	}
	o := hosts[origin]
	if p.Admits(o.Tasks, o.Cores) {
		return Decision{Host: origin}, nil
	}
	receivers := 0
	for i := range hosts {
		if i != origin && p.IsReceiver(hosts[i].Tasks, hosts[i].Cores) {
			receivers++
		}
	}
	if receivers == 0 {
		return Decision{Host: origin, Hold: true}, nil
	}
	k := rng.IntN(receivers)
	for i := range hosts {
		if i != origin && p.IsReceiver(hosts[i].Tasks, hosts[i].Cores) {
			if k == 0 {
				return Decision{Host: i, Probes: 1}, nil
			}
			k--
		}
	}
	panic("unreachable")
}
