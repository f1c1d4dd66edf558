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
// The API follows PVM 3.4, expressed in Go: TIDs identify tasks for their
// whole life; Send and Recv carry tagged messages, with AnyTask and AnyTag as
// wildcards; Mcast sends to a list of tasks; groups give instance numbers,
// barriers, broadcast, reduce, gather and scatter; Notify turns task exits
// and host changes into messages. Every IPC call is a critical section, so a
// task is never checkpointed half-way through a communication.
//
// Messages from one task to another arrive in the order they were sent. No
// order holds between messages from different senders.
//
// Package task performs no I/O itself: a Ctx talks to the daemon hosting its
// task through the Endpoint interface, which package daemon implements.
package task
