// Package sim is a deterministic simulation of a whole virtual machine:
// the master, its hosts and the programs' tasks, on one goroutine under
// a seeded scheduler of deliveries, timers and faults, in virtual time.
// The same seed replays the same run event for event, on any machine:
// Result.TraceHash is a hash of every event.
//
// It runs the real pure nodes: each host is a routing/host.Node (route
// table, reliable delivery's Outbox and Inbox, the host halves of moves
// and job checkpoints) inside a shell that mirrors daemon/remote.go and
// daemon/migrate.go, and the master is a routing/master.Node (the
// registry of tasks and placement, groups, barriers and watches, the
// route table, the move machine and the job's checkpoint coordinator,
// with their timers and retries) inside a shell that performs its
// effects: calls over the simulated net, routes sent, timers, tasks'
// incarnations started, stopped and woken, exit notices delivered, the
// checkpoint sets' contents kept. It models nothing they decide.
//
// Tasks are the registered programs' own code: each incarnation runs Run
// on a goroutine of its own, but only while it holds the baton the loop
// hands it; every task.Endpoint call hands the baton back, so exactly one
// goroutine runs at a time. A move captures a task at a safe point,
// encodes its state with msgpack as a real checkpoint does, ends its
// goroutine and restores it from the decoded state on the destination.
//
// After every event the run checks the virtual machine's invariants:
// every task in service on at most one host, and on none only while it
// moves; per sender and receiver, messages delivered in order and
// exactly once; no route going back in epoch; nothing for a restarted
// host's old incarnation reaching its new one. Check compares each seed's
// result with the program's fault-free run (or, after a crashed master,
// accepts the job's documented loss with it).
//
// Scale runs the simulator on a large virtual machine (thousands of hosts,
// hundreds of thousands of idle tasks) and counts every message the
// master sends and receives, by kind, with the bytes a Wire gives each:
// the master's cost per join, spawn, idle second and move. Its
// invariants are checked at each phase's end, in time linear in hosts and
// tasks, so that the run costs as much as its events.
package sim
