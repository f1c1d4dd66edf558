package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/dpvm/dpvm/daemon/bench/peers"
	"github.com/dpvm/dpvm/task"
)

// The collectives of two tasks in the peer comparison, measured exactly as
// mpi_bench.c measures Open MPI's (daemon/bench/peers/csrc): allreduce (sum
// of float64s), bcast, allgather and alltoall at 8 B, 8 KiB and 1 MiB of
// float64s per rank, on a communicator of the pinger and one task on the
// echo's host (one daemon in ModeLocal, the other daemon in ModeRemote).
// Each iteration starts with a control broadcast from rank 0 (go on or
// stop) and an untimed barrier; then each rank times the operation and
// checks its result, and each passes a SafePoint. Rank 1 sends its times to rank 0, which takes, for
// every iteration, the slower rank's time and reports the median. The
// bcast is timed until rank 1 has acknowledged it.

// Collective operations, in the order of mpi_bench.c's coll_ops.
const (
	collAllreduce = iota
	collBcast
	collAllgather
	collAlltoall
)

// PeerCollOps names the collective operations of the peer comparison, by
// index (the "op" of a PeerColl): the harness's table (peers.CollOps).
var PeerCollOps = peers.CollOps

var (
	// peerCollSizes are the bytes of float64s each rank contributes (its
	// vector, the root's vector, its chunk, its chunk for each rank): the
	// harness's table (peers.CollSizes).
	peerCollSizes = peers.CollSizes
	// peerCollReps bound the timed iterations per size at scale 1.
	peerCollReps = []int{2000, 1000, 100}
)

const (
	// PeerCollNP is the size of the collectives' communicator: the
	// harness's (peers.CollNP).
	PeerCollNP = peers.CollNP
	// peerCollCap stops an operation's timed iterations (after at least
	// minTimed) at scale 1.
	peerCollCap = time.Second
	// Tags between the two ranks beside the communicator's own traffic.
	tagCollPairAck   = 27 // rank 1 → 0: the bcast arrived
	tagCollPairTimes = 28 // rank 1 → 0: its times, µs
)

// PeerColl is one collective's figure: the median over Reps iterations of
// the slower rank's time for operation Op on Size bytes per rank.
type PeerColl struct {
	Op   string  `json:"op"`
	Size int     `json:"size"`
	US   float64 `json:"us"`
	Reps int     `json:"reps"`
}

// collPlan is the iterations of one size: warm untimed, then up to reps
// timed, stopping once the timed ones took capT.
type collPlan struct {
	reps, warm int
	capT       time.Duration
}

// collPlanFor returns the plan of size index k at scale, as mpi_bench.c's
// coll_plan_for.
func collPlanFor(k int, scale float64) collPlan {
	reps := max(int(float64(peerCollReps[k])*scale), minTimed)
	return collPlan{reps: reps, warm: max(reps/10, 5), capT: time.Duration(float64(peerCollCap) * scale)}
}

// collVal is element j of what rank r contributes in iteration i (for
// alltoall, r is sender*16 + receiver): small integers, so sums are exact.
func collVal(i, r, j int) float64 { return float64((i + 3*r + j) % 4096) }

// collFill writes what rank contributes to op in iteration i into in (n
// elements a chunk) and returns the part of in the operation takes.
func collFill(op, rank, np, i, n int, in []float64) []float64 {
	switch op {
	case collAlltoall:
		in = in[:n*np]
		for d := range np {
			for j := range n {
				in[d*n+j] = collVal(i, rank*16+d, j)
			}
		}
	case collBcast:
		in = in[:n]
		for j := range in {
			in[j] = -1
			if rank == 0 {
				in[j] = collVal(i, 0, j)
			}
		}
	default:
		in = in[:n]
		for j := range in {
			in[j] = collVal(i, rank, j)
		}
	}
	return in
}

// collCheck tells whether out is op's result of iteration i at rank (n
// elements a chunk).
func collCheck(op, rank, np, i, n int, out []float64) bool {
	want := func(k int) float64 {
		r, j := k/n, k%n
		switch op {
		case collAllreduce:
			s := 0.0
			for r := range np {
				s += collVal(i, r, k)
			}
			return s
		case collBcast:
			return collVal(i, 0, k)
		case collAllgather:
			return collVal(i, r, j)
		}
		return collVal(i, r*16+rank, j)
	}
	wantLen := n
	if op == collAllgather || op == collAlltoall {
		wantLen = n * np
	}
	if len(out) != wantLen {
		return false
	}
	for k, v := range out {
		if v != want(k) {
			return false
		}
	}
	return true
}

// How collOnce runs an operation.
const (
	viaColl     = iota // the task API's collective
	viaHand            // the same exchange written with Send and Recv
	viaHandSafe        // the same with Recv(…, task.Safe()): a safe point while it waits, as the collective is
)

// collOnce runs op once on m with this rank's in (filled by collFill)
// and returns its result, as via says (hand-written: two members only).
func collOnce(c *task.Ctx, m *task.Comm, op int, in []float64, via int) ([]float64, error) {
	switch via {
	case viaHand:
		return handOnce(c, m, op, in)
	case viaHandSafe:
		return handOnce(c, m, op, in, task.Safe())
	}
	switch op {
	case collAllreduce:
		err := task.AllReduce(c, m, task.Sum[float64], in)
		return in, err
	case collBcast:
		if err := m.Bcast(c, &in, 0); err != nil {
			return nil, err
		}
		return in, collAck(c, m)
	case collAllgather:
		return task.Allgather(c, m, in)
	}
	return task.Alltoall(c, m, in)
}

// collAck has rank 1 acknowledge a bcast to rank 0, which waits for it.
func collAck(c *task.Ctx, m *task.Comm) error {
	if m.Rank == 0 {
		_, err := c.Recv(m.TID(1), tagCollPairAck, nil)
		return err
	}
	return c.Send(m.TID(0), tagCollPairAck, nil)
}

// Tag of the hand-written exchanges' messages.
const tagHand = 29

// handOnce is collOnce's hand-written twin for two members: each sends
// the other what it needs and combines what it receives, in rank order.
func handOnce(c *task.Ctx, m *task.Comm, op int, in []float64, opts ...task.Option) ([]float64, error) {
	if m.Size() != 2 {
		return nil, fmt.Errorf("%w: a hand-written exchange of %d members", ErrOptions, m.Size())
	}
	peer := m.TID(1 - m.Rank)
	var got []float64
	switch op {
	case collBcast:
		if m.Rank == 0 {
			if err := c.Send(peer, tagHand, in); err != nil {
				return nil, err
			}
		} else if _, err := c.Recv(peer, tagHand, &in, opts...); err != nil {
			return nil, err
		}
		return in, collAck(c, m)
	case collAlltoall:
		n := len(in) / 2
		if err := c.Send(peer, tagHand, in[(1-m.Rank)*n:(2-m.Rank)*n]); err != nil {
			return nil, err
		}
	default:
		if err := c.Send(peer, tagHand, in); err != nil {
			return nil, err
		}
	}
	if _, err := c.Recv(peer, tagHand, &got, opts...); err != nil {
		return nil, err
	}
	switch op {
	case collAllreduce:
		if m.Rank == 0 {
			task.Sum(in, got)
		} else {
			task.Sum(got, in)
			copy(in, got)
		}
		return in, nil
	case collAllgather:
		if m.Rank == 0 {
			return append(slices.Clone(in), got...), nil
		}
		return append(got, in...), nil
	}
	n := len(in) / 2
	mine := in[m.Rank*n : (m.Rank+1)*n]
	if m.Rank == 0 {
		return append(slices.Clone(mine), got...), nil
	}
	return append(got, mine...), nil
}

// collRun runs every operation at every size as rank m.Rank of a
// communicator of two, the protocol of mpi_bench.c's coll_run; rank 0
// returns the figures, rank 1 nil.
func collRun(ctx context.Context, c *task.Ctx, m *task.Comm, scale float64) ([]PeerColl, error) {
	if m.Size() != PeerCollNP {
		return nil, fmt.Errorf("%w: collectives of %d members, want %d", ErrOptions, m.Size(), PeerCollNP)
	}
	maxN := peerCollSizes[len(peerCollSizes)-1] / 8
	buf := make([]float64, maxN*PeerCollNP)
	var out []PeerColl
	for op, name := range PeerCollOps {
		for k, size := range peerCollSizes {
			p := collPlanFor(k, scale)
			n := size / 8
			mine := make([]float64, 0, p.reps)
			var start time.Time
			for i := range p.warm + p.reps {
				goOn := 1
				if m.Rank == 0 && i > p.warm+minTimed && time.Since(start) > p.capT {
					goOn = 0
				}
				if err := m.Bcast(c, &goOn, 0); err != nil {
					return nil, err
				}
				if goOn == 0 {
					break
				}
				if i == p.warm {
					start = time.Now()
				}
				in := collFill(op, m.Rank, PeerCollNP, i, n, buf)
				if err := m.Barrier(c); err != nil {
					return nil, err
				}
				t0 := time.Now()
				res, err := collOnce(c, m, op, in, viaColl)
				t1 := time.Now()
				if err != nil {
					return nil, fmt.Errorf("%s of %s: %w", name, FormatSize(size), err)
				}
				if !collCheck(op, m.Rank, PeerCollNP, i, n, res) {
					return nil, fmt.Errorf("%s of %s, iteration %d: %w", name, FormatSize(size), i, ErrEcho)
				}
				if i >= p.warm {
					mine = append(mine, micros(t1.Sub(t0)))
				}
				// A program's step ends so: the results kept for a
				// replay since the last one are dropped.
				if err := c.SafePoint(); err != nil {
					return nil, err
				}
			}
			if m.Rank != 0 {
				if err := c.Send(m.TID(0), tagCollPairTimes, mine); err != nil {
					return nil, err
				}
				continue
			}
			var theirs []float64
			if _, err := c.Recv(m.TID(1), tagCollPairTimes, &theirs, task.WithContext(ctx)); err != nil {
				return nil, err
			}
			if len(theirs) != len(mine) {
				return nil, fmt.Errorf("%s of %s: rank 1 timed %d iterations, rank 0 %d: %w", name, FormatSize(size), len(theirs), len(mine), ErrEcho)
			}
			for j := range mine {
				mine[j] = max(mine[j], theirs[j])
			}
			out = append(out, PeerColl{Op: name, Size: size, US: Median(mine), Reps: len(mine)})
		}
	}
	return out, nil
}

func init() {
	task.Register("dpvm.bench.collpair", &collPairTask{})
}

// collPairTask is rank 1 of the collectives' communicator: it joins C and
// runs collRun at Scale.
type collPairTask struct {
	Scale float64
	C     task.Comm
}

func (t *collPairTask) Run(c *task.Ctx) error {
	if err := c.JoinComm(&t.C); err != nil {
		return err
	}
	_, err := collRun(c.Context(), c, &t.C, t.Scale)
	return err
}

// peerColls measures the collectives of two tasks: the pinger and a task
// on the echo's host.
func peerColls(ctx context.Context, p *TaskPair, l *PeerLine, scale float64) error {
	err := p.do(ctx, func(ctx context.Context, c *task.Ctx, _ task.TID) error {
		var m task.Comm
		if _, err := c.Spawn(&collPairTask{Scale: scale}, PeerCollNP-1, task.WithComm(&m), p.root.place); err != nil {
			return err
		}
		res, err := collRun(ctx, c, &m, scale)
		l.Coll = res
		return err
	})
	if err != nil {
		return fmt.Errorf("collectives of %d: %w", PeerCollNP, err)
	}
	l.CollNP = PeerCollNP
	return nil
}
