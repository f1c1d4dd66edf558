// Package routing owns the pure data structures and decision functions that
// route messages among the hosts of a virtual machine. It performs no I/O;
// package daemon drives it.
//
//   - Frames (frame.go): every byte between daemons is a frame, a u32
//     little-endian length (of what follows), a u8 Kind and a body. Message
//     batches, acknowledgements, refusals and heartbeats have fixed binary
//     layouts; control calls, replies and events are msgpack. Readers refuse
//     frames over a configured maximum and unknown kinds.
//   - Envelopes: a message between tasks carries its sender, receiver, tag,
//     encoding and a sequence number per (sender, receiver) pair.
//   - Table: the versioned routing table. A task lives on its origin host
//     unless the table says otherwise; each move gives it a larger epoch,
//     and older routes never replace newer ones.
//   - Outbox and Inbox: reliable, ordered delivery. The sending daemon keeps
//     each message until the receiving daemon acknowledges it, holds the
//     messages of a task whose daemon refused them until a newer route is
//     known, and retransmits what is overdue; the receiving daemon delivers
//     each pair's messages in sequence order exactly once and drops
//     duplicates. Together they keep the invariant that every message is
//     delivered exactly once, in per-pair order, through losses,
//     duplicates, reordering and moves of the receiver.
//   - Claims (claim.go): Judge decides whether a host may say what a frame
//     says about a task (its sender, receiver, exit, action), from where
//     the judging daemon knows the task lives and has lived (Table.Past):
//     a host speaks only for the tasks it hosts, and for those that lived
//     on it while what they left there is settled.
package routing
