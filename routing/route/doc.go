// Package route is routes on demand (DESIGN §4, §5 and §9): each host's
// route cache, with each task's origin host (the host in its TID) as the
// authority for its route. It replaces the broadcast of every move's route
// to every host, whose cost grows with the number of hosts, by a protocol
// whose cost per move is constant in it:
//
//   - The master tells a move's route to the task's origin host, its old
//     host and its new host, and to no one else (EvSet).
//   - The old host, while the task moves away, refuses its messages
//     naming the move in transit until the master's route reaches it,
//     then naming that route: the new host keeps what arrives for the
//     task until it is restored, so the sender need not wait and ask.
//     (This is the shell's rule: move.Host holds the departure.)
//   - A host sent messages for a task it does not have refuses them naming
//     the newest route it knows, or the task's origin when it knows none
//     (EvMiss → DoRefuse).
//   - A refused sender hands the refusal to its routing.Outbox
//     (DoRefusal); when the route named does not supersede the one it
//     sent by, or is in transit, it has nothing better and asks the
//     task's origin (DoAsk), again every Config.Retry until it learns a
//     route that supersedes the one it is stuck on.
//   - The origin answers with the newest committed route (EvAsk →
//     DoAnswer), which it always knows.
//   - A task's end (EvEnded: here, or as the master tells the origin of
//     an end elsewhere or a loss for good) drops its route; the origin
//     answers queries with it (host 0 at the end's epoch) and the asker
//     drops its messages (DoEnded) rather than ask for ever.
//   - A deleted host that comes back under its old ID (EvHostUp, with the
//     master's epoch clock at its return) is reached by the routes set
//     after its return; an older route naming it is its old incarnation's
//     and still leads nowhere (Gone): a task lost with it stays lost.
//   - Config.MaxRoutes bounds the routes learnt (least recently used
//     first, DoForget) and the ends remembered.
//
// Routes only go forward (Supersedes is routing.Table's order), so every
// host's epochs are monotone. Reliable delivery is routing.Outbox's and
// routing.Inbox's, unchanged: per-pair FIFO and exactly once through
// moves, losses and reordering. The package's simulation
// (sim_test.go) runs the real move.Machine, the real move.Host, the real
// Outbox and Inbox and this cache on a network that loses, duplicates,
// delays and reorders frames, with partitions and hosts that go down and
// come back, and checks those invariants after every step.
//
// On the wire (wire.go), a query is a TID (AppendAsk, DecodeAsks) and an
// answer a routing.Refusal's layout (the TID and its route).
//
// Cache is pure: one seam, Step(now, Event) []Effect; it performs no I/O,
// starts no goroutines and reads no clock.
package route
