package npb

import (
	"fmt"
	"time"

	"github.com/dpvm/dpvm/task"
)

// comm is what a kernel's code needs from its surroundings: its rank among
// np peers and point-to-point messages between ranks. Workers running as
// dpvm tasks use taskComm; the serial reference form uses soloComm (np = 1,
// no messages ever). The collectives below are built on it, so a kernel's
// communication pattern is the same whatever carries it.
type comm interface {
	rank() int
	size() int
	// send delivers v (encoded before send returns) to rank to.
	send(to, tag int, v any) error
	// sendInPlace delivers v, a slice the caller gives up, to rank to:
	// a receiver on the sender's host may get the slice's memory itself
	// (task.InPlace), so the sender must not write to it until
	// the receiver has said, by a later message, that it is done with it.
	sendInPlace(to, tag int, v any) error
	// recv receives the next message with tag from rank from into v.
	recv(from, tag int, v any) error
	// recvPayload receives the next message with tag from rank from and
	// returns its body undecoded; its bytes belong to the caller.
	recvPayload(from, tag int) (task.Payload, error)
}

// recvSlice receives the next message with tag from rank from, a slice
// sent as []T, and returns it as view (task.Payload.Int32s, Float64s or
// Complex128s) gives it: the message's bytes, not a copy, where they can
// be. With n >= 0 the slice must hold n values.
func recvSlice[T any](cm comm, from, tag, n int, view func(task.Payload) ([]T, error)) ([]T, error) {
	p, err := cm.recvPayload(from, tag)
	if err != nil {
		return nil, err
	}
	return viewSlice(p, from, tag, n, view)
}

// viewSlice is recvSlice's view of a message received.
func viewSlice[T any](p task.Payload, from, tag, n int, view func(task.Payload) ([]T, error)) ([]T, error) {
	s, err := view(p)
	if err != nil {
		return nil, fmt.Errorf("recv from rank %d tag %d: %w", from, tag, err)
	}
	if n >= 0 && len(s) != n {
		return nil, fmt.Errorf("recv from rank %d tag %d: %d values, want %d", from, tag, len(s), n)
	}
	return s, nil
}

// recvSliceSafe is recvSlice whose wait is a safe point where cm is a
// team's (teamOf; after the spin policy's poll): the caller's fields must
// then say that the task waits there, for Run re-entered to receive the
// message again (task.Safe).
func recvSliceSafe[T any](cm comm, from, tag, n int, view func(task.Payload) ([]T, error)) ([]T, error) {
	t, ok := cm.(*taskComm)
	if !ok || t.size() == 1 {
		return recvSlice(cm, from, tag, n, view)
	}
	m, ok, err := t.poll(from, tag)
	if !ok && err == nil {
		m, err = t.c.Recv(t.team.TIDs[from], tag, nil, task.Safe())
	}
	if err != nil {
		return nil, err
	}
	return viewSlice(m.Payload, from, tag, n, view)
}

// soloComm is a single rank with nobody to talk to.
type soloComm struct{}

func (soloComm) rank() int { return 0 }
func (soloComm) size() int { return 1 }
func (soloComm) send(to, tag int, _ any) error {
	return fmt.Errorf("send to rank %d tag %d: a serial run has no peers", to, tag)
}
func (soloComm) sendInPlace(to, tag int, _ any) error {
	return fmt.Errorf("send to rank %d tag %d: a serial run has no peers", to, tag)
}
func (soloComm) recv(from, tag int, _ any) error {
	return fmt.Errorf("recv from rank %d tag %d: a serial run has no peers", from, tag)
}
func (soloComm) recvPayload(from, tag int) (task.Payload, error) {
	return task.Payload{}, fmt.Errorf("recv from rank %d tag %d: a serial run has no peers", from, tag)
}

// taskComm carries a worker's messages through the task API; ranks map to
// TIDs through the worker's task.Comm.
type taskComm struct {
	c *task.Ctx
	// team is the worker's task.Comm (a field of its struct): its Rank
	// and TIDs are the worker's rank and its peers', and its collectives
	// are safe points (teamOf).
	team *task.Comm
	// oneHost is set when the virtual machine had one host as the task
	// attached: all its peers are then on its daemon, where a receive
	// polls before it blocks (spin); between daemons a message takes
	// longer than a poll lasts.
	oneHost bool
	spin    spinPolicy
}

// teamOf returns the task's Ctx and the worker's task.Comm when cm is a
// taskComm of more than one rank: the task.Comm's collectives wait at
// safe points, and it keeps a collective's progress, so that Run
// re-entered in one makes the same call again and carries on (task.Comm).
// A kernel calls them where its fields say where it is: Run re-entered
// there computes the same arguments again.
func teamOf(cm comm) (*task.Ctx, *task.Comm, bool) {
	if t, ok := cm.(*taskComm); ok && t.size() > 1 {
		return t.c, t.team, true
	}
	return nil, nil, false
}

// barrierSafe is barrier, waiting at a safe point where cm can (teamOf).
func barrierSafe(cm comm) error {
	if c, m, ok := teamOf(cm); ok {
		return m.Barrier(c)
	}
	return barrier(cm)
}

// sumSafe is allreduce with sumOp, waiting at a safe point where cm can
// (teamOf). Both combine the ranks' data in rank order, so the sums are
// the same bits either way.
func sumSafe[T int64 | float64](cm comm, data []T) error {
	if c, m, ok := teamOf(cm); ok {
		return task.AllReduce(c, m, task.Sum[T], data)
	}
	return allreduce(cm, data, sumOp[T])
}

// allreduceSafe is allreduce, waiting at a safe point where cm can
// (teamOf). Both combine the ranks' data in rank order, rank 0's first,
// so the results are the same bits either way.
func allreduceSafe[T any](cm comm, data []T, op func(acc, in []T)) error {
	if c, m, ok := teamOf(cm); ok {
		return task.AllReduce(c, m, op, data)
	}
	return allreduce(cm, data, op)
}

// gatherSafe is allgathervLent, waiting at a safe point where cm can
// (teamOf; the blocks are then copied).
func gatherSafe(cm comm, full []float64, bounds []int) error {
	if c, m, ok := teamOf(cm); ok {
		return teamAllgatherv(c, m, full, bounds)
	}
	return allgathervLent(cm, full, bounds)
}

// allgathervSafe is allgatherv, waiting at a safe point where cm can
// (teamOf).
func allgathervSafe(cm comm, full []float64, bounds []int) error {
	if c, m, ok := teamOf(cm); ok {
		return teamAllgatherv(c, m, full, bounds)
	}
	return allgatherv(cm, full, bounds)
}

// teamAllgatherv is allgatherv on the team's task.Comm: a safe point while
// it waits; the blocks received are copied into full.
func teamAllgatherv(c *task.Ctx, m *task.Comm, full []float64, bounds []int) error {
	parts, err := task.Allgatherv(c, m, full[bounds[m.Rank]:bounds[m.Rank+1]])
	if err != nil {
		return err
	}
	for r, part := range parts {
		lo, hi := bounds[r], bounds[r+1]
		if len(part) != hi-lo {
			return fmt.Errorf("allgather: rank %d sent %d elements, want %d", r, len(part), hi-lo)
		}
		copy(full[lo:hi], part)
	}
	return nil
}

func (t *taskComm) rank() int { return t.team.Rank }
func (t *taskComm) size() int { return t.team.Size() }
func (t *taskComm) send(to, tag int, v any) error {
	return t.c.Send(t.team.TIDs[to], tag, v)
}
func (t *taskComm) sendInPlace(to, tag int, v any) error {
	return t.c.Send(t.team.TIDs[to], tag, v, task.InPlace())
}
func (t *taskComm) recv(from, tag int, v any) error {
	p, err := t.recvPayload(from, tag)
	if err != nil {
		return err
	}
	if err := p.Decode(v); err != nil {
		return fmt.Errorf("recv from rank %d tag %d: %w", from, tag, err)
	}
	return nil
}
func (t *taskComm) recvPayload(from, tag int) (task.Payload, error) {
	m, ok, err := t.poll(from, tag)
	if !ok && err == nil {
		m, err = t.c.Recv(t.team.TIDs[from], tag, nil)
	}
	if err != nil {
		return task.Payload{}, err
	}
	return m.Payload, nil
}

// poll tries to receive the message for up to the spin policy's budget
// before the caller blocks: a task that blocks is parked, and waking it
// takes the runtime tens of microseconds (another thread must be woken
// to run it), where a kernel's collectives wait for a partner that is
// usually microseconds away. It returns ok == false, and no error, when
// nothing came.
func (t *taskComm) poll(from, tag int) (task.Message, bool, error) {
	if !t.oneHost {
		return task.Message{}, false, nil
	}
	budget := t.spin.budget()
	if budget == 0 {
		return task.Message{}, false, nil
	}
	start := time.Now()
	for {
		m, ok, err := t.c.TryRecv(t.team.TIDs[from], tag, nil)
		if err != nil || ok {
			t.spin.record(true)
			return m, ok, err
		}
		if time.Since(start) > budget {
			t.spin.record(false)
			return task.Message{}, false, nil
		}
		osYield()
	}
}

// spinMax is the longest a receive polls before it blocks.
const spinMax = 50 * time.Microsecond

// spinPolicy decides how long a receive polls before blocking. Polling
// pays when the message comes within the budget; when it does not (the
// partner is far behind, or the machine's cores are busy with other work
// and polling takes the partner's CPU), the receives that follow block at
// once, for a run that doubles with every poll that failed (up to
// maxSkip) and ends at the first that succeeds.
type spinPolicy struct {
	skip   int // receives left that block at once
	failed int // run length after the last failed poll
}

const maxSkip = 64

// budget is how long the next receive may poll.
func (s *spinPolicy) budget() time.Duration {
	if s.skip > 0 {
		s.skip--
		return 0
	}
	return spinMax
}

// record reports whether a poll received its message.
func (s *spinPolicy) record(received bool) {
	if received {
		s.failed = 0
		return
	}
	s.failed = min(max(2*s.failed, 1), maxSkip)
	s.skip = s.failed
}

// Message tags. Messages between two tasks arrive in order, so every
// collective can reuse its tag from one call to the next.
const (
	tagProgress = 1 + iota
	tagResult
	tagExit
	tagReduce
	tagBcast
	tagGather
	tagHalo
	tagTranspose
	tagKeys
	tagCounts
)

// allreduce combines data element-wise over all ranks with op (applied at
// rank 0 in rank order, so the result is the same on every run) and leaves
// the result in data on every rank.
func allreduce[T any](cm comm, data []T, op func(acc, in []T)) error {
	n := cm.size()
	if n == 1 {
		return nil
	}
	if len(data) <= smallReduce {
		return allreduceSmall(cm, data, op)
	}
	if cm.rank() != 0 {
		if err := cm.send(0, tagReduce, data); err != nil {
			return fmt.Errorf("allreduce: %w", err)
		}
		buf := data[:0:len(data)]
		if err := cm.recv(0, tagBcast, &buf); err != nil {
			return fmt.Errorf("allreduce: %w", err)
		}
		if len(buf) != len(data) {
			return fmt.Errorf("allreduce: got %d elements, want %d", len(buf), len(data))
		}
		return nil
	}
	in := make([]T, 0, len(data))
	for r := 1; r < n; r++ {
		if err := cm.recv(r, tagReduce, &in); err != nil {
			return fmt.Errorf("allreduce: %w", err)
		}
		if len(in) != len(data) {
			return fmt.Errorf("allreduce: rank %d sent %d elements, want %d", r, len(in), len(data))
		}
		op(data, in)
	}
	for r := 1; r < n; r++ {
		if err := cm.send(r, tagBcast, data); err != nil {
			return fmt.Errorf("allreduce: %w", err)
		}
	}
	return nil
}

// smallReduce is the largest vector allreduce exchanges directly between
// all ranks (one message latency) rather than through rank 0 (two).
const smallReduce = 16

// allreduceSmall has every rank send data to every other and combine all
// contributions in rank order, so every rank computes the same result.
func allreduceSmall[T any](cm comm, data []T, op func(acc, in []T)) error {
	n, me := cm.size(), cm.rank()
	for k := 1; k < n; k++ {
		if err := cm.send((me+k)%n, tagReduce, data); err != nil {
			return fmt.Errorf("allreduce: %w", err)
		}
	}
	parts := make([][]T, n)
	parts[me] = append([]T(nil), data...)
	for k := 1; k < n; k++ {
		r := (me - k + n) % n
		var in []T
		if err := cm.recv(r, tagReduce, &in); err != nil {
			return fmt.Errorf("allreduce: %w", err)
		}
		if len(in) != len(data) {
			return fmt.Errorf("allreduce: rank %d sent %d elements, want %d", r, len(in), len(data))
		}
		parts[r] = in
	}
	copy(data, parts[0])
	for r := 1; r < n; r++ {
		op(data, parts[r])
	}
	return nil
}

func sumOp[T int32 | int64 | float64](acc, in []T) {
	for i, v := range in {
		acc[i] += v
	}
}

// barrier returns once every rank has entered it.
func barrier(cm comm) error {
	if cm.size() == 1 {
		return nil
	}
	return allreduce(cm, []int64{0}, sumOp[int64])
}

// allgatherv fills full, split into consecutive blocks bounds[r]..bounds[r+1]
// (one per rank), from every rank's own block, which it already holds in
// place.
func allgatherv(cm comm, full []float64, bounds []int) error {
	n, me := cm.size(), cm.rank()
	if n == 1 {
		return nil
	}
	mine := full[bounds[me]:bounds[me+1]]
	for k := 1; k < n; k++ {
		if err := cm.send((me+k)%n, tagGather, mine); err != nil {
			return fmt.Errorf("allgather: %w", err)
		}
	}
	for k := 1; k < n; k++ {
		r := (me - k + n) % n
		lo, hi := bounds[r], bounds[r+1]
		dst := full[lo:lo:hi]
		if err := cm.recv(r, tagGather, &dst); err != nil {
			return fmt.Errorf("allgather: %w", err)
		}
		if len(dst) != hi-lo || (hi > lo && &dst[0] != &full[lo]) {
			return fmt.Errorf("allgather: rank %d sent %d elements, want %d", r, len(dst), hi-lo)
		}
	}
	return nil
}

// allgathervLent is allgatherv with every rank's block sent in place
// (comm.sendInPlace) and read where it arrived (task.Payload.Float64s): a
// block goes from its owner's full to every other's with one copy on a
// host, where allgatherv copies it three times (encode, decode, and into
// full). The caller must not write to its block of full again until every
// other rank has sent it a message after this call returned: by then each
// has copied the block out.
func allgathervLent(cm comm, full []float64, bounds []int) error {
	n, me := cm.size(), cm.rank()
	if n == 1 {
		return nil
	}
	mine := full[bounds[me]:bounds[me+1]]
	for k := 1; k < n; k++ {
		if err := cm.sendInPlace((me+k)%n, tagGather, mine); err != nil {
			return fmt.Errorf("allgather: %w", err)
		}
	}
	for k := 1; k < n; k++ {
		r := (me - k + n) % n
		lo, hi := bounds[r], bounds[r+1]
		in, err := recvSlice(cm, r, tagGather, hi-lo, task.Payload.Float64s)
		if err != nil {
			return fmt.Errorf("allgather: %w", err)
		}
		copy(full[lo:hi], in)
	}
	return nil
}

// blockBounds splits n items into np consecutive blocks as evenly as
// possible: block r is [b[r], b[r+1]).
func blockBounds(n, np int) []int {
	b := make([]int, np+1)
	for r := 0; r <= np; r++ {
		b[r] = int(int64(n) * int64(r) / int64(np))
	}
	return b
}
