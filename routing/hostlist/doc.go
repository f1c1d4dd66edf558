// Package hostlist is the host list a master hands its hosts, as a
// versioned list and the deltas between its versions. The master applies
// each change to its own List (Add, Remove), which numbers it with the
// next version and gives the Delta to send every host; a joining host
// gets the whole list once, with its version (Snapshot); a host applies
// the deltas it hears (Apply) in version order:
//
//   - A delta of a version the host has already applied changes nothing
//     (deltas are idempotent: a full list and a delta it already holds
//     may both arrive).
//   - A delta past the next version opens a gap (ErrGap): it is held, up
//     to MaxHeld of them, and the host asks the master for the whole list
//     again. A held delta is applied once the deltas before it arrive, or
//     the whole list of a version at least the one before it (Reset).
//   - Add of a host the list holds replaces its entry (a changed address);
//     Remove of one it does not hold changes nothing.
//
// Each call returns the Changes it made, in order, for the daemon to act
// on (dial, forget, notify). The wire encoding (AppendDeltas,
// DecodeDeltas, AppendSnapshot, DecodeSnapshot) is compact and binary,
// and its decoders bound every count and string by the bytes they are
// given and by MaxString before they allocate.
//
// Like the rest of routing the package performs no I/O and reads no
// clock; a List is not safe for concurrent use.
package hostlist
