package share

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Sentinel errors callers can test with errors.Is.
var (
	// ErrNoHosts is returned when a snapshot holds no hosts.
	ErrNoHosts = errors.New("share: no hosts")
	// ErrBadOrigin is returned when the origin index is outside the snapshot.
	ErrBadOrigin = errors.New("share: origin out of range")
	// ErrBadHost is returned for a host with an invalid speed, core count or load.
	ErrBadHost = errors.New("share: invalid host")
	// ErrBadParam is returned for an out-of-range policy parameter.
	ErrBadParam = errors.New("share: invalid parameter")
	// ErrUnknownPolicy is returned by New for a name it does not know.
	ErrUnknownPolicy = errors.New("share: unknown policy")
)

// Host is what a placement policy knows about one host.
type Host struct {
	// Name identifies the host in reports; policies do not interpret it.
	Name string
	// Speed is the host's computational power P_i (any unit, > 0), for
	// example a calibrated operations-per-second figure or 1/α.
	Speed float64
	// Cores is the number of processor cores (≥ 1).
	Cores int
	// Tasks is the number of tasks the host runs (its job queue length).
	Tasks int
	// Waiting is the number of tasks held in the host's waiting queue,
	// eligible for transfer (receiver-initiated sharing pulls from it).
	Waiting int
	// LoadIO is the host's I/O load (explicit plus implicit page-fault load,
	// in accesses per unit time), used by WAL.
	LoadIO float64
}

// Decision is where a new task goes.
type Decision struct {
	// Host is the index in the snapshot of the host that should run the task.
	Host int
	// Hold reports that the task should wait in the origin's waiting queue
	// (Host is then the origin) until a receiver pulls it or the cluster's
	// state changes; a runtime without waiting queues starts it on Host.
	Hold bool
	// Probes is how many remote hosts the decision consulted, the message
	// cost a distributed implementation would pay.
	Probes int
}

// Placer picks a host for a new task submitted at origin. Implementations
// are pure: the same snapshot and random state give the same decision.
type Placer interface {
	// Name is the policy's short name as accepted by New.
	Name() string
	// Place decides where a new task submitted on hosts[origin] runs.
	Place(origin int, hosts []Host, rng *rand.Rand) (Decision, error)
}

// Names lists the policy names New accepts.
func Names() []string {
	return []string{"local", "roundrobin", "si", "ri", "index", "wal"}
}

// New returns the placer called name with the papers' default parameters:
// "local" (no load sharing), "roundrobin", "si", "ri", "index" or "wal".
func New(name string) (Placer, error) {
	switch strings.ToLower(name) {
	case "local", "nls", "none":
		return Local{}, nil
	case "roundrobin", "rr":
		return &RoundRobin{}, nil
	case "si", "sender":
		return DefaultSenderInitiated(), nil
	case "ri", "receiver":
		return DefaultReceiverInitiated(), nil
	case "index":
		return DefaultIndexPolicy(), nil
	case "wal":
		return DefaultWAL(), nil
	}
	return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownPolicy, name, strings.Join(Names(), ", "))
}

// validate checks a snapshot and an origin index.
func validate(origin int, hosts []Host) error {
	if len(hosts) == 0 {
		return ErrNoHosts
	}
	if origin < 0 || origin >= len(hosts) {
		return fmt.Errorf("%w: %d of %d hosts", ErrBadOrigin, origin, len(hosts))
	}
	for i := range hosts {
		h := &hosts[i]
		if !(h.Speed > 0) || h.Cores < 1 || h.Tasks < 0 || h.Waiting < 0 || h.LoadIO < 0 {
			return fmt.Errorf("%w: host %d %q (speed %g, cores %d, tasks %d, waiting %d, io %g)",
				ErrBadHost, i, h.Name, h.Speed, h.Cores, h.Tasks, h.Waiting, h.LoadIO)
		}
	}
	return nil
}

// Local is no load sharing: every task runs on the host it was submitted to.
type Local struct{}

// Name returns "local".
func (Local) Name() string { return "local" }

// Place returns the origin.
func (Local) Place(origin int, hosts []Host, _ *rand.Rand) (Decision, error) {
	if err := validate(origin, hosts); err != nil {
		return Decision{}, fmt.Errorf("local: %w", err)
	}
	return Decision{Host: origin}, nil
}

// RoundRobin assigns tasks to hosts cyclically, whatever their load: the
// static policy of Shivaratri et al. It keeps a cursor, so use one value per
// placement stream and do not share it between goroutines.
type RoundRobin struct {
	next int
}

// Name returns "roundrobin".
func (*RoundRobin) Name() string { return "roundrobin" }

// Place returns the next host in cyclic order.
func (r *RoundRobin) Place(origin int, hosts []Host, _ *rand.Rand) (Decision, error) {
	if err := validate(origin, hosts); err != nil {
		return Decision{}, fmt.Errorf("roundrobin: %w", err)
	}
	h := r.next % len(hosts)
	r.next = h + 1
	return Decision{Host: h}, nil
}

// Prober answers a probe of one host: whether it accepts what the probing
// policy asks (a task for sender-initiated sharing, a request for a waiting
// task for receiver-initiated sharing). The simulator implements it on its
// own state; placers implement it on a snapshot.
type Prober interface {
	Probe(host int) bool
}

// ProbeRandom probes up to limit distinct hosts chosen uniformly at random
// among the n hosts other than self, stopping at the first that accepts. It
// returns that host (or -1) and the number of probes sent. It allocates
// nothing for limit ≤ 16.
func ProbeRandom(rng *rand.Rand, n, self, limit int, p Prober) (host, probes int) {
	others := n - 1
	if self < 0 || self >= n {
		others = n
		self = -1
	}
	if limit > others {
		limit = others
	}
	var seenBuf [16]int
	seen := seenBuf[:0]
	for probes < limit {
		h := rng.IntN(others)
		if self >= 0 && h >= self {
			h++
		}
		dup := false
		for _, s := range seen {
			if s == h {
				dup = true
				break
			}
		}
		if dup {
			continue
		}
		seen = append(seen, h)
		probes++
		if p.Probe(h) {
			return h, probes
		}
	}
	return -1, probes
}
