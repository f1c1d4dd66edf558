// Package sched holds dpvm's scheduling policies as pure functions of a
// cluster snapshot: the Dynamic-SED global scheduler (delay factors, delay
// classes, the availability vector with reservation for interactive users,
// SED mapping, migration candidates and the location policy) and the
// load-sharing policies studied beside it (sender- and receiver-initiated
// load sharing, the heterogeneous load acceptance index, WAL with feedback
// control). It performs no I/O: the master daemon feeds it snapshots and
// carries out its decisions, and the simulator in sched/sim evaluates the
// policies offline.
//
// # Dynamic-SED
//
// A Snapshot is what the master knows at one check: the delay classes
// (DefaultClasses is the paper's Table 1), the parameters (DefaultParams are
// the paper's, memory scaled to today's hosts), every host's speed factor α,
// load, free memory, interactive users, and every parallel process with the
// class it was started in and its selection counter. ParseSnapshot reads the
// JSON form used by `dpvm sched plan|step`; Validate checks one built in Go.
//
// Plan maps a new job (minsize, maxsize) onto the delay class with the
// shortest expected delay time and says how many processes go to each host.
// The master spawns them and records the class in each Process.
//
// Step is one check period, run every δT (Params.DeltaT), on a whole
// Snapshot: each Decision says why (the Definition 1 Reason, the counter
// against its limit, the Location rule with its figures) so that every
// decision can be logged. The master keeps an Incremental instead: it
// feeds it the hosts' and processes' changes, and its Check decides what
// Step would on the same cluster while judging only the processes the
// changes concern; the master carries out CheckResult.Migrations in order. A migration that cannot
// be carried out (the task never reaches a safe point) is simply absent from
// the next snapshot's picture: the process is still on its origin, and the
// master may keep its counter at the limit so that it is retried.
//
// The building blocks are exported for logs and status displays: DelayFactor,
// ClassOf, VirtualNodes, HostAvailability, Availability, Candidate,
// UpdateCounter, CounterLimit and Locate. Idle tells when a check would
// decide nothing, so that the master can skip gathering the processes.
//
// Where the paper leaves a choice open the package takes one and says so in
// the documentation of the function concerned: the load and memory a
// candidate test reads (raw, without reservation), which virtual nodes a job
// smaller than its class takes (the fastest), that the location policy
// without interactive users has no fallback and no d_max (as in the paper),
// the order of moves within one check (ascending tid, each seeing the moves
// before it), and that free memory never goes below zero after a move.
package sched
