// Package move is the pure state machine of a task's move from one host to
// another (DESIGN §5 and §8), the virtual machine's epoch clock, and the
// host half of moves (Host). It performs no I/O, starts no goroutines,
// takes no locks and reads no clock: the master's daemon drives the
// Machine, and every daemon its own Host.
//
// The shape is etcd-io/raft's: the driver feeds each event (Start, Result,
// HostLost, Tick, Adopt, Drop, DropJob, Hold, Release, and at a recovered
// master Report and Resolve) with the current
// time through the one seam, Machine.Step, which returns the actions the
// machine wants done (call a step at a host, set a route, finish a move,
// reject the event); the driver performs them, and feeds each call's
// outcome back as a Result event. The policy is the machine's: which step
// follows which, each call's timeout, when a failed abort or commit step
// goes again, which moves a host's loss or a job's rollback ends, that no
// move of a job starts while its kill is under way, and that a move a
// previous master left half done is adopted once both its hosts are back.
// A move reads
//
//	Preparing → Freezing → Transferring → Restoring → Committing → Done
//
// or, when a step fails, a host is lost or the driver's call times out,
//
//	… → Cancelling → Resuming → Aborted
//
// Every move has an ID, and every step and every result carries it: a
// result that is not the one the move waits for (late, duplicated, or of
// an aborted or superseded move) is refused with ErrStale and changes
// nothing. The hosts check the same ID, so a late step of an aborted move
// is refused where it lands.
//
// The abort order is what makes a move exact: the task is resumed at its
// origin only after the destination has answered that the arrival is
// dropped and was never installed (or after the destination is lost with
// its host). Should the destination answer that it already runs the task,
// the move commits instead. A resume is therefore never issued while a
// restore might still complete. A move never aborts while a suspend or a
// checkpoint send is still under way at the origin; it waits for that
// step's outcome (the driver bounds every call with the step's timeout).
//
// The host half. Host is the other side of the same protocol: what one
// daemon decides about its tasks' moves, as origin and as destination.
// Its one seam is Step: an event (a step from the master, a task at its
// safe point, a checkpoint's write over, an install) with what the
// daemon's task table and route cache know of the task (Local) and the
// current time in; effects out (answer or refuse the step, suspend or
// capture the task, write, receive or restore its checkpoint, install it,
// drop an arrival or a departure, set a route). It holds each task's
// departure, arrival and floor: the newest move the host cancelled or
// resumed the task for, whose steps, and older ones, it refuses.
//
// Epochs. The Machine holds the virtual machine's epoch clock: every epoch
// it hands out (a move's, the way back of an abort's, a job restart's)
// is larger than every epoch it has handed out or observed before. A
// task's route epoch therefore never goes backwards, even when the master
// has forgotten the task's route (it exited, or its job rolls back) or the
// master itself was restarted (a recovered master observes the epochs the
// hosts report before it hands out new ones).
package move
