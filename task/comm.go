package task

import (
	"errors"
	"fmt"
	"slices"
)

// CommTag is the message tag of communicator traffic: the set-up message
// Spawn sends with WithComm or Team, and every collective's messages. Programs should not
// use it for their own messages, and a Recv with AnyTag may take
// communicator traffic: receive with explicit tags in tasks that use a
// communicator.
const CommTag = MaxTag

// NoRank stands for "no task" in SendRecv: nothing is sent, or nothing
// received (the edges of a strip decomposition).
const NoRank = -1

// maxReplay bounds the results a communicator keeps between two safe
// points (see Comm).
const maxReplay = 1024

// Comm is a communicator: a fixed, ordered set of tasks of one job, each
// knowing its rank (its index in TIDs) and every peer's TID. Spawn with
// WithComm makes one (the spawner is rank 0, the spawned tasks ranks 1..n
// in spawn order), Spawn with Team one of the spawned tasks alone, and
// JoinComm hands each spawned task its own copy; GroupComm makes one of a
// group's members.
//
// A Comm must be an exported field of the task's struct: it is part of the
// task's state. Its collectives (Barrier, Bcast, SendRecv, AllReduce,
// Reduce, Scan, Exscan, ReduceScatter, Allgather(v), Alltoall(v),
// Gather, Gatherv, Scatter, Scatterv, Split, Dup, CartCreate,
// CartSub) and the waits of its non-blocking operations (Wait, Waitall,
// Waitany) are safe points while they wait, so a task blocked in one can
// be checkpointed or moved. What a collective has sent
// and received so far, and the results of the collectives completed since
// the task's last SafePoint, are kept in the Comm; when Run is called again
// on the restored state and reaches the same collectives again, the
// completed ones return their recorded results at once and the interrupted
// one carries on where it stopped. So, between two SafePoint calls, Run must
// make the same collective calls in the same order with the same arguments
// when it re-enters: compute from fields, and change fields that a
// collective's arguments depend on only after the step's last collective
// (then call SafePoint). Isend, Irecv and the waits are replayed the same
// way (see Irecv). A task that makes more than 1024 such calls between
// safe points is not checkpointed inside the later ones.
//
// Every member calls each collective in the same order. Messages between
// two members arrive in the order sent, so a collective's messages never
// mix with another's.
type Comm struct {
	// Rank is this task's place in TIDs.
	Rank int
	// TIDs are the members, by rank.
	TIDs []TID

	// The collective under way: whether this task's part of its sending
	// is done, and what it has received so far, by rank.
	Sent bool      `msgpack:",omitempty"`
	Have []bool    `msgpack:",omitempty"`
	Got  []Payload `msgpack:",omitempty"`
	// Done are the results of the collectives completed since the last
	// safe point, in call order, replayed when Run re-enters.
	Done []Payload `msgpack:",omitempty"`
	// Overflow is set when more collectives than Done may hold were made
	// since the last safe point; until the next one, collectives wait
	// without being safe points.
	Overflow bool `msgpack:",omitempty"`

	// ID tells this communicator's messages from those of others with
	// members in common (Dup, Split and CartCreate give each new one its
	// own); the communicator Spawn makes is 0.
	ID int `msgpack:",omitempty"`
	// Dims and Periods are the Cartesian topology CartCreate gave it:
	// the extent of each dimension, row-major (the last varies fastest),
	// and whether it wraps.
	Dims    []int  `msgpack:",omitempty"`
	Periods []bool `msgpack:",omitempty"`
	// Reqs are the non-blocking operations started and not yet completed,
	// and those completed since the last safe point (for replay); LastReq
	// is the number of the last one started.
	Reqs    []ReqState `msgpack:",omitempty"`
	LastReq int        `msgpack:",omitempty"`
	// StepReq is LastReq at the last safe point: the requests started
	// since are numbered from it on, in order, so a replayed Isend or
	// Irecv knows its number without a record.
	StepReq int `msgpack:",omitempty"`

	next   int         // calls replayed or recorded since Run (re-)entered or the last safe point
	starts int         // requests started or replayed since then
	dst    map[int]any // where each receive request's message is decoded to
	// lazy are results of several parts whose places in Done are
	// placeholders: packed into Done only when the task is checkpointed
	// (flush), so that a call that completes without a checkpoint does not
	// copy them. Emptied, not dropped, at a safe point: a task calling
	// collectives step after step allocates it once.
	lazy []lazyResult
}

// flush packs the results kept in parts into their places in Done.
func (m *Comm) flush() error {
	for _, l := range m.lazy {
		if l.at < len(m.Done) {
			p, err := packParts(l.parts)
			if err != nil {
				return err
			}
			m.Done[l.at] = p
		}
	}
	m.dropLazy()
	return nil
}

// lazyResult is a result of several parts, kept for its place at in Done.
type lazyResult struct {
	at    int
	parts []Payload
}

// dropLazy forgets the lazy results, keeping the slice for the next ones.
func (m *Comm) dropLazy() {
	clear(m.lazy)
	m.lazy = m.lazy[:0]
}

// Size is the number of members.
func (m *Comm) Size() int { return len(m.TIDs) }

// TID is the TID of the member of rank r.
func (m *Comm) TID(r int) TID { return m.TIDs[r] }

// Shift returns the ranks disp places before and after this task's, as
// MPI_Cart_shift does on a line that does not wrap: a SendRecv to dst from
// src moves data disp places up the ranks. A rank past either end is
// NoRank, so the edges of a strip decomposition need no special case.
func (m *Comm) Shift(disp int) (src, dst int) {
	src, dst = m.Rank-disp, m.Rank+disp
	if src < 0 || src >= len(m.TIDs) {
		src = NoRank
	}
	if dst < 0 || dst >= len(m.TIDs) {
		dst = NoRank
	}
	return src, dst
}

// check returns an error unless the communicator is set up and r is a rank
// of it (or NoRank when noneOK).
func (m *Comm) check(what string, ranks ...int) error {
	if len(m.TIDs) == 0 || m.Rank < 0 || m.Rank >= len(m.TIDs) {
		return fmt.Errorf("%s: %w", what, ErrNoComm)
	}
	for _, r := range ranks {
		if r != NoRank && (r < 0 || r >= len(m.TIDs)) {
			return fmt.Errorf("%s: rank %d of a communicator of %d: %w", what, r, len(m.TIDs), ErrNoSuchTask)
		}
	}
	return nil
}

// resetStep forgets the results kept since the last safe point: the task's
// state is a fresh starting point for Run.
func (m *Comm) resetStep() {
	clear(m.Done) // kept for the next step's records, emptied
	m.Done, m.next, m.Overflow = m.Done[:0], 0, false
	m.dropLazy()
	m.StepReq, m.starts = m.LastReq, 0
	m.dropWaited()
}

// replay returns the recorded result of the next call when Run, re-entered,
// has not yet caught up with the calls made before the checkpoint.
func (m *Comm) replay() (Payload, bool) {
	if m.next < len(m.Done) {
		m.next++
		return m.Done[m.next-1], true
	}
	return Payload{}, false
}

// record keeps res as the result of the call just completed, for replay.
func (m *Comm) record(res Payload) {
	if !m.Overflow && len(m.Done) < maxReplay {
		m.Done = append(m.Done, res)
	} else {
		m.Done, m.Overflow = nil, true
		m.dropLazy()
		m.dropWaited()
	}
	m.next++
}

// recordParts is record for a result of several parts, packed only if the
// task is checkpointed before its next safe point.
func (m *Comm) recordParts(parts []Payload) {
	m.record(Payload{})
	if !m.Overflow {
		m.lazy = append(m.lazy, lazyResult{at: len(m.Done) - 1, parts: parts})
	}
}

// Tags of communicator traffic. A communicator of ID k sends its
// collectives' messages on CommTag-k and its point-to-point messages of
// tag t on commP2PBase + k<<15 + t; both ranges lie above every tag below
// commP2PBase, which programs' own messages should use.
const (
	// MaxCommTag is the largest tag of a point-to-point message on a
	// communicator (MPI_TAG_UB).
	MaxCommTag = 1<<15 - 2
	// neighborTag is the tag of the neighbourhood collectives' messages
	// (IneighborAlltoall), above every program's.
	neighborTag = MaxCommTag + 1
	// maxCommID bounds communicator IDs, so that the two ranges of tags
	// stay apart.
	maxCommID   = 1<<14 - 1
	commP2PBase = 1 << 30
)

// collTag is the tag of m's collectives' messages (CommTag for a nil m:
// the set-up message).
func (m *Comm) collTag() int {
	if m == nil {
		return CommTag
	}
	return CommTag - m.ID
}

// p2pTag is the tag of m's point-to-point messages of tag t.
func (m *Comm) p2pTag(t int) int { return commP2PBase + m.ID<<15 + t }

// spawnMembers starts n tasks of proto's type, placed as req says, and
// sends each the communicator's members: lead followed by the new tasks,
// which it returns. With n == 0 it returns lead. On error it kills the
// tasks that did start.
func (c *Ctx) spawnMembers(lead []TID, proto Task, n int, req SpawnRequest) ([]TID, error) {
	if n == 0 {
		return lead, nil
	}
	tids, err := c.spawn(proto, n, req)
	if err == nil {
		all := append(lead, tids...)
		if err = c.Mcast(tids, CommTag, all); err == nil {
			return all, nil
		}
	}
	for _, t := range tids {
		_ = c.Kill(t)
	}
	return nil, err
}

// JoinComm fills m, the communicator field of a task started by Spawn
// with WithComm or Team, with its rank and its peers. It returns at once when m is already set
// (Run re-entered after a move). While it waits for its spawner's message it
// is a safe point.
func (c *Ctx) JoinComm(m *Comm) error {
	if len(m.TIDs) > 0 {
		c.track(m)
		return nil
	}
	if c.Parent().IsZero() {
		return fmt.Errorf("join communicator: a task no other spawned: %w", ErrNoComm)
	}
	p, err := c.recvComm(nil, c.Parent())
	if err != nil {
		return joinErr(err)
	}
	var all []TID
	if err := p.Decode(&all); err != nil {
		return fmt.Errorf("join communicator: %w", err)
	}
	rank := slices.Index(all, c.MyTID())
	if rank < 0 || len(all) > MaxCommSize {
		return fmt.Errorf("join communicator: %v is not among the %d members its spawner sent", c.MyTID(), len(all))
	}
	*m = Comm{Rank: rank, TIDs: all}
	c.track(m)
	return nil
}

// MaxCommSize bounds the members of a communicator a task accepts.
const MaxCommSize = 1 << 20

func joinErr(err error) error {
	if errors.Is(err, ErrSuspended) {
		return err
	}
	return fmt.Errorf("join communicator: %w", err)
}

// track lets SafePoint forget m's kept results.
func (c *Ctx) track(m *Comm) {
	if !slices.Contains(c.comms, m) {
		c.comms = append(c.comms, m)
	}
}

// waitPoint is a safe point inside a wait: the task's state is captured as
// it is, communicators included.
func (c *Ctx) waitPoint() error {
	if c.critical.Load() > 0 {
		return nil
	}
	for _, m := range c.comms {
		if err := m.flush(); err != nil {
			return err
		}
	}
	return c.ep.SafePoint(c.task)
}

// recvComm receives the next communicator message from `from`. It is a
// safe point while it waits, unless m has overflowed or the caller is in a
// critical section. A message already there is taken at once, without
// the bookkeeping of a safe wait: the collective does not wait for it;
// but not while the runtime wants the task at a safe point (StopAsker),
// so that a task whose partners are always ahead of it still stops.
func (c *Ctx) recvComm(m *Comm, from TID) (Payload, error) {
	wait := (m != nil && m.Overflow) || c.critical.Load() > 0
	if !wait && c.sa != nil && c.sa.StopAsked() {
		return c.recvCommSafe(m, from)
	}
	c.enter()
	msg, ok, err := c.ep.Recv(c.ep.Context(), from, m.collTag(), wait)
	c.leave()
	if err != nil {
		return Payload{}, fmt.Errorf("recv from %v: %w", from, err)
	}
	if ok || wait {
		return msg.Payload, nil
	}
	return c.recvCommSafe(m, from)
}

// recvCommSafe waits for the next communicator message from `from` in
// safe waits, stopping at a safe point whenever the runtime asks.
func (c *Ctx) recvCommSafe(m *Comm, from TID) (Payload, error) {
	for {
		c.enter()
		msg, ok, err := c.ep.RecvSafe(c.ep.Context(), from, m.collTag())
		c.leave()
		if err != nil {
			return Payload{}, fmt.Errorf("recv from %v: %w", from, err)
		}
		if ok {
			return msg.Payload, nil
		}
		if err := c.waitPoint(); err != nil {
			return Payload{}, err
		}
	}
}

// sendComm sends p to the members of the given ranks.
func (c *Ctx) sendComm(m *Comm, p Payload, ranks ...int) error {
	if len(ranks) == 1 { // the usual case of a small communicator: no list
		c.enter()
		defer c.leave()
		return c.ep.Send(c.ep.Context(), m.TIDs[ranks[0]], m.collTag(), p)
	}
	to := make([]TID, 0, len(ranks))
	for _, r := range ranks {
		to = append(to, m.TIDs[r])
	}
	if len(to) == 0 {
		return nil
	}
	c.enter()
	defer c.leave()
	return c.ep.Mcast(c.ep.Context(), to, m.collTag(), p)
}

// collective runs one collective on m: send (once, even across a
// checkpoint), receive one message from each rank in from (each kept in m
// as it comes), then result, which turns what was received into the
// collective's result (and may send). replayed is true when the result was
// recorded before Run re-entered. An ErrSuspended comes back unwrapped.
func (m *Comm) collective(c *Ctx, send func() error, from []int, result func(got []Payload) (Payload, error)) (res Payload, replayed bool, err error) {
	c.track(m)
	if p, ok := m.replay(); ok {
		return p, true, nil
	}
	if !m.Sent {
		if send != nil {
			if err := send(); err != nil {
				return Payload{}, false, err
			}
		}
		m.Sent = true
	}
	if len(m.Have) != len(m.TIDs) {
		m.Have, m.Got = make([]bool, len(m.TIDs)), make([]Payload, len(m.TIDs))
	}
	for _, r := range from {
		if r == NoRank || m.Have[r] {
			continue
		}
		p, err := c.recvComm(m, m.TIDs[r])
		if err != nil {
			return Payload{}, false, err
		}
		m.Got[r], m.Have[r] = p, true
	}
	c.enter()
	res, err = result(m.Got)
	c.leave()
	if err != nil {
		return Payload{}, false, err
	}
	// Kept for the next collective, emptied: a task calling collective
	// after collective allocates them once.
	m.Sent = false
	clear(m.Have)
	clear(m.Got)
	m.record(res)
	return res, false, nil
}

// collErr wraps a collective's error, leaving ErrSuspended as it is.
func collErr(what string, err error) error {
	if err == nil || errors.Is(err, ErrSuspended) {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// others lists every rank but skip.
func (m *Comm) others(skip int) []int {
	out := make([]int, 0, len(m.TIDs))
	for r := range m.TIDs {
		if r != skip {
			out = append(out, r)
		}
	}
	return out
}

// Barrier returns once every member has called it: two members tell each
// other, more tell rank 0, which tells them all once it has heard from
// each. It is a safe point while it waits.
func (m *Comm) Barrier(c *Ctx) error {
	if err := m.check("barrier"); err != nil {
		return err
	}
	var send func() error
	var from []int
	result := func([]Payload) (Payload, error) { return Payload{}, nil }
	if m.Size() == 2 {
		// One message each way at once, where the general case takes a
		// round trip through rank 0: both leave when they hear the other.
		peer := 1 - m.Rank
		send = func() error { return c.sendComm(m, Payload{}, peer) }
		from = []int{peer}
	} else if m.Rank == 0 {
		from = m.others(0)
		result = func([]Payload) (Payload, error) { return Payload{}, c.sendComm(m, Payload{}, m.others(0)...) }
	} else {
		send = func() error { return c.sendComm(m, Payload{}, 0) }
		from = []int{0}
	}
	_, _, err := m.collective(c, send, from, result)
	return collErr("barrier", err)
}

// Bcast gives every member root's value: root and receivers call it alike,
// with a pointer to the value (root's is sent, the others' is decoded into).
// It is a safe point while it waits.
func (m *Comm) Bcast(c *Ctx, v any, root int) error {
	if err := m.check("bcast", root); err != nil {
		return err
	}
	if root == NoRank {
		return fmt.Errorf("bcast: no root")
	}
	if m.Rank == root {
		p, err := Encode(sliceOf(v)) // a pointer to a numeric slice travels raw
		if err != nil {
			return fmt.Errorf("bcast: %w", err)
		}
		_, _, err = m.collective(c, nil, nil, func([]Payload) (Payload, error) {
			return Payload{}, c.sendComm(m, p, m.others(root)...)
		})
		return collErr("bcast", err)
	}
	p, _, err := m.collective(c, nil, []int{root}, func(got []Payload) (Payload, error) { return got[root], nil })
	if err != nil {
		return collErr("bcast", err)
	}
	return p.Decode(v)
}

// SendRecv sends send to the member of rank to and receives, into recv (a
// pointer), what the member of rank from sends; either rank may be NoRank.
// Pairs of SendRecv calls never deadlock, whatever the order in which the
// members make them. It is a safe point while it waits.
func (m *Comm) SendRecv(c *Ctx, to int, send any, from int, recv any) error {
	if err := m.check("sendrecv", to, from); err != nil {
		return err
	}
	var p Payload
	if to != NoRank {
		var err error
		if p, err = Encode(send); err != nil {
			return fmt.Errorf("sendrecv: %w", err)
		}
	}
	got, _, err := m.collective(c,
		func() error {
			if to == NoRank {
				return nil
			}
			return c.sendComm(m, p, to)
		},
		[]int{from},
		func(got []Payload) (Payload, error) {
			if from == NoRank {
				return Payload{}, nil
			}
			return got[from], nil
		})
	if err != nil {
		return collErr("sendrecv", err)
	}
	if from == NoRank {
		return nil
	}
	return got.Decode(recv)
}

// AllReduce combines data element-wise across the members with op (Sum,
// Product, Min, Max, or a function of your own that folds in into acc) and
// leaves the result in every member's data. Every member calls it with
// data of the same length. Contributions are combined in rank order, so the
// result is the same on every run and on every member: two members send
// each other their data, more send theirs to rank 0, which sends back the
// result. It is a safe point while it waits.
func AllReduce[T any](c *Ctx, m *Comm, op func(acc, in []T), data []T) error {
	if err := m.check("allreduce"); err != nil {
		return err
	}
	if m.Size() == 2 {
		return allReduce2(c, m, op, data)
	}
	var (
		send   func() error
		from   []int
		result func([]Payload) (Payload, error)
	)
	if m.Rank == 0 {
		from = m.others(0)
		result = func(got []Payload) (Payload, error) {
			acc := append(make([]T, 0, len(data)), data...)
			var in []T
			for r := 1; r < len(got); r++ {
				in = in[:0]
				if err := got[r].Decode(&in); err != nil {
					return Payload{}, err
				}
				if len(in) != len(acc) {
					return Payload{}, fmt.Errorf("rank %d sent %d elements, want %d", r, len(in), len(acc))
				}
				op(acc, in)
			}
			p, err := Encode(acc)
			if err != nil {
				return Payload{}, err
			}
			copy(data, acc)
			return p, c.sendComm(m, p, from...)
		}
	} else {
		p, err := Encode(data)
		if err != nil {
			return fmt.Errorf("allreduce: %w", err)
		}
		send = func() error { return c.sendComm(m, p, 0) }
		from = []int{0}
		result = func(got []Payload) (Payload, error) { return got[0], nil }
	}
	p, replayed, err := m.collective(c, send, from, result)
	if err != nil {
		return collErr("allreduce", err)
	}
	if m.Rank == 0 && !replayed {
		return nil
	}
	// A numeric result of data's length decodes into data's own array;
	// anything else decodes aside, leaving data as it was on error.
	if err := decodeSame(p, data); err != nil {
		return fmt.Errorf("allreduce: %w", err)
	}
	return nil
}

// allReduce2 is AllReduce on two members: each sends the other its data
// and both combine the two in rank order, one message each way at once
// where the general case takes a round trip through rank 0. What was
// received is read in place; the two parts are the replay's record.
func allReduce2[T any](c *Ctx, m *Comm, op func(acc, in []T), data []T) error {
	p, err := Encode(data)
	if err != nil {
		return fmt.Errorf("allreduce: %w", err)
	}
	peer := 1 - m.Rank
	parts, err := m.exchange(c, func() error { return c.sendComm(m, p, peer) }, []int{peer}, p)
	if err != nil {
		return collErr("allreduce", err)
	}
	// data becomes rank 0's part (on rank 0 it is already: a replay passes
	// the same data), then rank 1's is folded in.
	if m.Rank == 1 {
		if err := decodeSame(parts[0], data); err != nil {
			return fmt.Errorf("allreduce: rank 0: %w", err)
		}
	}
	in, ok := viewOf[T](parts[1])
	if !ok {
		if in, err = decodeAs[T](parts[1]); err != nil {
			return fmt.Errorf("allreduce: rank 1: %w", err)
		}
	}
	if len(in) != len(data) {
		return fmt.Errorf("allreduce: rank 1 sent %d elements, want %d", len(in), len(data))
	}
	op(data, in)
	return nil
}

// Gather collects every member's data at root, concatenated in rank
// order: root gets the result, the others nil. It is a safe point while it
// waits.
func Gather[T any](c *Ctx, m *Comm, data []T, root int) ([]T, error) {
	if err := m.check("gather", root); err != nil {
		return nil, err
	}
	if m.Rank != root {
		p, err := Encode(data)
		if err != nil {
			return nil, fmt.Errorf("gather: %w", err)
		}
		_, _, err = m.collective(c, func() error { return c.sendComm(m, p, root) }, nil,
			func([]Payload) (Payload, error) { return Payload{}, nil })
		return nil, collErr("gather", err)
	}
	var out []T
	p, replayed, err := m.collective(c, nil, m.others(root), func(got []Payload) (Payload, error) {
		var in []T
		for r := range got {
			if r == root {
				out = append(out, data...)
				continue
			}
			in = in[:0]
			if err := got[r].Decode(&in); err != nil {
				return Payload{}, err
			}
			out = append(out, in...)
		}
		return Encode(out)
	})
	if err != nil {
		return nil, collErr("gather", err)
	}
	if replayed {
		out = nil
		if err := p.Decode(&out); err != nil {
			return nil, fmt.Errorf("gather: %w", err)
		}
	}
	return out, nil
}

// Scatter hands out consecutive, equal chunks of root's data to the
// members in rank order and returns the caller's chunk. Only root's data is
// read; its length must be a multiple of the size. It is a safe point while
// it waits.
func Scatter[T any](c *Ctx, m *Comm, data []T, root int) ([]T, error) {
	if err := m.check("scatter", root); err != nil {
		return nil, err
	}
	var p Payload
	var err error
	if m.Rank == root {
		n := m.Size()
		if len(data)%n != 0 {
			return nil, fmt.Errorf("scatter: %d elements for %d members", len(data), n)
		}
		k := len(data) / n
		p, _, err = m.collective(c, nil, nil, func([]Payload) (Payload, error) {
			for r := range n {
				if r == root {
					continue
				}
				chunk, err := Encode(data[r*k : (r+1)*k])
				if err != nil {
					return Payload{}, err
				}
				if err := c.sendComm(m, chunk, r); err != nil {
					return Payload{}, err
				}
			}
			return Encode(data[root*k : (root+1)*k])
		})
	} else {
		p, _, err = m.collective(c, nil, []int{root}, func(got []Payload) (Payload, error) { return got[root], nil })
	}
	if err != nil {
		return nil, collErr("scatter", err)
	}
	var out []T
	if err := p.Decode(&out); err != nil {
		return nil, fmt.Errorf("scatter: %w", err)
	}
	return out, nil
}
