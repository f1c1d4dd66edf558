package task

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// AnyRank stands for any member in Irecv (MPI_ANY_SOURCE).
const AnyRank = -2

// Request names a non-blocking operation on a communicator (an MPI
// request): Isend and Irecv return one, Wait, Waitall, Waitany and Test
// complete it. It is a number, kept with the operation's state in the
// communicator, so it may be kept in a task's fields. The zero Request is
// no operation (MPI_REQUEST_NULL): waiting for it returns at once.
type Request int

// ReqState is the state of a non-blocking operation, kept in its
// communicator (and so in the task's checkpoints): what it waits for, and
// once complete, the message it received.
type ReqState struct {
	ID   int
	Send bool `msgpack:",omitempty"` // an Isend: complete from the start
	Peer int  // the rank received from, or AnyRank
	Tag  int  // the tag received, or AnyTag
	// Done is set when the operation is complete: From and Got are the
	// sender's rank, tag and message. Waited is set once Wait (or Test,
	// Waitany, Waitall) has reported it.
	Done   bool    `msgpack:",omitempty"`
	Waited bool    `msgpack:",omitempty"`
	From   int     `msgpack:",omitempty"`
	GotTag int     `msgpack:",omitempty"`
	Got    Payload `msgpack:",omitempty"`
	// Of lists the requests a request of several (IneighborAlltoall's)
	// stands for: it is complete when they all are.
	Of []int `msgpack:",omitempty"`
}

// CommStatus describes a completed receive on a communicator.
type CommStatus struct {
	From int // the sender's rank
	Tag  int // the message's tag
	Len  int // the encoded body's size in bytes
}

// maxRequests bounds the operations a communicator keeps.
const maxRequests = 1 << 16

// dropWaited forgets the operations already reported.
func (m *Comm) dropWaited() {
	m.Reqs = slices.DeleteFunc(m.Reqs, func(r ReqState) bool { return r.Waited })
	for id := range m.dst {
		if m.req(Request(id)) == nil {
			delete(m.dst, id)
		}
	}
}

// req returns the state of request r, or nil.
func (m *Comm) req(r Request) *ReqState {
	for i := range m.Reqs {
		if m.Reqs[i].ID == int(r) {
			return &m.Reqs[i]
		}
	}
	return nil
}

// pendingRecv reports whether a receive request is outstanding.
func (m *Comm) pendingRecv() bool {
	for i := range m.Reqs {
		if !m.Reqs[i].Done {
			return true
		}
	}
	return false
}

// start records a new request and returns it; on replay it returns the
// request the same call made before the checkpoint: requests are numbered
// in order from StepReq on, so the record is only a place in Done.
func (m *Comm) start(rs ReqState) (Request, error) {
	if _, ok := m.replay(); ok {
		m.starts++
		return Request(m.StepReq + m.starts), nil
	}
	if len(m.Reqs) >= maxRequests {
		return 0, fmt.Errorf("%d operations outstanding on a communicator: complete some first", len(m.Reqs))
	}
	m.LastReq++
	m.starts++
	rs.ID = m.LastReq
	m.Reqs = append(m.Reqs, rs)
	m.record(Payload{})
	return Request(rs.ID), nil
}

// smallInts holds the int64s -1 to 254, little-endian, for the records
// of Waitany's choices: a record of a small choice allocates nothing.
var smallInts = func() []byte {
	b := make([]byte, 0, 8*256)
	for i := -1; i < 255; i++ {
		b = binary.LittleEndian.AppendUint64(b, uint64(int64(i)))
	}
	return b
}()

// choicePayload is the record of Waitany's choice i.
func choicePayload(i int) Payload {
	if i >= -1 && i < 255 {
		k := 8 * (i + 1)
		return Payload{Enc: EncInt64s, Data: smallInts[k : k+8 : k+8]}
	}
	p, _ := Encode([]int64{int64(i)})
	return p
}

// Isend sends v to the member of rank to with tag (0..MaxCommTag), as
// MPI_Isend: v is encoded and sent before Isend returns (waiting for room
// in the receiver's mailbox as Send does), so the caller may reuse it, and
// the request is complete at once. Messages on a communicator are its
// own: only its Irecv calls receive them.
func (m *Comm) Isend(c *Ctx, to, tag int, v any) (Request, error) {
	return m.isend(c, to, tag, MaxCommTag, v)
}

// isend is Isend with tags up to maxTag (neighborTag for a neighbourhood
// collective's messages).
func (m *Comm) isend(c *Ctx, to, tag, maxTag int, v any) (Request, error) {
	if err := m.check("isend", to); err != nil {
		return 0, err
	}
	if to == NoRank || tag < 0 || tag > maxTag {
		return 0, fmt.Errorf("isend to rank %d tag %d: %w", to, tag, ErrBadTag)
	}
	c.track(m)
	if m.next < len(m.Done) { // sent before the checkpoint
		return m.start(ReqState{})
	}
	p, err := Encode(v)
	if err != nil {
		return 0, fmt.Errorf("isend: %w", err)
	}
	c.enter()
	err = c.ep.Send(c.ep.Context(), m.TIDs[to], m.p2pTag(tag), p)
	c.leave()
	if err != nil {
		return 0, fmt.Errorf("isend to rank %d tag %d: %w", to, tag, err)
	}
	return m.start(ReqState{Send: true, Peer: to, Tag: tag, Done: true, From: m.Rank})
}

// Irecv starts receiving, into v (a pointer, or nil to discard the
// body), the next message from the member of rank from (or AnyRank) with
// tag (or AnyTag) sent on this communicator, as MPI_Irecv. Receive
// requests whose patterns both match a message take it in the order they
// were started. The message is decoded into v when Wait, Waitall, Waitany
// or Test reports the request complete.
//
// v must stay valid until then, within this run of Run: after a move Run
// re-enters and its Irecv calls since the last SafePoint are replayed,
// each getting its request back with the new v. A SafePoint call while a
// receive is outstanding is therefore not a safe point (it returns nil at
// once, as in a critical section); the waits in Wait, Waitall and Waitany
// are safe points.
func (m *Comm) Irecv(c *Ctx, from, tag int, v any) (Request, error) {
	return m.irecv(c, from, tag, MaxCommTag, v)
}

// irecv is Irecv with tags up to maxTag (neighborTag for a neighbourhood
// collective's messages).
func (m *Comm) irecv(c *Ctx, from, tag, maxTag int, v any) (Request, error) {
	if err := m.check("irecv"); err != nil {
		return 0, err
	}
	if from != AnyRank && (from < 0 || from >= len(m.TIDs)) {
		return 0, fmt.Errorf("irecv from rank %d of a communicator of %d: %w", from, len(m.TIDs), ErrNoSuchTask)
	}
	if tag != AnyTag && (tag < 0 || tag > maxTag) {
		return 0, fmt.Errorf("irecv tag %d: %w", tag, ErrBadTag)
	}
	if c.fr == nil {
		return 0, fmt.Errorf("irecv: this runtime cannot receive by predicate")
	}
	c.track(m)
	r, err := m.start(ReqState{Peer: from, Tag: tag})
	if err != nil {
		return 0, fmt.Errorf("irecv: %w", err)
	}
	if v != nil {
		if m.dst == nil {
			m.dst = map[int]any{}
		}
		m.dst[int(r)] = v
	}
	return r, nil
}

// rankOf returns the rank of tid, or -1.
func (m *Comm) rankOf(tid TID) int { return slices.Index(m.TIDs, tid) }

// matchReq reports whether the message of status st is one receive request
// rs waits for.
func (m *Comm) matchReq(rs *ReqState, st Status) bool {
	if rs.Done || rs.Of != nil {
		return false
	}
	t := st.Tag - m.p2pTag(0)
	if t < 0 || t > neighborTag || (rs.Tag == AnyTag && t > MaxCommTag) || (rs.Tag != AnyTag && rs.Tag != t) {
		return false
	}
	return rs.Peer == AnyRank || m.TIDs[rs.Peer] == st.From
}

// progress receives one message that an outstanding receive request waits
// for and completes the oldest such request with it. With wait false it
// returns false when no such message is there; otherwise it waits, a safe
// point while it does (unless in a critical section or past the replay
// log's bound), and returns false after the task was checkpointed there
// with no error (the caller loops) — or ErrSuspended when it must return.
func (m *Comm) progress(c *Ctx, wait bool) (bool, error) {
	fr := c.fr // Irecv checked that the endpoint has it
	match := func(st Status) bool {
		for i := range m.Reqs {
			if m.matchReq(&m.Reqs[i], st) {
				return true
			}
		}
		return false
	}
	from := AnyTask
	var msg Message
	var ok bool
	var err error
	c.enter()
	switch {
	case !wait:
		msg, ok, err = fr.RecvFunc(c.ep.Context(), from, AnyTag, match, false)
	case m.Overflow || c.critical.Load() > 1:
		msg, ok, err = fr.RecvFunc(c.ep.Context(), from, AnyTag, match, true)
	default:
		msg, ok, err = fr.RecvFuncSafe(c.ep.Context(), from, AnyTag, match)
	}
	c.leave()
	if err != nil {
		return false, fmt.Errorf("wait: %w", err)
	}
	if !ok {
		if wait {
			return false, c.waitPoint()
		}
		return false, nil
	}
	st := msg.Status()
	for i := range m.Reqs {
		rs := &m.Reqs[i]
		if m.matchReq(rs, st) {
			rs.Done, rs.From, rs.GotTag, rs.Got = true, m.rankOf(msg.From), st.Tag-m.p2pTag(0), msg.Payload
			return true, nil
		}
	}
	return false, fmt.Errorf("wait: a message from %v tag %d no request waits for", msg.From, msg.Tag)
}

// finish reports request rs complete: it decodes its message into the
// destination its Irecv gave in this run of Run (again after a replay),
// and marks it waited.
func (m *Comm) finish(rs *ReqState) (CommStatus, error) {
	rs.Waited = true
	st := CommStatus{From: rs.From, Tag: rs.Tag, Len: len(rs.Got.Data)}
	if rs.Send {
		return st, nil
	}
	st.Tag = rs.GotTag
	if v, ok := m.dst[rs.ID]; ok {
		delete(m.dst, rs.ID)
		if err := rs.Got.Decode(v); err != nil {
			return st, fmt.Errorf("message from rank %d tag %d: %w", rs.From, rs.GotTag, err)
		}
	}
	return st, nil
}

// Wait blocks until request r is complete (MPI_Wait) and reports the
// message it received; it is a safe point while it waits. The zero
// Request returns at once, and so does one already reported (by Test,
// say), with its status while the communicator keeps it (until the next
// safe point).
func (m *Comm) Wait(c *Ctx, r Request) (CommStatus, error) {
	if r == 0 {
		return CommStatus{}, nil
	}
	if r < 0 || int(r) > m.LastReq {
		return CommStatus{}, fmt.Errorf("wait: no request %d on this communicator", r)
	}
	if s := m.req(r); s != nil && s.Of != nil {
		return CommStatus{}, m.waitOf(c, r)
	}
	one := [1]Request{r}
	_, st, err := m.waitAny(c, one[:], true)
	return st, err
}

// Waitall blocks until every request in rs is complete (MPI_Waitall); it
// is a safe point while it waits.
func (m *Comm) Waitall(c *Ctx, rs ...Request) error {
	for _, r := range rs {
		if _, err := m.Wait(c, r); err != nil {
			return err
		}
	}
	return nil
}

// Waitany blocks until one of the requests in rs is complete
// (MPI_Waitany) and returns its index in rs (the lowest, if several are),
// or -1 when none is left to report; it is a safe point while it waits.
// Replayed after a move, it returns what it returned before.
func (m *Comm) Waitany(c *Ctx, rs ...Request) (int, CommStatus, error) {
	for _, r := range rs {
		if s := m.req(r); s != nil && s.Of != nil {
			return -1, CommStatus{}, fmt.Errorf("waitany: request %d is a neighbourhood collective's: complete it with Wait, Waitall or Test", r)
		}
	}
	return m.waitAny(c, rs, false)
}

// waitAny is Waitany, and with single Wait, which also returns a request
// already reported; its choice is recorded for replay.
func (m *Comm) waitAny(c *Ctx, rs []Request, single bool) (int, CommStatus, error) {
	if err := m.check("wait"); err != nil {
		return -1, CommStatus{}, err
	}
	c.track(m)
	if p, ok := m.replay(); ok {
		var idx []int64
		if err := p.Decode(&idx); err != nil || len(idx) != 1 {
			return -1, CommStatus{}, fmt.Errorf("wait: replayed choice: %v", err)
		}
		i := int(idx[0])
		if i < 0 {
			return -1, CommStatus{}, nil
		}
		if i >= len(rs) {
			return -1, CommStatus{}, fmt.Errorf("wait: replayed choice %d of %d requests", i, len(rs))
		}
		s := m.req(rs[i])
		if s == nil { // reported and forgotten before
			return i, CommStatus{}, nil
		}
		st, err := m.finish(s)
		return i, st, err
	}
	for {
		live := false
		for i, r := range rs {
			s := m.req(r)
			if single && r != 0 && s == nil { // reported and forgotten before
				m.record(choicePayload(i))
				return i, CommStatus{}, nil
			}
			if r == 0 || s == nil || (s.Waited && !single) {
				continue
			}
			live = true
			if s.Done {
				st, err := m.finish(s) // before record, which may drop s
				m.record(choicePayload(i))
				return i, st, err
			}
		}
		if !live {
			m.record(choicePayload(-1))
			return -1, CommStatus{}, nil
		}
		if _, err := m.progress(c, true); err != nil {
			return -1, CommStatus{}, collErr("wait", err)
		}
	}
}

// Test reports whether request r is complete (MPI_Test), receiving what
// has arrived without waiting; when it is, it reports the message as Wait
// does. Test is not recorded for replay: a polling loop may call it any
// number of times.
func (m *Comm) Test(c *Ctx, r Request) (bool, CommStatus, error) {
	if r == 0 {
		return true, CommStatus{}, nil
	}
	s := m.req(r)
	if s == nil {
		return false, CommStatus{}, fmt.Errorf("test: no request %d on this communicator", r)
	}
	if s.Of != nil {
		return m.testOf(c, r)
	}
	for !s.Done {
		ok, err := m.progress(c, false)
		if err != nil {
			return false, CommStatus{}, err
		}
		if !ok {
			return false, CommStatus{}, nil
		}
		s = m.req(r)
	}
	st, err := m.finish(s)
	return true, st, err
}
