// Package replica replicates a state machine over a group of three or
// five daemons with etcd-io/raft (go.etcd.io/raft/v3): the layer the
// master's group runs under its master node, so that when the leader
// dies another takes over with the same state.
//
// raft is used as a library because it is well kept, widely deployed
// (etcd, CockroachDB, TiKV) and its RawNode already has the shape of our
// nodes: pure Step/Ready/Advance, the application doing storage and
// transport. This package is the thin layer that gives it our seam.
//
// # The seam
//
// A Replica is raft's RawNode over an in-memory copy of its log
// (raft.MemoryStorage) plus the application's StateMachine. It performs
// no I/O, starts no goroutine and reads no clock; it is not safe for
// concurrent use. Its one seam is Step(now, Event) []Effect, and Next
// says when it must be stepped at the latest.
//
// Events: EvTick (time passed), EvMessage (a peer's message, decoded by
// DecodeMessage), EvPropose (a client's proposal), EvSnapshotSent and
// EvUnreachable (the transport's reports).
//
// Effects, to be performed in order:
//   - EffPersist: the hard state, entries and snapshot to write to stable
//     storage, durably, before anything after it (raft's rule: persist
//     before you send). State.Persist is the in-memory model of that
//     storage, and New restarts a replica from a State.
//   - EffSend: a message for a peer (EncodeMessage).
//   - EffApplied: an entry committed and applied to the StateMachine,
//     with Apply's result; every index in order (from a restored
//     snapshot's index on), raft's own empty entries included, with no
//     data.
//   - EffLeader: the leader this replica knows (0: none) and the term.
//   - EffLeading: this replica leads and has applied everything committed
//     before its term: its state is the group's.
//   - EffAccepted / EffRefused: the answer to a proposal. A follower
//     refuses (ErrNotLeader) naming the leader it knows, so a client finds
//     the leader by itself; proposals are never forwarded. An accepted
//     proposal is done when EffApplied reports its index with its term,
//     and lost if the index is applied with another term.
//   - EffSnapshot: the replica snapshotted its StateMachine and compacted
//     its log: persist the snapshot.
//   - EffRejected: a message refused (not for this replica, not from a
//     peer, not a kind peers send, or refused by raft) or an event of an
//     unknown kind; nothing changed.
//   - EffStopped: raft found an input contradicting its log (it panics on
//     such input; Step recovers): the replica answers EffStopped to every
//     event until the shell restarts it from what it persisted, which the
//     bad input never reached.
//
// # Time
//
// The caller's time drives raft's logical clock: Step ticks raft once for
// each Config.Tick elapsed (MaxTicksPerStep at most, so a replica not
// stepped for long does not fire a burst of timeouts). ElectionTimeout
// and HeartbeatInterval are durations, turned into ticks. CheckQuorum and
// PreVote are always on: a leader that has not heard from a quorum for an
// election timeout steps down, and a replica that was cut off does not
// raise its term while it campaigns, so it does not depose the leader
// when it comes back. Config.FailoverBound gives the longest an
// uncontested failover takes: 1.7 s plus seven message delays with the
// defaults (100 ms ticks, 800 ms election timeout, a heartbeat a tick).
//
// Randomness: raft draws each election timeout from crypto/rand, inside
// the library; it is the one draw not taken from a seeded source the
// caller passes. Tests seed it with testing/cryptotest.SetGlobalRandom, so
// a simulation's seed replays event for event.
//
// # Exactly once
//
// A client retries a proposal it did not hear the end of, at whatever
// leader it finds, so an entry can commit twice. Dedup is a StateMachine
// wrapper that runs each Command (client ID, sequence number, operation)
// once and returns the first result to a retry: a call retried at the new
// leader runs once.
//
// # Snapshots
//
// After Config.SnapshotEvery applied entries the replica snapshots its
// StateMachine (EffSnapshot) and compacts its log, keeping
// Config.KeepEntries behind the snapshot for followers a little behind. A
// follower further behind gets the snapshot (raft's MsgSnap) and restores
// its StateMachine from it.
//
// # Wire format
//
// A message is WireVersion (one byte), then raft's protobuf encoding of
// raftpb.Message. DecodeMessage refuses input longer than its bound
// (Config.MaxMsgBytes: a snapshot travels in one message) before it
// decodes anything, and refuses kinds replicas do not send each other.
// raft trusts its peers' messages: the group's members are authenticated
// by the transport.
//
// # How the master will use it
//
// The daemon does not run the package yet. The master node's inputs will
// be the log: the leader's shell proposes each
// input (a host's report, a client's call, a timer, with the time it
// happened) as a Command, and every replica's StateMachine feeds the
// committed inputs to its master node in log order. Only the leader's
// shell performs the node's effects (messages to hosts, checkpoints);
// followers apply and discard them, to stay warm. On EffLeading a new
// leader's node already holds the group's state; it performs the effects
// still due from there on, and the master's protocols, which retransmit
// until answered, carry on where the old leader stopped.
// A leader cut off from its group can believe it leads for up to two
// election timeouts (until CheckQuorum deposes it), applying nothing new
// but still holding what it applied; the effects it performs should
// carry its term, so that hosts that have heard from a newer leader
// refuse them.
package replica
