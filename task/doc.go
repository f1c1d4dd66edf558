// Package task is the API that dpvm's parallel programs are written against.
//
// A task type is a struct whose exported fields are its whole state and
// whose Run method is its code:
//
//	type Worker struct {
//		N    int     // arguments, set by the spawner
//		I    int     // progress, so Run can resume after a migration
//		Sum  float64 // partial result
//	}
//
//	func (w *Worker) Run(c *task.Ctx) error {
//		for ; w.I < w.N; w.I++ {
//			w.Sum += work(w.I)
//			if err := c.SafePoint(); err != nil {
//				return err // checkpointed here; Run resumes elsewhere
//			}
//		}
//		return c.Send(c.Parent(), tagResult, w.Sum)
//	}
//
//	func init() { task.Register("example.worker", &Worker{}) }
//
// State and code are separate so the runtime can checkpoint a task at a safe
// point, move its state to another host and call Run again there. The state
// is encoded with msgpack, so it must consist of exported, serializable
// fields.
//
// The API follows PVM 3.4, expressed in Go, with one call for each thing
// and options for its variants: TIDs identify tasks for their whole life;
// Spawn starts tasks (OnHost, Here, and WithComm or Team for a
// communicator); Send and Recv carry tagged messages, with AnyTask and
// AnyTag as wildcards, and take options (Safe makes a wait a safe point,
// InPlace hands a slice over without copying it, Match receives by a
// predicate, Timeout and WithContext bound a wait); Recv returns the
// message itself besides decoding it; Mcast sends to a list of tasks, never
// to the caller; groups give instance numbers, barriers and, through
// GroupComm, a communicator; Notify turns task exits and host changes into
// messages. Every IPC call is a critical section, so a task is never
// checkpointed half-way through a communication.
//
// Messages from one task to another arrive in the order they were sent. No
// order holds between messages from different senders. Send copies the
// value; with InPlace it hands a slice the sender gives up to a receiver
// on its host without copying it, and Payload.Int32s, Float64s and
// Complex128s read a received slice where it lies. Shared gives the tasks
// of a job on one host one copy of read-only derived data (a matrix, a
// table), which a task that moves or is restored asks for again.
//
// # Ranks and communicators
//
// A parallel program's workers usually form a fixed team. Spawn with
// WithComm starts them as a communicator (a Comm) with the spawner as rank
// 0; each worker calls JoinComm on its own Comm field and knows its rank,
// the team's size and every peer's TID. Spawn with Team starts a team the
// spawner is not part of (ranks 0..n-1), for a root that only watches its
// workers; GroupComm makes a named group's members one; World makes an
// SPMD program's ranks, copies of its root, as mpiexec does. Collectives run
// on the Comm, with the communicator first and the root last: Barrier,
// Bcast, SendRecv, Reduce, AllReduce, Scan, Exscan, ReduceScatter,
// Allgather(v), Alltoall(v), Gather(v), Scatter(v); so do non-blocking
// Isend and Irecv with their Requests (Wait, Waitall, Waitany, Test).
// Split, Dup, CartCreate and CartSub make new communicators from a Comm,
// Cartesian grids with Coords, CartRank, CartShift, Neighbors and the
// non-blocking IneighborAlltoall (package task/grid builds a distributed
// 2-D array with a halo exchange on them). Each wait is a safe point (see
// Comm for the one rule that makes this work).
//
// A Program given by its Proto takes its flags from the root task's
// tagged fields (`flag:"name,usage"`, `min:"x"`) and checks them with its
// Validate method (Validator).
//
// Group names are scoped to the job: two runs of one program never share a
// group. A name beginning with VMWide names a group of the whole virtual
// machine.
//
// # Errors
//
// Every error the API returns wraps one of these sentinels (test them with
// errors.Is) or is an *ExitError:
//
//   - ErrNoSuchTask: Kill, Migrate or a communicator rank names no task;
//     Send and Mcast only for a TID no task can have (a message to a task
//     that has exited is dropped, wherever it ran: use Notify to learn of
//     exits).
//   - ErrNoSuchHost: OnHost or Migrate names a host not in the machine.
//   - ErrNoSuchGroup, ErrNotInGroup: group calls on an empty group, or by
//     a non-member.
//   - ErrNoComm: a collective on a Comm that Spawn, JoinComm or GroupComm
//     has not filled.
//   - ErrUnknownType: Spawn of a type this binary has not registered.
//   - ErrBadTID, ErrBadTag: a malformed TID or a tag out of range.
//   - ErrTimeout: a Recv or Send with the Timeout option gave up.
//   - ErrEncode, ErrDecode: a value that cannot be encoded, a message that
//     does not decode into the value given.
//   - ErrSuspended: from SafePoint, Recv, Send and Barrier with Safe,
//     GroupComm, JoinComm and
//     collectives when the runtime has checkpointed the task to move it;
//     Run must return it unchanged.
//   - ErrKilled: the task has been killed; Run should return.
//   - ErrHalted: the virtual machine is shutting down.
//   - context errors (context.Canceled, DeadlineExceeded) from calls with
//     the WithContext option.
//
// Package task performs no I/O itself: a Ctx talks to the daemon hosting its
// task through the Endpoint interface, which package daemon implements.
package task
