// Package sched holds dpvm's scheduling policies as pure functions of a
// cluster snapshot: the Dynamic-SED global scheduler (delay factors, delay
// classes, the availability vector with reservation for interactive users,
// SED mapping, migration candidates and the location policy) and the
// load-sharing policies studied beside it (sender- and receiver-initiated
// load sharing, the heterogeneous load acceptance index, WAL with feedback
// control). It performs no I/O: the master daemon feeds it snapshots and
// carries out its decisions, and the simulator in sched/sim evaluates the
// policies offline.
package sched
