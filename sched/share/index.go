package share

import (
	"fmt"
	"math/rand/v2"
)

// State is a host's state under the load acceptance index policy.
type State uint8

// The states of the load acceptance index policy, from most to least
// available. The zero value is Recipient.
const (
	// Recipient hosts accept local and remote tasks.
	Recipient State = iota
	// Neutral hosts accept local tasks and refuse remote requests.
	Neutral
	// Emitter hosts accept no more tasks: a new task starts a balancing
	// operation.
	Emitter
)

// String returns the state's name.
func (s State) String() string {
	switch s {
	case Recipient:
		return "recipient"
	case Neutral:
		return "neutral"
	case Emitter:
		return "emitter"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// LoadIndex is the load acceptance index of Bosque et al.,
// (P_i/P_max)·(cores/(tasks+1)): how available a host is for one more task,
// relative to the most powerful host. Higher is more available.
func LoadIndex(speed, pmax float64, cores, tasks int) float64 {
	return speed / pmax * float64(cores) / float64(tasks+1)
}

// IndexPolicy is the heterogeneous load acceptance index policy: an
// emitter-initiated, non-preemptive policy that sends new tasks from
// emitters to recipients chosen among a few random members of the recipient
// queue, sorted by their current index.
type IndexPolicy struct {
	// RecipientThreshold: a host whose index is above it (or that has a free
	// core) is a recipient. Default 0.7.
	RecipientThreshold float64
	// EmitterThreshold: a host whose index is below it is an emitter.
	// Default 0.4.
	EmitterThreshold float64
	// Candidates is how many random recipients are asked for their current
	// index in partner localisation. Default 3.
	Candidates int
}

// DefaultIndexPolicy returns the paper's parameters: thresholds 0.7 and 0.4,
// three candidates.
func DefaultIndexPolicy() IndexPolicy {
	return IndexPolicy{RecipientThreshold: 0.7, EmitterThreshold: 0.4, Candidates: 3}
}

// Validate reports an out-of-range parameter.
func (p IndexPolicy) Validate() error {
	if !(p.EmitterThreshold > 0) || !(p.RecipientThreshold >= p.EmitterThreshold) || p.RecipientThreshold > 1 || p.Candidates < 1 || p.Candidates > 16 {
		return fmt.Errorf("%w: index thresholds recipient %g, emitter %g (0 < emitter ≤ recipient ≤ 1), candidates %d (1..16)",
			ErrBadParam, p.RecipientThreshold, p.EmitterThreshold, p.Candidates)
	}
	return nil
}

// Name returns "index".
func (IndexPolicy) Name() string { return "index" }

// Classify returns the state of a host of power speed (the cluster's most
// powerful host has pmax) with cores cores running tasks tasks.
func (p IndexPolicy) Classify(speed, pmax float64, cores, tasks int) State {
	if tasks < cores {
		return Recipient
	}
	idx := LoadIndex(speed, pmax, cores, tasks)
	switch {
	case idx > p.RecipientThreshold:
		return Recipient
	case idx < p.EmitterThreshold:
		return Emitter
	}
	return Neutral
}

// Capacity is how many more tasks a host can take before it stops being a
// recipient: the "maximum number of tasks the node can accept" a recipient
// advertises.
func (p IndexPolicy) Capacity(speed, pmax float64, cores, tasks int) int {
	n := 0
	for p.Classify(speed, pmax, cores, tasks+n) == Recipient {
		n++
		if n > 1<<20 {
			break
		}
	}
	return n
}

// Active reports whether balancing can help: some host is an emitter and
// another is a recipient. When the cluster is globally under-loaded (no
// emitter) or over-loaded (no recipient) the policy switches itself off.
func (p IndexPolicy) Active(hosts []Host) bool {
	pmax := maxSpeed(hosts)
	var em, rc bool
	for i := range hosts {
		switch p.Classify(hosts[i].Speed, pmax, hosts[i].Cores, hosts[i].Tasks) {
		case Emitter:
			em = true
		case Recipient:
			rc = true
		}
	}
	return em && rc
}

func maxSpeed(hosts []Host) float64 {
	m := 0.0
	for i := range hosts {
		if hosts[i].Speed > m {
			m = hosts[i].Speed
		}
	}
	return m
}

// RecipientQueue is the list of recipients a host keeps from the state
// changes others broadcast: a host is appended when it becomes a recipient
// and removed when it stops being one. Only changes to or from Recipient
// change the queue.
type RecipientQueue struct {
	members []int
	pos     []int // pos[h] is h's index in members plus one, 0 if absent
}

// NewRecipientQueue returns an empty queue for hosts 0..n-1.
func NewRecipientQueue(n int) *RecipientQueue {
	return &RecipientQueue{pos: make([]int, n)}
}

// Update applies host h's change from old to new state. It reports whether
// the queue changed, that is whether the change is one a host broadcasts.
func (q *RecipientQueue) Update(h int, old, new State) bool {
	if old == new || (old != Recipient && new != Recipient) {
		return false
	}
	if new == Recipient {
		if q.pos[h] == 0 {
			q.members = append(q.members, h)
			q.pos[h] = len(q.members)
		}
		return true
	}
	if i := q.pos[h]; i != 0 {
		copy(q.members[i-1:], q.members[i:])
		q.members = q.members[:len(q.members)-1]
		for j := i - 1; j < len(q.members); j++ {
			q.pos[q.members[j]] = j + 1
		}
		q.pos[h] = 0
	}
	return true
}

// Len is the number of recipients in the queue.
func (q *RecipientQueue) Len() int { return len(q.members) }

// Contains reports whether h is in the queue.
func (q *RecipientQueue) Contains(h int) bool { return q.pos[h] != 0 }

// Members returns the queue in arrival order; the slice is the queue's own
// and must not be modified.
func (q *RecipientQueue) Members() []int { return q.members }

// Sample appends to buf up to k distinct members other than exclude chosen
// uniformly at random, and returns it.
func (q *RecipientQueue) Sample(rng *rand.Rand, k, exclude int, buf []int) []int {
	n := len(q.members)
	avail := n
	if exclude >= 0 && exclude < len(q.pos) && q.pos[exclude] != 0 {
		avail--
	}
	if k > avail {
		k = avail
	}
	start := len(buf)
	for len(buf)-start < k {
		h := q.members[rng.IntN(n)]
		if h == exclude {
			continue
		}
		dup := false
		for _, b := range buf[start:] {
			if b == h {
				dup = true
				break
			}
		}
		if !dup {
			buf = append(buf, h)
		}
	}
	return buf
}

// SortByIndex orders candidates by decreasing load index (most available
// first), ties by host number. index returns a host's current index.
// The few candidates are sorted by insertion, without allocating.
func SortByIndex(cands []int, index func(h int) float64) {
	for i := 1; i < len(cands); i++ {
		h := cands[i]
		ih := index(h)
		j := i
		for j > 0 {
			p := cands[j-1]
			ip := index(p)
			if ip > ih || (ip == ih && p < h) {
				break
			}
			cands[j] = p
			j--
		}
		cands[j] = h
	}
}

// snapshotQueue builds the recipient queue a snapshot implies, in host order.
func (p IndexPolicy) snapshotQueue(hosts []Host, pmax float64) *RecipientQueue {
	q := NewRecipientQueue(len(hosts))
	for i := range hosts {
		if p.Classify(hosts[i].Speed, pmax, hosts[i].Cores, hosts[i].Tasks) == Recipient {
			q.Update(i, Neutral, Recipient)
		}
	}
	return q
}

// Place implements Placer. A task submitted to a recipient or neutral host
// runs there. An emitter asks up to Candidates random recipients for their
// index and sends the task to the most available; with no recipient in the
// cluster the policy is off and the task is held at the origin.
func (p IndexPolicy) Place(origin int, hosts []Host, rng *rand.Rand) (Decision, error) {
	if err := p.Validate(); err != nil {
		return Decision{}, fmt.Errorf("index: %w", err)
	}
	if err := validate(origin, hosts); err != nil {
		return Decision{}, fmt.Errorf("index: %w", err)
	}
	pmax := maxSpeed(hosts)
	o := hosts[origin]
	if p.Classify(o.Speed, pmax, o.Cores, o.Tasks) != Emitter {
		return Decision{Host: origin}, nil
	}
	q := p.snapshotQueue(hosts, pmax)
	cands := q.Sample(rng, p.Candidates, origin, make([]int, 0, p.Candidates))
	if len(cands) == 0 {
		return Decision{Host: origin, Hold: true}, nil
	}
	SortByIndex(cands, func(h int) float64 {
		return LoadIndex(hosts[h].Speed, pmax, hosts[h].Cores, hosts[h].Tasks)
	})
	return Decision{Host: cands[0], Probes: len(cands)}, nil
}

// Distribute runs one balancing operation for n new tasks submitted to an
// emitter at origin: the origin keeps what it can accept locally, then sends
// each sorted candidate as many tasks as turn it neutral, and so on until
// the tasks or the recipients run out. It returns how many tasks each host
// receives (indexed like hosts) and how many remain held at the origin.
func (p IndexPolicy) Distribute(origin, n int, hosts []Host, rng *rand.Rand) (counts []int, held int, err error) {
	if err := p.Validate(); err != nil {
		return nil, 0, fmt.Errorf("index: %w", err)
	}
	if err := validate(origin, hosts); err != nil {
		return nil, 0, fmt.Errorf("index: %w", err)
	}
	if n < 0 {
		return nil, 0, fmt.Errorf("index: %w: %d tasks", ErrBadParam, n)
	}
	pmax := maxSpeed(hosts)
	counts = make([]int, len(hosts))
	tasks := func(h int) int { return hosts[h].Tasks + counts[h] }
	o := hosts[origin]
	for n > 0 && p.Classify(o.Speed, pmax, o.Cores, tasks(origin)) != Emitter {
		counts[origin]++
		n--
	}
	q := p.snapshotQueue(hosts, pmax)
	for n > 0 {
		cands := q.Sample(rng, p.Candidates, origin, nil)
		if len(cands) == 0 {
			break
		}
		SortByIndex(cands, func(h int) float64 {
			return LoadIndex(hosts[h].Speed, pmax, hosts[h].Cores, tasks(h))
		})
		for _, h := range cands {
			c := p.Capacity(hosts[h].Speed, pmax, hosts[h].Cores, tasks(h))
			if c > n {
				c = n
			}
			counts[h] += c
			n -= c
			q.Update(h, Recipient, p.Classify(hosts[h].Speed, pmax, hosts[h].Cores, tasks(h)))
			if n == 0 {
				break
			}
		}
	}
	counts[origin] += n
	return counts, n, nil
}
