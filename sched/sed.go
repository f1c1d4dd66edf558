package sched

import (
	"container/heap"
	"fmt"
	"math"
)

// MaxVirtualNodes caps the virtual nodes one host contributes to one class,
// so that a tiny α or a huge class bound cannot blow up the availability
// vector or the placement. Real hosts stay far below it: with Table 1 a
// host offers at most 4.5/α nodes, 1024 only for α < 0.005.
const MaxVirtualNodes = 1024

// DelayFactor returns d = α(1 + load), the delay a new process sees on a
// machine with speed factor alpha and load runnable processes.
func DelayFactor(alpha, load float64) float64 { return alpha * (1 + load) }

// ClassOf returns the 1-based delay class that delay d belongs to: the
// fastest class whose upper bound δ^max is at least d. A delay below the
// first class's lower bound (a machine faster than the reference) is in
// class 1; a delay above every class gives 0.
func ClassOf(classes []Class, d float64) int {
	for i, c := range classes {
		if d <= c.Max {
			return i + 1
		}
	}
	return 0
}

// effective returns the load and free memory the availability vector
// counts for h: with interactive users, load + load_reserv and
// memory − mem_reserv; without, the host's own figures.
func (p Params) effective(h Host) (load, mem float64) {
	if h.Users > 0 {
		return h.Load + p.LoadReserve, h.MemFree - p.MemReserve
	}
	return h.Load, h.MemFree
}

// bound returns min{δ_i^max, s_j}, s_j = 0 meaning no threshold.
func bound(c Class, h Host) float64 {
	if h.Slowdown > 0 && h.Slowdown < c.Max {
		return h.Slowdown
	}
	return c.Max
}

// VirtualNodes returns max{k ≥ 0 | α(k + load) ≤ limit}, at most
// MaxVirtualNodes: how many more processes fit on a machine before its delay
// passes limit. It evaluates the inequality itself (not only the quotient)
// so that the answer agrees with the definition in floating point.
func VirtualNodes(alpha, load, limit float64) int {
	if !(alpha > 0) || !(alpha*load <= limit) {
		return 0
	}
	x := limit/alpha - load
	if x >= MaxVirtualNodes {
		return MaxVirtualNodes
	}
	k := int(math.Floor(x))
	if k < 0 {
		k = 0
	}
	for k < MaxVirtualNodes && alpha*(float64(k+1)+load) <= limit {
		k++
	}
	for k > 0 && alpha*(float64(k)+load) > limit {
		k--
	}
	return k
}

// HostAvailability returns a_ij for host h and every class i: the virtual
// nodes of delay at most δ_i^max (and at most h's slow-down threshold) the
// host offers, after reserving load_reserv and mem_reserv when interactive
// users are present; 0 for every class when the memory left is not above
// mem_min.
func HostAvailability(h Host, classes []Class, p Params) []int {
	out := make([]int, len(classes))
	load, mem := p.effective(h)
	if !(mem > p.MemMin) {
		return out
	}
	for i, c := range classes {
		out[i] = VirtualNodes(h.Alpha, load, bound(c, h))
	}
	return out
}

// Availability returns the availability vector (a_1, …, a_maxclass) of the
// snapshot's hosts: a_i = Σ_j a_ij. The classes are cumulative: a_i counts
// every virtual node with delay at most δ_i^max, so five idle machines of
// α = 1 and twenty-five of α = 4 give (5, 10, 15, 45) under Table 1.
func Availability(s *Snapshot) []int {
	out := make([]int, len(s.Classes))
	for _, h := range s.Hosts {
		for i, a := range HostAvailability(h, s.Classes, s.Params) {
			out[i] += a
		}
	}
	return out
}

// Mapping is SED's decision for a job. Its JSON form is the output of
// `dpvm sched plan --json`.
type Mapping struct {
	// Availability is the availability vector before the job is placed.
	Availability []int `json:"availability"`
	// Class is the chosen 1-based delay class, 0 when no class offers
	// minsize virtual nodes.
	Class int `json:"class"`
	// Size is the number of processes, min(a_class, maxsize); absent when
	// Class is 0.
	Size int `json:"size,omitempty"`
	// EDT is the expected delay time δ_class / Size; absent when Class is 0.
	EDT float64 `json:"edt,omitempty"`
	// Placement maps a host name to the number of processes placed there
	// (hosts with none are left out); empty when Class is 0.
	Placement map[string]int `json:"placement"`
	// Hosts lists the hosts that receive processes, in the snapshot's
	// order, with the delay the last process placed on each expects.
	Hosts []Placed `json:"-"`
}

// Placed is the part of a mapped job one host receives: N processes, the
// last of which expects delay Delay = α(N + load), load counting the
// reservation for interactive users.
type Placed struct {
	Host  string
	N     int
	Delay float64
}

// Plan maps job onto the snapshot's hosts with SED: among the classes with
// a_ip = min(a_i, maxsize) ≥ minsize it picks the one with the smallest
// expected delay time δ_i / a_ip, the fastest class on ties, and places a_ip
// processes on the hosts' virtual nodes of that class.
//
// The paper does not say which virtual nodes a job smaller than a_i takes;
// Plan takes the fastest ones, one process at a time: the next process goes
// to the host where it would see the smallest delay α(k + load) (load with
// the reservation for interactive users), ties to the smaller α, then the
// smaller name — the same order Step uses between destinations.
func Plan(s *Snapshot, job Job) (Mapping, error) {
	if err := s.Validate(); err != nil {
		return Mapping{}, fmt.Errorf("plan: %w", err)
	}
	if err := job.validate(); err != nil {
		return Mapping{}, fmt.Errorf("plan: %w", err)
	}
	per := make([][]int, len(s.Hosts))
	avail := make([]int, len(s.Classes))
	for j, h := range s.Hosts {
		per[j] = HostAvailability(h, s.Classes, s.Params)
		for i, a := range per[j] {
			avail[i] += a
		}
	}
	m := Mapping{Availability: avail, Placement: map[string]int{}}
	minSize := job.minSize()
	best, bestSize, bestEDT := 0, 0, 0.0
	for i, c := range s.Classes {
		a := avail[i]
		if job.MaxSize > 0 && a > job.MaxSize {
			a = job.MaxSize
		}
		if a < minSize {
			continue
		}
		edt := c.Delta / float64(a)
		if best == 0 || edt < bestEDT {
			best, bestSize, bestEDT = i+1, a, edt
		}
	}
	if best == 0 {
		return m, nil
	}
	m.Class, m.Size, m.EDT = best, bestSize, bestEDT
	for _, p := range place(s, per, best-1, bestSize) {
		m.Placement[p.Host] = p.N
		m.Hosts = append(m.Hosts, p)
	}
	return m, nil
}

// place picks n virtual nodes of class ci, fastest first, and returns how
// many each host receives, in the snapshot's host order.
func place(s *Snapshot, per [][]int, ci, n int) []Placed {
	q := make(slotHeap, 0, len(s.Hosts))
	hosts := make([]*slotHost, 0, len(s.Hosts))
	total := 0
	for j, h := range s.Hosts {
		if per[j][ci] == 0 {
			continue
		}
		load, _ := s.Params.effective(h)
		sh := &slotHost{host: h, load: load, left: per[j][ci]}
		hosts = append(hosts, sh)
		total += sh.left
	}
	if n >= total {
		// Every node of the class is taken.
		for _, sh := range hosts {
			sh.placed = sh.left
		}
	} else {
		q = append(q, hosts...)
		heap.Init(&q)
		for placed := 0; placed < n && len(q) > 0; placed++ {
			top := q[0]
			top.placed++
			if top.placed == top.left {
				heap.Pop(&q)
			} else {
				heap.Fix(&q, 0)
			}
		}
	}
	var out []Placed
	for _, sh := range hosts {
		if sh.placed > 0 {
			out = append(out, Placed{Host: sh.host.Name, N: sh.placed, Delay: sh.host.Alpha * (float64(sh.placed) + sh.load)})
		}
	}
	return out
}

type slotHost struct {
	host   Host
	load   float64
	left   int
	placed int
}

// next is the delay the next process placed on the host would see.
func (h *slotHost) next() float64 {
	return h.host.Alpha * (float64(h.placed+1) + h.load)
}

type slotHeap []*slotHost

func (q slotHeap) Len() int { return len(q) }
func (q slotHeap) Less(a, b int) bool {
	da, db := q[a].next(), q[b].next()
	if da != db {
		return da < db
	}
	return hostBefore(q[a].host, q[b].host)
}
func (q slotHeap) Swap(a, b int) { q[a], q[b] = q[b], q[a] }
func (q *slotHeap) Push(x any)   { *q = append(*q, x.(*slotHost)) }
func (q *slotHeap) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// hostBefore is the tie-break between hosts of equal delay: the smaller α,
// then the smaller name.
func hostBefore(a, b Host) bool {
	if a.Alpha != b.Alpha {
		return a.Alpha < b.Alpha
	}
	return a.Name < b.Name
}
