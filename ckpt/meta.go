package ckpt

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// Meta is everything in a checkpoint besides the task's state: who the
// task is, where it moves to, and the runtime state the daemon keeps on its
// behalf (mailbox, sequence numbers, groups, notify registrations).
type Meta struct {
	// Type is the task's registered type name. Write fills it in when it is
	// empty and refuses a name that differs from the state's type.
	Type string
	// TID is the task's identity (never zero).
	TID task.TID
	// Parent is the task that spawned it (zero for a root task).
	Parent task.TID
	// Job is the job the task belongs to.
	Job uint64
	// Epoch is the route epoch the task moves to.
	Epoch uint64
	// Mailbox holds the undelivered messages in mailbox order (Seq may be 0
	// for system messages).
	Mailbox []routing.Envelope
	// InSeq is the receiver side: the next sequence number expected from
	// each sender.
	InSeq map[task.TID]uint64
	// Early is the receiver side: arrivals waiting for a gap to fill.
	Early []routing.Envelope
	// OutSeq is the sender side: the last sequence number used towards each
	// receiver.
	OutSeq map[task.TID]uint64
	// Groups are the task's group memberships.
	Groups []Membership
	// Watchers are the tasks to notify when this one exits.
	Watchers []Watcher
	// HostWatches are this task's host-event registrations.
	HostWatches []HostWatch
	// Siblings are the tasks the spawn that started the task started, in
	// spawn order, the task among them (pvm_siblings); nil when unknown
	// (the task then counts as started alone).
	Siblings []task.TID
	// Created is when the checkpoint was taken. It is stored to the
	// nanosecond and read back in UTC, without a monotonic reading.
	Created time.Time
}

// Membership is one group membership: the group's name and the task's
// instance number in it.
type Membership struct {
	Group string
	Inst  int
}

// Watcher is a task to notify, with the given tag, when the checkpointed
// task exits.
type Watcher struct {
	Who task.TID
	Tag int
}

// HostWatch is a host-event registration of the checkpointed task.
type HostWatch struct {
	Kind task.NotifyKind
	Host task.HostID
	Tag  int
}

// The meta section's msgpack layout. Field keys are part of the format:
// add new keys, never rename or reuse one. Maps travel as slices sorted by
// key so that equal metas encode to equal bytes.
type wireMeta struct {
	Type        string      `msgpack:"type"`
	TID         uint64      `msgpack:"tid"`
	Parent      uint64      `msgpack:"parent"`
	Job         uint64      `msgpack:"job"`
	Epoch       uint64      `msgpack:"epoch"`
	Mailbox     []wireEnv   `msgpack:"mailbox"`
	InSeq       []wireSeq   `msgpack:"in_seq"`
	Early       []wireEnv   `msgpack:"early"`
	OutSeq      []wireSeq   `msgpack:"out_seq"`
	Groups      []wireGroup `msgpack:"groups"`
	Watchers    []wireWatch `msgpack:"watchers"`
	HostWatches []wireHostW `msgpack:"host_watches"`
	// Created is [seconds, nanoseconds] since the Unix epoch, absent for
	// the zero time.
	Created []int64 `msgpack:"created,omitempty"`
	// Siblings are TIDs, absent when unknown.
	Siblings []uint64 `msgpack:"siblings,omitempty"`
}

type wireEnv struct {
	//lint:ignore U1000 msgpack reads this field's tag by its name (encode as an array)
	_msgpack struct{} `msgpack:",as_array"`
	From     uint64
	To       uint64
	Seq      uint64
	Tag      int32
	Enc      uint8
	Data     []byte
}

type wireSeq struct {
	//lint:ignore U1000 msgpack reads this field's tag by its name (encode as an array)
	_msgpack struct{} `msgpack:",as_array"`
	Peer     uint64
	Seq      uint64
}

type wireGroup struct {
	//lint:ignore U1000 msgpack reads this field's tag by its name (encode as an array)
	_msgpack struct{} `msgpack:",as_array"`
	Group    string
	Inst     int
}

type wireWatch struct {
	//lint:ignore U1000 msgpack reads this field's tag by its name (encode as an array)
	_msgpack struct{} `msgpack:",as_array"`
	Who      uint64
	Tag      int
}

type wireHostW struct {
	//lint:ignore U1000 msgpack reads this field's tag by its name (encode as an array)
	_msgpack struct{} `msgpack:",as_array"`
	Kind     uint8
	Host     uint32
	Tag      int
}

func toWire(m *Meta) *wireMeta {
	w := &wireMeta{
		Type: m.Type, TID: uint64(m.TID), Parent: uint64(m.Parent), Job: m.Job, Epoch: m.Epoch,
		Mailbox: envsToWire(m.Mailbox), Early: envsToWire(m.Early),
		InSeq: seqsToWire(m.InSeq), OutSeq: seqsToWire(m.OutSeq),
	}
	if m.Groups != nil {
		w.Groups = make([]wireGroup, len(m.Groups))
		for i, g := range m.Groups {
			w.Groups[i] = wireGroup{Group: g.Group, Inst: g.Inst}
		}
	}
	if m.Watchers != nil {
		w.Watchers = make([]wireWatch, len(m.Watchers))
		for i, x := range m.Watchers {
			w.Watchers[i] = wireWatch{Who: uint64(x.Who), Tag: x.Tag}
		}
	}
	if m.HostWatches != nil {
		w.HostWatches = make([]wireHostW, len(m.HostWatches))
		for i, x := range m.HostWatches {
			w.HostWatches[i] = wireHostW{Kind: uint8(x.Kind), Host: uint32(x.Host), Tag: x.Tag}
		}
	}
	if m.Siblings != nil {
		w.Siblings = make([]uint64, len(m.Siblings))
		for i, t := range m.Siblings {
			w.Siblings[i] = uint64(t)
		}
	}
	if !m.Created.IsZero() {
		w.Created = []int64{m.Created.Unix(), int64(m.Created.Nanosecond())}
	}
	return w
}

func envsToWire(es []routing.Envelope) []wireEnv {
	if es == nil {
		return nil
	}
	out := make([]wireEnv, len(es))
	for i, e := range es {
		out[i] = wireEnv{From: uint64(e.From), To: uint64(e.To), Seq: e.Seq, Tag: e.Tag, Enc: uint8(e.Body.Enc), Data: e.Body.Data}
	}
	return out
}

func seqsToWire(m map[task.TID]uint64) []wireSeq {
	if m == nil {
		return nil
	}
	out := make([]wireSeq, 0, len(m))
	for k, v := range m {
		out = append(out, wireSeq{Peer: uint64(k), Seq: v})
	}
	slices.SortFunc(out, func(a, b wireSeq) int { return cmp.Compare(a.Peer, b.Peer) })
	return out
}

// fromWire converts and validates a decoded meta section.
func fromWire(w *wireMeta) (*Meta, error) {
	if w.Type == "" {
		return nil, fmt.Errorf("no task type")
	}
	if w.TID == 0 {
		return nil, fmt.Errorf("zero TID")
	}
	m := &Meta{
		Type: w.Type, TID: task.TID(w.TID), Parent: task.TID(w.Parent), Job: w.Job, Epoch: w.Epoch,
	}
	var err error
	if m.Mailbox, err = envsFromWire(w.Mailbox, "mailbox"); err != nil {
		return nil, err
	}
	if m.Early, err = envsFromWire(w.Early, "early arrivals"); err != nil {
		return nil, err
	}
	if m.InSeq, err = seqsFromWire(w.InSeq, "in_seq"); err != nil {
		return nil, err
	}
	if m.OutSeq, err = seqsFromWire(w.OutSeq, "out_seq"); err != nil {
		return nil, err
	}
	if w.Groups != nil {
		m.Groups = make([]Membership, len(w.Groups))
		for i, g := range w.Groups {
			m.Groups[i] = Membership{Group: g.Group, Inst: g.Inst}
		}
	}
	if w.Watchers != nil {
		m.Watchers = make([]Watcher, len(w.Watchers))
		for i, x := range w.Watchers {
			m.Watchers[i] = Watcher{Who: task.TID(x.Who), Tag: x.Tag}
		}
	}
	if w.HostWatches != nil {
		m.HostWatches = make([]HostWatch, len(w.HostWatches))
		for i, x := range w.HostWatches {
			m.HostWatches[i] = HostWatch{Kind: task.NotifyKind(x.Kind), Host: task.HostID(x.Host), Tag: x.Tag}
		}
	}
	if w.Siblings != nil {
		m.Siblings = make([]task.TID, len(w.Siblings))
		self := false
		for i, t := range w.Siblings {
			if t == 0 {
				return nil, fmt.Errorf("sibling %d: zero TID", i)
			}
			m.Siblings[i] = task.TID(t)
			self = self || t == w.TID
		}
		if !self {
			return nil, fmt.Errorf("task %v is not among its %d siblings", task.TID(w.TID), len(w.Siblings))
		}
	}
	if w.Created != nil {
		if len(w.Created) != 2 || w.Created[1] < 0 || w.Created[1] >= 1e9 {
			return nil, fmt.Errorf("creation time %v: want [seconds, nanoseconds]", w.Created)
		}
		m.Created = time.Unix(w.Created[0], w.Created[1]).UTC()
	}
	return m, nil
}

func envsFromWire(ws []wireEnv, what string) ([]routing.Envelope, error) {
	if ws == nil {
		return nil, nil
	}
	out := make([]routing.Envelope, len(ws))
	for i, w := range ws {
		enc := task.Encoding(w.Enc)
		if !enc.Valid() {
			return nil, fmt.Errorf("%s message %d: unknown body %v", what, i, enc)
		}
		out[i] = routing.Envelope{From: task.TID(w.From), To: task.TID(w.To), Seq: w.Seq, Tag: w.Tag,
			Body: task.Payload{Enc: enc, Data: w.Data}}
	}
	return out, nil
}

func seqsFromWire(ws []wireSeq, what string) (map[task.TID]uint64, error) {
	if ws == nil {
		return nil, nil
	}
	m := make(map[task.TID]uint64, len(ws))
	for _, w := range ws {
		if _, dup := m[task.TID(w.Peer)]; dup {
			return nil, fmt.Errorf("%s: peer %v listed twice", what, task.TID(w.Peer))
		}
		m[task.TID(w.Peer)] = w.Seq
	}
	return m, nil
}
