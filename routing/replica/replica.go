package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Sentinel errors: package-prefixed, for callers to test with errors.Is.
var (
	// ErrNotLeader refuses a proposal made to a replica that does not
	// lead; the refusal names the leader it knows (0: none yet).
	ErrNotLeader = errors.New("replica: not the leader")
	// ErrDropped refuses a proposal raft dropped (a leadership transfer
	// under way, or too many uncommitted bytes); propose again.
	ErrDropped = errors.New("replica: proposal dropped")
	// ErrTooLarge refuses a proposal or message over the Config's bound.
	ErrTooLarge = errors.New("replica: too large")
	// ErrEmpty refuses an empty proposal: empty entries are raft's own.
	ErrEmpty = errors.New("replica: empty proposal")
	// ErrBadMessage rejects a message that is not for this replica, not
	// from a member of its group, or of a kind peers do not send.
	ErrBadMessage = errors.New("replica: bad message")
	// ErrStopped is what a replica answers once raft found its input
	// inconsistent with its log (a commit beyond the log, a snapshot the
	// state machine refused): restart it from its persisted State.
	ErrStopped = errors.New("replica: stopped")
	// ErrBadEvent rejects an Event of an unknown kind.
	ErrBadEvent = errors.New("replica: bad event")
	// ErrConfig is a Config that cannot run.
	ErrConfig = errors.New("replica: bad config")
)

// StateMachine is the application replicated by the group. Apply must be
// deterministic: every replica applies the same entries in the same order
// and must reach the same state and return the same result. Snapshot
// encodes the whole state; Restore replaces the state with a Snapshot's
// (and refuses bytes it cannot read, losing nothing). The entry and the
// snapshot bytes are the replica's: copy what is kept.
type StateMachine interface {
	Apply(index uint64, entry []byte) (result []byte)
	Snapshot() ([]byte, error)
	Restore(snapshot []byte) error
}

// Config is one replica's configuration. The zero value of every field
// but ID and Peers means its default.
type Config struct {
	// ID is this replica's ID, non-zero, one of Peers.
	ID uint64
	// Peers are the IDs of the group's replicas (three or five), the
	// same list on every replica.
	Peers []uint64
	// Tick is raft's logical clock period (default 100 ms): a replica
	// ticks raft once per Tick of the caller's time.
	Tick time.Duration
	// ElectionTimeout (default 8 ticks, 800 ms) is how long a follower
	// waits without hearing from a leader before it campaigns, raft
	// drawing the actual wait from [ElectionTimeout, 2·ElectionTimeout);
	// it is also how long a leader holds its lease without hearing from
	// a quorum (CheckQuorum). Rounded down to whole ticks.
	ElectionTimeout time.Duration
	// HeartbeatInterval (default one Tick) is how often a leader
	// heartbeats; shorter than ElectionTimeout.
	HeartbeatInterval time.Duration
	// SnapshotEvery (default 10,000) is how many applied entries make
	// the replica snapshot its state machine and compact its log.
	SnapshotEvery uint64
	// KeepEntries (default 1,000) is how many entries a compaction
	// keeps behind the snapshot, so that a follower a little behind
	// catches up from the log rather than by the whole snapshot.
	KeepEntries uint64
	// MaxEntryBytes (default 1 MiB) bounds a proposal.
	MaxEntryBytes int
	// MaxMsgBytes (default 64 MiB) bounds an encoded message, a
	// snapshot's included: DecodeMessage refuses longer input before
	// allocating. The state machine's snapshot must fit in it.
	MaxMsgBytes int
	// MaxInflightMsgs (default 256) bounds the appends in flight to one
	// follower.
	MaxInflightMsgs int
	// MaxTicksPerStep (default 2·ElectionTimeout in ticks) bounds the
	// ticks one Step makes up after a stall, so a replica that was not
	// stepped for a long time does not fire a burst of timeouts.
	MaxTicksPerStep int
	// Logger receives raft's log at debug level and above; nil discards.
	Logger *slog.Logger
}

// Default values.
const (
	DefaultTick          = 100 * time.Millisecond
	DefaultElectionTicks = 8
	DefaultSnapshotEvery = 10_000
	DefaultKeepEntries   = 1_000
	DefaultMaxEntryBytes = 1 << 20
	DefaultMaxMsgBytes   = 64 << 20
	DefaultMaxInflight   = 256
)

// WithDefaults returns c with its zero fields set to their defaults, or
// an error (ErrConfig) saying what cannot run.
func (c Config) WithDefaults() (Config, error) {
	if c.Tick == 0 {
		c.Tick = DefaultTick
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = DefaultElectionTicks * c.Tick
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.Tick
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = DefaultSnapshotEvery
	}
	if c.KeepEntries == 0 {
		c.KeepEntries = DefaultKeepEntries
	}
	if c.MaxEntryBytes == 0 {
		c.MaxEntryBytes = DefaultMaxEntryBytes
	}
	if c.MaxMsgBytes == 0 {
		c.MaxMsgBytes = DefaultMaxMsgBytes
	}
	if c.MaxInflightMsgs == 0 {
		c.MaxInflightMsgs = DefaultMaxInflight
	}
	if c.MaxTicksPerStep == 0 && c.Tick > 0 {
		c.MaxTicksPerStep = 2 * c.ElectionTicks()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.ID == 0:
		return c, fmt.Errorf("%w: ID is 0", ErrConfig)
	case !slices.Contains(c.Peers, c.ID):
		return c, fmt.Errorf("%w: ID %d is not one of Peers %v", ErrConfig, c.ID, c.Peers)
	case slices.Contains(c.Peers, 0):
		return c, fmt.Errorf("%w: peer ID 0", ErrConfig)
	case c.Tick <= 0:
		return c, fmt.Errorf("%w: Tick %v", ErrConfig, c.Tick)
	case c.HeartbeatTicks() < 1:
		return c, fmt.Errorf("%w: HeartbeatInterval %v is under a Tick (%v)", ErrConfig, c.HeartbeatInterval, c.Tick)
	case c.ElectionTicks() <= c.HeartbeatTicks():
		return c, fmt.Errorf("%w: ElectionTimeout %v is not over HeartbeatInterval %v in ticks of %v", ErrConfig, c.ElectionTimeout, c.HeartbeatInterval, c.Tick)
	case c.MaxEntryBytes < 0 || c.MaxMsgBytes < c.MaxEntryBytes:
		return c, fmt.Errorf("%w: MaxMsgBytes %d under MaxEntryBytes %d", ErrConfig, c.MaxMsgBytes, c.MaxEntryBytes)
	case c.MaxInflightMsgs < 0 || c.MaxTicksPerStep < 0:
		return c, fmt.Errorf("%w: negative bound", ErrConfig)
	}
	peers := slices.Clone(c.Peers)
	slices.Sort(peers)
	if len(slices.Compact(peers)) != len(c.Peers) {
		return c, fmt.Errorf("%w: Peers %v repeat an ID", ErrConfig, c.Peers)
	}
	return c, nil
}

// ElectionTicks is ElectionTimeout in whole ticks (raft's ElectionTick).
func (c Config) ElectionTicks() int { return int(c.ElectionTimeout / c.Tick) }

// HeartbeatTicks is HeartbeatInterval in whole ticks (raft's
// HeartbeatTick).
func (c Config) HeartbeatTicks() int { return int(c.HeartbeatInterval / c.Tick) }

// FailoverBound is the longest a group with c's timing takes, after its
// leader dies, to have a new leader that has committed (and applied) an
// entry of its term, when the election is not contested (no split vote,
// no vote lost) and every message takes at most delay. The followers
// heard the leader last at most delay after its death; each times out
// less than 2·ElectionTicks whole ticks after that (raft draws the
// timeout from [ElectionTicks, 2·ElectionTicks)), plus a tick of phase;
// then a pre-vote, a vote and the new leader's first append each take a
// round trip. A contested election takes another round of the same
// bound for each extra term it needs. With the defaults (100 ms ticks,
// 800 ms election timeout) it is 1.7 s plus seven message delays.
func (c Config) FailoverBound(delay time.Duration) time.Duration {
	return time.Duration(2*c.ElectionTicks()+1)*c.Tick + 7*delay
}

// EventKind says what an Event brings. Append only: the values are
// recorded in transcripts.
type EventKind uint8

const (
	// EvTick: only time passed (the replica asked for it with Next).
	EvTick EventKind = iota
	// EvMessage: Msg arrived from a peer (decoded by DecodeMessage).
	EvMessage
	// EvPropose: a client proposes Data.
	EvPropose
	// EvSnapshotSent: the shell's report on a MsgSnap it sent to Peer,
	// Failed if it could not.
	EvSnapshotSent
	// EvUnreachable: the shell could not send to Peer.
	EvUnreachable
)

var eventNames = [...]string{"tick", "message", "propose", "snapshot-sent", "unreachable"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", k)
}

// Event is one input to Step.
type Event struct {
	Kind   EventKind
	Msg    *pb.Message // EvMessage
	Data   []byte      // EvPropose
	Peer   uint64      // EvSnapshotSent, EvUnreachable
	Failed bool        // EvSnapshotSent
}

// EffectKind says what an Effect asks of the shell or tells it. Append
// only.
type EffectKind uint8

const (
	// EffPersist: write HardState (if non-nil), Entries (replacing any
	// persisted entries from the first one's index on) and Snapshot (if
	// non-nil, replacing every entry it covers) to stable storage, durably,
	// before performing any effect after it. State.Persist does it in
	// memory.
	EffPersist EffectKind = iota
	// EffSend: send Msg to the replica To (EncodeMessage).
	EffSend
	// EffApplied: the entry at Index, of Term, is committed and applied:
	// Data is what was proposed (empty for raft's own entries, which the
	// state machine does not see) and Result what Apply returned.
	EffApplied
	// EffLeader: the replica now knows Lead (0: none) as the leader at
	// Term.
	EffLeader
	// EffLeading: this replica leads at Term and has applied every entry
	// committed before its term: its state is the group's, and the
	// shell may act on it until the next EffLeader.
	EffLeading
	// EffAccepted: the proposal (Data) is appended at Index in Term; it
	// is done when EffApplied reports Index with the same Term, and lost
	// if Index is applied with another Term (propose it again).
	EffAccepted
	// EffRefused: the proposal (Data) was refused with Err; Lead is the
	// leader this replica knows at Term (0: none), for the client to
	// propose to instead.
	EffRefused
	// EffSnapshot: the replica snapshotted its state machine at
	// Snapshot's index and compacted its log: persist Snapshot
	// (State.Persist); persisted entries it covers may be discarded.
	EffSnapshot
	// EffRejected: a message or event was rejected with Err; nothing
	// changed.
	EffRejected
	// EffStopped: the replica stopped (Err wraps ErrStopped): restart
	// it from its persisted State.
	EffStopped
)

var effectNames = [...]string{"persist", "send", "applied", "leader", "leading", "accepted", "refused", "snapshot", "rejected", "stopped"}

func (k EffectKind) String() string {
	if int(k) < len(effectNames) {
		return effectNames[k]
	}
	return fmt.Sprintf("effect(%d)", k)
}

// Effect is one output of Step; which fields are set depends on Kind.
type Effect struct {
	Kind      EffectKind
	To        uint64        // EffSend
	Msg       *pb.Message   // EffSend
	HardState *pb.HardState // EffPersist
	Entries   []*pb.Entry   // EffPersist
	Snapshot  *pb.Snapshot  // EffPersist, EffSnapshot
	Index     uint64        // EffApplied, EffAccepted
	Term      uint64        // EffApplied, EffLeader, EffLeading, EffAccepted, EffRefused
	Lead      uint64        // EffLeader, EffRefused
	Data      []byte        // EffApplied, EffAccepted, EffRefused
	Result    []byte        // EffApplied
	Err       error         // EffRefused, EffRejected, EffStopped
}

func (e Effect) String() string {
	switch e.Kind {
	case EffPersist:
		return fmt.Sprintf("persist hs=%s ents=%d snap=%d", raft.DescribeHardState(e.HardState), len(e.Entries), e.Snapshot.GetMetadata().GetIndex())
	case EffSend:
		return fmt.Sprintf("send %d %s", e.To, raft.DescribeMessage(e.Msg, nil))
	case EffApplied:
		return fmt.Sprintf("applied %d/%d %q -> %q", e.Index, e.Term, e.Data, e.Result)
	case EffLeader:
		return fmt.Sprintf("leader %d term %d", e.Lead, e.Term)
	case EffLeading:
		return fmt.Sprintf("leading term %d", e.Term)
	case EffAccepted:
		return fmt.Sprintf("accepted %d/%d %q", e.Index, e.Term, e.Data)
	case EffRefused:
		return fmt.Sprintf("refused %q: %v (leader %d term %d)", e.Data, e.Err, e.Lead, e.Term)
	case EffSnapshot:
		return fmt.Sprintf("snapshot %d/%d (%d bytes)", e.Snapshot.GetMetadata().GetIndex(), e.Snapshot.GetMetadata().GetTerm(), len(e.Snapshot.GetData()))
	case EffRejected, EffStopped:
		return fmt.Sprintf("%v: %v", e.Kind, e.Err)
	}
	return e.Kind.String()
}

// Replica is one member of a replicated state machine: raft's RawNode
// over an in-memory copy of its log (raft.MemoryStorage), the
// application's StateMachine, and the clock of ticks. It performs no
// I/O, starts no goroutine and reads no clock; it is not safe for
// concurrent use.
type Replica struct {
	cfg     Config
	rn      *raft.RawNode
	storage *raft.MemoryStorage
	sm      StateMachine
	cs      *pb.ConfState

	nextTick time.Time // zero until the first Step

	lead, term uint64         // what the last EffLeader said
	state      raft.StateType // raft's role
	leading    bool           // EffLeading said for term
	applied    uint64         // the last index applied
	snapIndex  uint64         // the index of the latest snapshot
	last       uint64         // the last index in the log

	effs []Effect
	err  error // set once stopped
}

// New makes a replica from cfg, its state machine sm (fresh, as made at
// the start) and st, what the replica persisted before (the zero State
// for its first start). Every replica of a group starts from the same
// bootstrap: the group's configuration at index 0.
func New(cfg Config, sm StateMachine, st State) (*Replica, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	storage := raft.NewMemoryStorage()
	snap := st.Snapshot
	if raft.IsEmptySnap(snap) {
		snap = &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
			ConfState: &pb.ConfState{Voters: slices.Clone(cfg.Peers)},
			Index:     new(uint64(0)), Term: new(uint64(0)),
		}}
	} else if err := sm.Restore(snap.GetData()); err != nil {
		return nil, fmt.Errorf("replica %d: restore snapshot %d: %w", cfg.ID, snap.GetMetadata().GetIndex(), err)
	}
	if err := storage.ApplySnapshot(snap); err != nil {
		return nil, fmt.Errorf("replica %d: snapshot: %w", cfg.ID, err)
	}
	idx := snap.GetMetadata().GetIndex()
	var ents []*pb.Entry
	for _, e := range st.Entries {
		if e.GetIndex() > idx {
			ents = append(ents, e)
		}
	}
	for i, e := range ents {
		if e.GetIndex() != idx+uint64(i)+1 {
			return nil, fmt.Errorf("replica %d: persisted entry %d where %d was due", cfg.ID, e.GetIndex(), idx+uint64(i)+1)
		}
	}
	if err := storage.Append(ents); err != nil {
		return nil, fmt.Errorf("replica %d: entries: %w", cfg.ID, err)
	}
	if st.HardState != nil {
		if err := storage.SetHardState(st.HardState); err != nil {
			return nil, fmt.Errorf("replica %d: hard state: %w", cfg.ID, err)
		}
	}
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        cfg.ID,
		ElectionTick:              cfg.ElectionTicks(),
		HeartbeatTick:             cfg.HeartbeatTicks(),
		Storage:                   storage,
		Applied:                   idx,
		MaxSizePerMsg:             uint64(cfg.MaxEntryBytes),
		MaxInflightMsgs:           cfg.MaxInflightMsgs,
		MaxUncommittedEntriesSize: uint64(cfg.MaxMsgBytes),
		CheckQuorum:               true,
		PreVote:                   true,
		DisableProposalForwarding: true,
		Logger:                    newLogger(cfg.Logger, cfg.ID),
	})
	if err != nil {
		return nil, fmt.Errorf("replica %d: %w", cfg.ID, err)
	}
	last, _ := storage.LastIndex()
	return &Replica{
		cfg: cfg, rn: rn, storage: storage, sm: sm,
		cs:      snap.GetMetadata().GetConfState(),
		applied: idx, snapIndex: idx, last: last,
		state: raft.StateFollower, term: st.HardState.GetTerm(),
	}, nil
}

// Config returns the replica's configuration, defaults filled in.
func (r *Replica) Config() Config { return r.cfg }

// ID returns the replica's ID.
func (r *Replica) ID() uint64 { return r.cfg.ID }

// Leader returns the leader this replica knows (0: none) and the term.
func (r *Replica) Leader() (lead, term uint64) { return r.lead, r.term }

// Leading says whether this replica leads and has applied every entry
// committed before its term (EffLeading).
func (r *Replica) Leading() bool { return r.leading }

// Applied returns the index of the last entry applied.
func (r *Replica) Applied() uint64 { return r.applied }

// SnapshotIndex returns the index of the replica's latest snapshot.
func (r *Replica) SnapshotIndex() uint64 { return r.snapIndex }

// Next returns when the replica must be stepped next (with EvTick if
// nothing else comes): its next tick. The zero time before the first
// Step.
func (r *Replica) Next() time.Time { return r.nextTick }

// Step feeds the replica one event at time now and returns what the
// shell must do, in order: an EffPersist must be durable before any
// effect after it is performed (raft's rule: persist before you send).
func (r *Replica) Step(now time.Time, ev Event) (effs []Effect) {
	if r.err != nil {
		return []Effect{{Kind: EffStopped, Err: r.err}}
	}
	r.effs = nil
	defer func() {
		// raft panics when its input contradicts its log (a peer's commit
		// beyond it, say): the replica stops, the shell restarts it from
		// what it persisted, which the panic never reached.
		if p := recover(); p != nil {
			r.stop(fmt.Errorf("%w: replica %d: %v", ErrStopped, r.cfg.ID, p))
			effs = r.effs
		}
	}()
	r.clock(now)
	r.drain()
	switch ev.Kind {
	case EvTick:
	case EvMessage:
		r.receive(ev.Msg)
	case EvPropose:
		r.propose(ev.Data)
	case EvSnapshotSent:
		status := raft.SnapshotFinish
		if ev.Failed {
			status = raft.SnapshotFailure
		}
		r.rn.ReportSnapshot(ev.Peer, status)
	case EvUnreachable:
		r.rn.ReportUnreachable(ev.Peer)
	default:
		r.reject(fmt.Errorf("%w: %v", ErrBadEvent, ev.Kind))
	}
	r.drain()
	return r.effs
}

func (r *Replica) stop(err error) {
	r.err = err
	r.effs = append(r.effs, Effect{Kind: EffStopped, Err: err})
}

// clock ticks raft once for each Tick of the caller's time since the
// last, MaxTicksPerStep at most.
func (r *Replica) clock(now time.Time) {
	if r.nextTick.IsZero() {
		r.nextTick = now.Add(r.cfg.Tick)
		return
	}
	for n := 0; !now.Before(r.nextTick); n++ {
		if n == r.cfg.MaxTicksPerStep {
			r.nextTick = now.Add(r.cfg.Tick)
			return
		}
		r.rn.Tick()
		r.nextTick = r.nextTick.Add(r.cfg.Tick)
	}
}

func (r *Replica) receive(m *pb.Message) {
	switch {
	case m == nil:
		r.reject(fmt.Errorf("%w: nil", ErrBadMessage))
		return
	case m.GetTo() != r.cfg.ID:
		r.reject(fmt.Errorf("%w: %v to %d, not to %d", ErrBadMessage, m.GetType(), m.GetTo(), r.cfg.ID))
		return
	case m.GetFrom() == r.cfg.ID || !slices.Contains(r.cfg.Peers, m.GetFrom()):
		r.reject(fmt.Errorf("%w: %v from %d, not a peer", ErrBadMessage, m.GetType(), m.GetFrom()))
		return
	case !peerType(m.GetType()):
		r.reject(fmt.Errorf("%w: %v is not sent between replicas", ErrBadMessage, m.GetType()))
		return
	}
	if err := r.rn.Step(m); err != nil {
		r.reject(fmt.Errorf("%w: %v from %d: %w", ErrBadMessage, m.GetType(), m.GetFrom(), err))
	}
}

func (r *Replica) reject(err error) {
	r.effs = append(r.effs, Effect{Kind: EffRejected, Err: err})
}

func (r *Replica) propose(data []byte) {
	refuse := func(err error) {
		r.effs = append(r.effs, Effect{Kind: EffRefused, Data: data, Lead: r.lead, Term: r.term, Err: err})
	}
	switch {
	case len(data) == 0:
		refuse(ErrEmpty)
	case len(data) > r.cfg.MaxEntryBytes:
		refuse(fmt.Errorf("%w: proposal of %d bytes, over %d", ErrTooLarge, len(data), r.cfg.MaxEntryBytes))
	case r.state != raft.StateLeader:
		refuse(ErrNotLeader)
	default:
		if err := r.rn.Propose(data); err != nil {
			refuse(fmt.Errorf("%w: %w", ErrDropped, err))
			return
		}
		// Step drained every Ready before the proposal, so raft holds no
		// entry this replica has not counted: the proposal is the next.
		r.effs = append(r.effs, Effect{Kind: EffAccepted, Index: r.last + 1, Term: r.term, Data: data})
	}
}

// drain handles every Ready raft has: persist, send, apply, report.
func (r *Replica) drain() {
	for r.err == nil && r.rn.HasReady() {
		rd := r.rn.Ready()
		r.ready(rd)
		r.rn.Advance(rd)
	}
}

func (r *Replica) ready(rd raft.Ready) {
	lead, term := r.lead, r.term
	if rd.SoftState != nil {
		r.state, lead = rd.RaftState, rd.Lead
	}
	if rd.HardState != nil {
		term = rd.HardState.GetTerm()
	}
	if lead != r.lead || term != r.term {
		r.lead, r.term = lead, term
		r.leading = false
		r.effs = append(r.effs, Effect{Kind: EffLeader, Lead: lead, Term: term})
	}

	persist := Effect{Kind: EffPersist}
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := r.sm.Restore(rd.Snapshot.GetData()); err != nil {
			r.stop(fmt.Errorf("%w: replica %d: restore snapshot %d: %w", ErrStopped, r.cfg.ID, rd.Snapshot.GetMetadata().GetIndex(), err))
			return
		}
		if err := r.storage.ApplySnapshot(rd.Snapshot); err != nil {
			r.stop(fmt.Errorf("%w: replica %d: snapshot: %w", ErrStopped, r.cfg.ID, err))
			return
		}
		r.applied = rd.Snapshot.GetMetadata().GetIndex()
		r.snapIndex, r.last = r.applied, r.applied
		r.cs = rd.Snapshot.GetMetadata().GetConfState()
		persist.Snapshot = rd.Snapshot
	}
	if len(rd.Entries) > 0 {
		if err := r.storage.Append(rd.Entries); err != nil {
			r.stop(fmt.Errorf("%w: replica %d: append: %w", ErrStopped, r.cfg.ID, err))
			return
		}
		r.last = rd.Entries[len(rd.Entries)-1].GetIndex()
		persist.Entries = rd.Entries
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		if err := r.storage.SetHardState(rd.HardState); err != nil {
			r.stop(fmt.Errorf("%w: replica %d: hard state: %w", ErrStopped, r.cfg.ID, err))
			return
		}
		persist.HardState = rd.HardState
	}
	if persist.Snapshot != nil || persist.Entries != nil || persist.HardState != nil {
		r.effs = append(r.effs, persist)
	}
	for _, m := range rd.Messages {
		r.effs = append(r.effs, Effect{Kind: EffSend, To: m.GetTo(), Msg: m})
	}
	for _, e := range rd.CommittedEntries {
		r.apply(e)
	}
	r.compact()
}

func (r *Replica) apply(e *pb.Entry) {
	if e.GetIndex() <= r.applied {
		return
	}
	eff := Effect{Kind: EffApplied, Index: e.GetIndex(), Term: e.GetTerm()}
	// The group's configuration is fixed: no configuration change is ever
	// proposed, so every entry is the application's or raft's empty one.
	if e.GetType() == pb.EntryNormal && len(e.GetData()) > 0 {
		eff.Data = e.GetData()
		eff.Result = r.sm.Apply(e.GetIndex(), e.GetData())
	}
	r.applied = e.GetIndex()
	r.effs = append(r.effs, eff)
	if r.state == raft.StateLeader && !r.leading && e.GetTerm() == r.term {
		r.leading = true
		r.effs = append(r.effs, Effect{Kind: EffLeading, Term: r.term})
	}
}

// compact snapshots the state machine once SnapshotEvery entries were
// applied since the last snapshot, and drops the log up to KeepEntries
// behind it.
func (r *Replica) compact() {
	if r.applied-r.snapIndex < r.cfg.SnapshotEvery {
		return
	}
	data, err := r.sm.Snapshot()
	if err != nil {
		r.cfg.Logger.Warn("replica: snapshot failed", "replica", r.cfg.ID, "applied", r.applied, "err", err)
		return
	}
	if len(data) > r.cfg.MaxMsgBytes-r.cfg.MaxEntryBytes {
		r.cfg.Logger.Warn("replica: snapshot too large to send to a follower", "replica", r.cfg.ID, "bytes", len(data), "max", r.cfg.MaxMsgBytes)
	}
	snap, err := r.storage.CreateSnapshot(r.applied, r.cs, data)
	if err != nil {
		r.stop(fmt.Errorf("%w: replica %d: snapshot %d: %w", ErrStopped, r.cfg.ID, r.applied, err))
		return
	}
	r.snapIndex = r.applied
	if r.applied > r.cfg.KeepEntries {
		if err := r.storage.Compact(r.applied - r.cfg.KeepEntries); err != nil && !errors.Is(err, raft.ErrCompacted) {
			r.stop(fmt.Errorf("%w: replica %d: compact: %w", ErrStopped, r.cfg.ID, err))
			return
		}
	}
	r.effs = append(r.effs, Effect{Kind: EffSnapshot, Snapshot: snap})
}

// peerType says whether raft replicas send messages of type t to each
// other (proposals are not forwarded: a follower refuses them).
func peerType(t pb.MessageType) bool {
	switch t {
	case pb.MsgApp, pb.MsgAppResp, pb.MsgVote, pb.MsgVoteResp, pb.MsgPreVote, pb.MsgPreVoteResp,
		pb.MsgSnap, pb.MsgHeartbeat, pb.MsgHeartbeatResp, pb.MsgTimeoutNow,
		pb.MsgTransferLeader, pb.MsgReadIndex, pb.MsgReadIndexResp:
		return true
	}
	return false
}
