// Package share holds the load-sharing policies dpvm offers beside
// Dynamic-SED, as pure decision functions of a cluster snapshot:
//
//   - no load sharing (every task runs where it is submitted);
//   - round robin (a static, cyclic assignment);
//   - sender-initiated load sharing: a host whose queue reaches the
//     threshold T probes up to P_l random hosts and sends the new task to the
//     first one below T (Dandamudi, TR-97-12, §2);
//   - receiver-initiated load sharing: a host whose queue drops below T_R
//     probes up to P_l random hosts for one with waiting tasks and pulls one,
//     optionally re-probing every δ while it stays idle (§2, Observation 2);
//   - the heterogeneous load acceptance index of Bosque et al.:
//     index = (P_i/P_max)·(cores/(tasks+1)), recipient/neutral/emitter states,
//     a recipient queue changed only on state changes, partner localisation
//     among a few random recipients sorted by index, distribution until the
//     recipient turns neutral, and no balancing when the cluster is globally
//     over- or under-loaded;
//   - the weighted average load index WAL, load = W_cpu·load_cpu +
//     W_io·load_io with implicit (page-fault) and explicit I/O load, and the
//     feedback controller of WAL-FC that adjusts the weights and the buffer
//     share from recent job slowdowns (Qin et al., Euro-Par 2003).
//
// Every policy that places a new task implements Placer: given the index of
// the host where the task was submitted, a snapshot of the hosts and a seeded
// random source, it returns a Decision. The live daemon uses Placer for its
// --placement option; the simulator in sched/sim calls the lower-level pieces
// (Locate, Pull, Classify, RecipientQueue, Controller) on every simulated
// event, so those take no snapshots and allocate nothing.
//
// The package performs no I/O and reads no clock; randomness is always a
// parameter.
package share
