// Package master is the master node: what the master of a virtual
// machine decides about its tasks, as one pure value with one seam. A
// Node owns the registry of tasks (their TIDs, placement, which ended or
// were killed), groups with their barriers and the watches on tasks'
// ends, the authoritative route table, the move machine
// (routing/move.Machine) with the driver's record of each move, the
// hosts deemed lost, and one job checkpoint coordinator
// (routing/jobck.Machine) per job with the sets each has written (or,
// for a job restarted from a set, the set it started from: EvJobStart
// with Round.Seq).
//
// Step feeds it one event with the current time and returns the effects
// the shell is to perform, in order: calls to hosts (a move's step, a
// checkpoint's pause, quiet, write, kill and resume), routes to send,
// tasks to start or stop, a set to commit or restore, tasks to release
// from a barrier or tell of an end, timers to set. It
// delegates each event to the part it concerns and keeps the policy the
// drivers used to keep: the move machine's tick while moves are under
// way, a job's periodic checkpoints and its quiet polls as timers, a
// failed resume asked again (Config.ResumeAttempts), a round's commit
// refused when a host was lost during it, a restore's placement and
// epoch (and the groups a set recorded), and which hosts hear of a
// route.
//
// Like its parts a Node performs no I/O, starts no goroutines, takes no
// locks and reads no clock: the shell feeds it every outcome (a call's
// answer or its timeout, a timer) as an event.
package master
