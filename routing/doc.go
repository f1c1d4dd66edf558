// Package routing owns the pure data structures and decision functions that
// route messages among the hosts of a virtual machine: the versioned
// routing table (task → host, with an epoch that grows on every move), the
// message envelope with its per-pair sequence numbers, and the rules for
// holding, refusing and redelivering messages while a task migrates. It
// performs no I/O; package daemon drives it.
package routing
