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
//   - Routes on demand (route): each host's route cache, with each task's
//     origin host as the authority for its route. A move's route goes to
//     the task's origin, old and new host only; other senders learn it
//     from the old host's refusal, which names the newest route it knows,
//     or by asking the origin (the master, once the origin is deleted).
//     Its cost per move does not grow with the hosts; route's simulation
//     and the whole-VM simulation (daemon/sim, --routes demand) check
//     exactly-once delivery through it. The daemon runs it by default
//     (Config.Routes "demand"; "broadcast", dpvm daemon --routes
//     broadcast, sends every route to every host instead): see "Routes
//     on demand in the daemon".
//   - The host node (host): one daemon's route table, Outbox and Inbox
//     and the host halves of moves (move.Host) and job checkpoints
//     (jobck.Host) as one pure value with one seam, Step(now, Event)
//     []Effect, that delegates to its parts; the daemon holds it under
//     one lock.
//   - The master node (master): the master's registry of tasks and
//     placement, groups, barriers and watches, its route table, the move machine and one job
//     checkpoint coordinator (jobck.Machine) per job, with the drivers'
//     policy (the move tick, periodic checkpoints, quiet polls, resume
//     retries) as timer and call effects, behind one seam, Step(now,
//     Event) []Effect. The whole-VM simulation (daemon/sim) runs it; the
//     daemon's master still drives the machines itself (daemon/doc.go).
//   - Master replication (replica): a replicated state machine on
//     etcd-io/raft, pure, behind the same kind of seam, for a group of
//     three or five masters whose log is the master node's inputs; not
//     yet wired into the daemon (routing/replica/README.md).
//   - Failure detection (swim): the hosts probe each other, SWIM with
//     Lifeguard's suspicion and local health, and tell the master only of
//     suspicions, deaths and refutations; the master deletes a host only
//     after its own checks of the accused fail. The master's
//     heartbeat-driven detector (member) is what it replaces.
//
// # Why swim is our own machine and not hashicorp/memberlist
//
// memberlist is the reference for SWIM with Lifeguard, and swim takes its
// suspicion timeouts, its local-health score and its defaults. It is not
// used as a library because:
//
//   - It runs itself: goroutines, time.AfterFunc timers and the wall clock
//     inside, its own UDP and TCP transport. The whole virtual machine's
//     deterministic simulation (one goroutine, virtual time, a seed that
//     replays every event) cannot step it; swim is a pure machine like
//     the others, so the simulation runs 10,000 hosts of it in seconds
//     and replays any failure.
//   - Its security is a shared symmetric keyring and a node name inside
//     the message. Here every frame is authenticated by the sender's host
//     certificate over QUIC, and a host speaks only for itself: a swim
//     message's sender must be its connection's certificate. Keys derived
//     from the cluster secret would still let any host speak for any
//     other.
//   - Every member deletes the dead on its own. Here only the master may
//     delete a host (its tasks are then given up and run elsewhere: a
//     host deleted while alive would run them twice), so swim adds a
//     referee at the master that confirms a death by checking the accused,
//     and a host declared dead rejoins through the master with a new
//     incarnation.
//   - Its push-pull anti-entropy exchanges whole member lists (O(n) per
//     exchange); the host list is the master's, and swim carries only
//     deltas of liveness.
//
// # Routes on demand in the daemon
//
// Under Config.Routes "broadcast" setRoute (daemon/migrate.go) and a
// job's restore (daemon/jobs.go) send an evRoute event to every host.
// Under "demand", the default (daemon/routes.go):
//
//   - The master sends a move's route (a move.SetRoute action) to the
//     task's origin host, the move's old host and its new host only, and
//     a job's restored routes to each task's origin and to every host the
//     job is restored on (each knows its job's routes before its restored
//     tasks start, at a cost of the job's size, not the machine's). The
//     master keeps its whole Table and answers queries for any task.
//   - Each host keeps a route.Cache (Retry: Config.RTO) beside its Table,
//     which follows it: evRoute feeds route.EvSet; a KindRefuse frame
//     feeds route.EvRefused with the Outbox's Route for the task, and the
//     cache hands the refusal back (DoRefusal) for Outbox.Refused; a
//     message for a task not here and not moving feeds route.EvMiss,
//     whose DoRefuse is the refusal sent; a prepared arrival keeps only
//     what comes once the master has told it the move's route (before,
//     it refuses naming the route it knows: a prepare whose cancel was
//     lost keeps nothing for ever); a deleted host feeds route.EvHostLost
//     and a send along a route to one holds the message (route.EvHeld);
//     a deleted host readmitted under its old ID feeds route.EvHostUp
//     (the master's host-back event, with its epoch clock then: only
//     routes set since name the new incarnation, and the master answers
//     "ended" only for routes from before);
//     the retransmission tick feeds route.EvTick. A task that ends on a
//     host feeds route.EvEnded there; the master tells the origin of a
//     task that ended elsewhere, and, once the rollbacks a host's
//     deletion caused are over, the origins of the tasks lost with it,
//     as route answers of host 0 (ended); route.DoEnded drops the
//     outbox's messages for the task and route.DoForget (the cache's
//     bound, Config.MaxRoutes) evicts its route from the Table.
//   - Two frame kinds (frame.go): KindRouteAsk (u64 TIDs, route.AppendAsk,
//     decoded by route.DecodeAsks), to a task's origin host or, for a
//     deleted origin, the master; KindRouteAnswer (the Refusal layout, 21
//     bytes a record): the task's route (host 0 when it has ended), then
//     the hosts it lived on before, newest first, each as a route of epoch 0 naming a host that
//     is not the origin (which a route of epoch 0 always names).
//     Batches are split to fit the frame maximum. A host answers only for
//     the tasks it is the origin of (a query about another's closes the
//     connection); an answer is taken only from the task's origin or the
//     master (a frame with another answer closes the connection).
//   - Claims (claim.go): a host not told of a move may refuse an honest
//     sender's message from the task's new host, or an old host's resend.
//     On demand a host that refuses a claim about a task it is not the
//     origin of asks the origin (at most once per RTO per task); until
//     the answer has come it logs the refusal without counting it
//     against the connection, after it counts as anywhere. The answer's
//     route and past let an honest resend through.
//
// Every daemon of a virtual machine must run the same protocol (a join
// does not check it).
//
// The master's route traffic per move is then at most three evRoute
// frames for each route the move sets, whatever the number of hosts, and
// hosts that neither take part nor send to the task handle none: go test
// ./routing/route -run TestMoveCost -v; dpvm sim scale --routes demand.
package routing
