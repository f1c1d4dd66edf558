// Package daemon is the dpvm process: it hosts tasks as goroutines, each
// with a mailbox matched on (source, tag) with wildcards, runs the group
// server (instance numbers, barriers) and delivers notifications.
//
// A Daemon implements task.Endpoint for every task it hosts. Messages from
// one task to another are put into the receiver's mailbox in the order they
// are sent, and a receiver takes the oldest message matching its pattern,
// so per-pair order holds. A killed or exited task's mailbox is discarded,
// its exit notified at once, and its blocked calls return task.ErrKilled,
// so no goroutine outlives its task by more than the time to its next IPC
// call or safe point. A panicking task is reported as failed and the daemon
// goes on.
//
// Jobs (master): each job's checkpoints and rollbacks are decided by a
// routing/jobck machine, stepped under the job's own lock (jobState.mu),
// which is never held across a call to a host; driveJob (jobs.go) carries
// out the machine's actions and feeds the hosts' answers back, and the
// hosts serve the steps (jobckpt.go), each naming its round.
//
// Run starts an embedded virtual machine for one program, as `dpvm run`
// does; LocalRunner and Client.Runner give programs a task.Runner.
package daemon
