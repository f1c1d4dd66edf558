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
//
// # Parts and owners
//
// The master's decisions also exist as one pure node, routing/master.Node
// (the registry of tasks and placement, groups, barriers and watches, the
// route table, the move machine and each job's checkpoint coordinator,
// with the drivers' timers and resume retries as effects), which the
// whole-VM simulation (daemon/sim) runs. The daemon runs it under one
// lock, mn.mu (masterNode, masternode.go), for its groups and barriers,
// the watches on a task's loss with its host, its moves and the epoch
// clock, and whether a job's failed resume is asked again; the timers
// the node sets (FxTimer) are recorded at every step and fed back when
// due by one tracked loop (runTimers); its registry, routes, host list and jobs are still the
// parts below, which feed the node what it needs of them (a move's
// starting route and the task's facts, where a watched task is, the
// hosts lost and back, the watched tasks a lost host took with it) and
// drive their own machines under their own locks.
//
// A Daemon is the driver of its parts. Each part is a type of its own
// with one owner, a lock (or, for the scheduler's loop and a peer's
// write loop, a goroutine), and the part's methods take that lock
// themselves; the Daemon's methods combine them.
//
//   - The host node (routing/host.Node, pure; router.node, router.go;
//     Daemon.rt) and its lock, rt.mu, the daemon's one protocol lock:
//     the node owns the route cache (authoritative at the master),
//     reliable delivery's Outbox and Inbox, the host half of moves and
//     the host half of job checkpoints, with one seam, Step(now, Event)
//     []Effect, that delegates each event to its part. The send and
//     receive paths (remote.go, endpoint.go) use the node's parts
//     directly under rt.mu: every message a task sends takes rt.mu once
//     and allocates nothing for the node.
//   - Task hosting (hosting, hosting.go; Daemon.ht): the tasks running
//     here, the exited ones (`ps -a`), notify registrations, and the
//     shell's records of the host halves' pauses, departures and
//     arrivals. ht.mu is rt.mu (the same mutex): the node and the task
//     table are one piece of state behind one lock, so the critical
//     sections that see both (suspend, install, cancelArrival,
//     receiveMsgs, transmit, applyRoutes, sendSystem, captureMeta,
//     report) take it once. A task's mailbox has its own locks
//     (mailbox.go).
//   - The host half of job checkpoints (the node's routing/jobck.Host,
//     stepped through the node's seam by ht.ckpts.Step), under the
//     node's lock: a pure machine that decides every step of a job's
//     checkpoint or restart round at this host — pause (refused for a
//     round already resumed, or while a task of the job moves), the
//     pause's end (a late task or a cancelled step lets the tasks go on),
//     quiet, write (only of a task paused for the step's round and at its
//     safe point), resume, a rollback's kill, a task given up or ended,
//     and a restart's stage, start and drop — and owns, per task, the
//     pause (its round and whether its checkpoint is being written), per
//     job the newest round the master resumed (gone with the job's last
//     task here), and the staged tasks. The step handlers (jobckpt.go;
//     a restart's in jobs.go) feed it each step with what the task table
//     knows of the tasks (jobck.Local), under the node's lock, and perform its
//     effects; they keep what is no decision (pauses: the channels a
//     paused task and the pause step block on, found by the task through
//     hosted.pause without a lock; staged: the tasks read from the
//     checkpoint), adding and removing entries only as its effects say.
//     A task's checkpoint write and its release are ordered by the
//     machine: a release waits, with ht.mu released, for a write under
//     way (DoWait), and a write after the release is refused.
//   - The host half of moves (the node's routing/move.Host, stepped
//     through the node's seam by ht.stepMove), under the node's lock: a
//     pure machine that decides every step of a move at this
//     host — prepare, suspend and the capture at the task's safe point,
//     the checkpoint's write and its direct stream, restore and install,
//     commit, resume, cancel, a job's drop, a task given up or ended — and
//     owns, per task, the departure (suspended here for a move, and
//     whether its checkpoint is being written), the arrival (prepared here
//     for a move) and the floor (the newest move this host cancelled or
//     resumed it for; gone when the task ends). The step handlers
//     (migrate.go) feed it each step with what the task table and the
//     route cache know of the task (move.Local), and perform the effects
//     it returns; they keep what a departure or an arrival carries that
//     is no decision (moving: the captured state, the checkpoint file,
//     the channels a resume and Wait block on; incoming: the messages
//     held for an arrival and the direct checkpoint's hand-off), adding
//     and removing entries only as its effects say. A job restore's staged
//     tasks are not moves: the host half of job checkpoints stages them,
//     and their arrivals (incoming with move 0) are the shell's, which
//     the move machine learns of through move.Local.Restoring.
//   - Moves (mover, mover.go; Daemon.mv, master), through the master
//     node under mn.mu: the node's move machine (routing/move) holds
//     every move under way, the kills under way that hold a job's moves,
//     what a recovered master learnt of the moves its predecessor left
//     half done, and the virtual machine's epoch clock; the node keeps
//     what each step's call carries (the task's type, job and origin) and
//     decides which hosts hear a move's route. The shell keeps, under the
//     same lock, its record of each move (runs: how it is carried, the
//     channel Migrate waits on, the measurements), and the type and job
//     of the tasks moved before (facts: asked of the origin before a
//     task's first move, and given to the node with the move's starting
//     route from this daemon's table; the origin checks them at the
//     suspend step, so a move on a stale record aborts before anything is
//     captured). The node decides, through its one seam, Step(now,
//     Event) []Effect: which step follows which, each step's timeout,
//     when a failed abort or commit step goes again, which moves a host's
//     loss or a job's rollback ends, which moves may start, and when and
//     how a half-done move of a previous master is settled. The driver
//     (migrate.go: Migrate, step, perform, dropJobMoves, movesHostLost;
//     recover.go: recovering, resolveMoves; masternode.go: runTimers)
//     feeds it events (a move asked for, a step's answer translated into
//     an outcome, the move timer the node set, a host deleted or back, a
//     job rolled back or killed, a host's report to a recovered master,
//     the hosts back) and performs its effects after releasing mn.mu: it runs each
//     step's call (on Migrate's own goroutine while its caller waits,
//     else on a tracked goroutine) bounded by the action's timeout (from
//     Config: MoveStepTimeout, MoveTimeout, MoveTransferTimeout), sends
//     the routes the node set (to every host, or on demand to the hosts it
//     names) and records them in this daemon's own table, which the
//     master's other parts read: the node's table is the moves'
//     authority, this daemon's table learns each route as it goes out,
//     as a host's does, and stays the table of record for spawns, job
//     restores and a recovered master's routes until those parts run
//     through the node. It wakes whoever waits for a move; the
//     goroutine that performed a move's step performs its next one. The
//     hosts' move machines check the move ID of every step (a step of a
//     move a host has cancelled or resumed the task for is refused), and,
//     in the critical section that puts a task into service, that its
//     arrival is still the one prepared, so a restore finishing after an
//     abort installs nothing. A move aborts in one
//     order: the destination drops its arrival first (or answers that it
//     already runs the task, and the move commits instead), then the
//     origin resumes the task at a newer route; a lost destination counts
//     as dropped. A recovered master adopts the moves its predecessor
//     left half done (recover.go). Epochs: one clock for the whole
//     virtual machine, the move machine's, numbers every route the master
//     hands out — moves, aborts, job restores and rollbacks — so a task's
//     epoch never goes back. A job checkpoint's manifest records the
//     clock, and a restore hands out epochs above it; a recovered master
//     takes the hosts' largest epochs and move IDs from their reports.
//   - The job registry (registry, registry.go; Daemon.reg, master), under
//     reg.mu: the jobs and their coordinators, where each job's output
//     goes, the hosts each job has tasks on, the newest complete set of
//     each job name, and TIDs restored for hosts not (yet) here.
//   - Jobs' checkpoints and rollbacks (jobs.go, jobckpt.go): each job's
//     coordinator (routing/jobck) under the job's own lock, jobState.mu,
//     held only to step it and keep its bookkeeping, never across a call
//     to the hosts; driveJob carries out the machine's actions. A
//     round's resume is asked again of a host whose call failed as the
//     master node decides (EvResumed → FxResume, up to its
//     ResumeAttempts, never of a lost host; resumeHosts performs it with
//     mn.mu released). A rollback asks again the hosts whose kill failed
//     and starts again if its restore fails. Restart epochs come from
//     the move machine's clock, so that they are above every epoch handed
//     out before, also for tasks whose routes the master has forgotten.
//   - Membership (master, membership.go): the membership machine
//     (routing/member.Machine, pure: the failure detector, the admission
//     bucket and the deleted hosts that may come back, behind one seam,
//     Step(now, Event) []Effect), under nw.mu with the host registry it
//     judges. It decides whom to admit and how long the others wait,
//     which hosts are suspected, cleared or deleted, when failure
//     detection widens, and which deleted host is taken back. The driver
//     feeds it registrations (admissionWait, readmit), hosts registered
//     and deleted (watchHost, forgetHost) and, every heartbeat, what was
//     heard from each host and a tick (checkHosts); it performs the
//     effects (a suspicion or a health change logged, a dead host
//     deleted, a busy answer sent, a host taken back), removing hosts
//     after releasing the lock. The hosts rejoining after their deletion,
//     not yet announced, are the driver's (membership.pending: read by
//     the network's handshake and peers).
//   - The swim failure detector (Config.Detector "swim", the default; swim.go): a
//     host's routing/swim.Node is its swim loop's alone (fed through a
//     bounded channel by the frame readers and the master's calls); the
//     master's swim.Referee lives in membership, under nw.mu, beside the
//     membership machine, which then only admits and remembers hosts;
//     its effects queue there and are performed after the lock
//     (refFlush).
//   - The host list as deltas (hostlist.go; routing/hostlist.List, pure):
//     nw.list under nw.mu, beside the host registry. At the master it is
//     the hosts announced, each change queued (nw.deltas) and sent by
//     flushHosts under nw.sendMu, which orders the deltas and the whole
//     lists on every connection; at a host it is the list as heard,
//     applied under nw.applyMu, which keeps the changes acted on (hosts
//     known, forgotten) in the list's order.
//   - The scheduler and placement (schedState, scheduler.go; Daemon.sched,
//     master): its loop owns the listings; the status, classes and dirty
//     hosts are under sched.mu; sched.placeMu serialises the Placer.
//   - Groups and barriers (groups.go; Daemon.groups, on Daemon.mn): the
//     master node decides, stepped under mn.mu — instance numbers,
//     joins, leaves and rejoins (a restored or recovered task's
//     memberships), the groups a task leaves when it ends or is lost
//     with its host, a barrier's count (0: every member), who may arrive,
//     withdrawals, and which waiters a completed barrier releases, and
//     it bounds the groups (ErrLimit); groups answers the calls with the
//     node's answers and keeps, under the same lock, who waits in a
//     barrier (a channel here, or the host to tell), waking the ones a
//     release names and sending one release per host after the lock.
//     Which members a lost host takes with it is still read from the
//     host's route table (lostFromGroups).
//   - Watches on a task's end (master.go: registerExitWatch,
//     taskLossNotices, taskGone; on Daemon.mn): a task's ordinary end is
//     told at its host (hosting's notify registrations, which travel with
//     it in its checkpoint); its loss with its host is the master node's,
//     stepped under mn.mu. The node decides whether a watch is told at
//     once that there is no such task (the shell's table places the task
//     on no host known, or on one lost), refused past MaxWatchers
//     (ErrLimit) or recorded, and, once the jobs a lost host took tasks
//     of have rolled back, whom to tell of which task's loss; a task's
//     end at its host drops its watches (EvUnwatch). The shell gives it
//     where its route table places each task, registers a recorded
//     watch at the task's host (watchAt: its own retries while the task
//     moves) and sends the notices the node names, after the lock.
//   - A host's barrier arrivals, under their own
//     lock (arrivals.go); the network's peers and host registry, under
//     nw.mu; a host's load reports, under rep.mu; a peer's bulk stream
//     kept for its next direct checkpoint, under that peer's ckpt.mu
//     (bulk.go), taken with no other lock held.
//   - Owners and quotas (owners, owners.go; Daemon.owners, master), under
//     owners.mu: who started each job and spawned each task outside a
//     job, and the live tasks and jobs counted against the quotas
//     (Config.MaxUserTasks, MaxUserJobs, MaxJobTasks); it locks on its own
//     and calls nothing that locks.
//
// Control calls: one table (methods.go) declares each method with its
// typed request and answer, who may call it and what a user's call must
// own; serveMethod dispatches and authorizes from it alone, and a call a
// daemon makes to itself skips the codec (callLocal). A client's calls
// run under a context that ends with its connection. Calls are not
// deduplicated: each is sent once, on one connection, and answered on it.
// When two daemons dial each other at once, the connection that loses the
// tie (attach) is retired, not cut: it carries no new call and closes once
// the calls under way on it in both directions are answered (retire.go).
//
// Lock order: rep.mu, then rt.mu (which is ht.mu: the host node's one
// lock, never taken twice), then nw.mu; mn.mu (the master node's) is
// never taken with rt.mu held, nor held while it is taken; a job's
// jobState.mu, then reg.mu, then nw.mu; nw.sendMu and nw.applyMu are
// taken with no other lock held, before any of these; whyMu (why the daemon stops)
// last, after any of them. The
// registry, the scheduler's locks, the master node's (mn.mu), arrivals,
// mailboxes and the move machine lock on their own and call nothing that
// locks. No lock is
// held across a call to another daemon: a move's steps run with mn.mu
// released, and a resume (of a move, or of a job's checkpoint) that must
// wait for a checkpoint being written waits with ht.mu released.
//
// Claims: every frame another daemon sends is judged, claim by claim,
// against the host its certificate proves and this daemon's route table
// (routing.Judge; claims.go): what a host says about a task it does not
// host is dropped, logged, counted, and too many close its connection.
//
// Goroutines: tasks (wg), network loops and move steps (bg, through
// goFunc); all end when the daemon stops.
package daemon
