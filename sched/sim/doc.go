// Package sim is dpvm's deterministic, seeded discrete-event simulator for
// studying scheduling policies before running them on a cluster.
//
// It reproduces four studies:
//
//   - load sharing (Dandamudi, TR-97-12): N nodes with FCFS or preemptive
//     round-robin scheduling, renewal arrivals and service times of any mean
//     and coefficient of variation, probe and transfer costs on the CPU with
//     preemptive priority, and no load sharing, sender-initiated,
//     receiver-initiated (with optional reinitiation) or load-index sharing;
//     mean response times come with 95% confidence intervals from batch
//     means (RunLoadShare, Sweep);
//   - the load acceptance index on a heterogeneous multi-core cluster
//     (Bosque et al.): 100 tasks launched on one node against an even static
//     distribution (RunIndex);
//   - WAL against WAL-FC on a memory- and I/O-intensive workload (Qin et al.)
//     (RunWAL);
//   - a trace-driven run of Dynamic-SED on a workstation pool (Schnor and
//     Gehrke), from a trace file or a synthetic pool with day/night and
//     weekday patterns (RunSED, ReadTrace, SyntheticTrace).
//
// Everything is a pure function of its configuration and seed: the same
// inputs give bit-identical results. The event core is a binary heap of
// value-typed events; the load-sharing model allocates nothing per event.
// WriteSVG draws the results as line plots without any plotting library.
package sim
