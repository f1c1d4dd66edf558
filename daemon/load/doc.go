// Package load is what each dpvm daemon reports to the master's Dynamic-SED
// scheduler (package sched): its host's runnable load, free memory,
// interactive users and its tasks' memory use (Sample), and its speed
// factor α.
//
// # Measurement
//
// Proc reads the host it runs on: the runnable threads of the host that are
// not the daemon's own (/proc/stat's procs_running minus the daemon
// process's threads in state R, smoothed over a short window),
// MemAvailable from /proc/meminfo, and the interactive users from the
// binary utmp file (distinct names among USER_PROCESS records; no utmp
// file means no users). The daemon adds its runnable tasks (Sample.Tasks)
// and their memory (Sample.TaskMem, estimated from each task's checkpointed
// state size, MiB), so the host's load is Tasks + External, as Dynamic-SED
// counts it. Calibrate measures α: the best of ten short runs of a fixed
// integer workload against ReferenceRate, so a host twice as fast as the
// reference reports α = 0.5.
//
// # Emulation
//
// One machine can stand in for a heterogeneous cluster with interactive
// users. Everything below is emulation, and samples that carry emulated
// figures say so (Sample.Emulated, Sample.Source, Sample.EmulatedLoad):
//
//   - Trace replays one host of a trace file in the simulator's format
//     (package sched/sim) against the daemon's clock, with a start time and
//     a speed-up factor — the paper's trace-driven method, live.
//   - Static is a host whose figures never change, the base to use when
//     several daemons share one machine (through Proc each would count the
//     others' tasks as external load).
//   - Injected overlays figures set at run time (`dpvm load inject`) on
//     any source, replacing or adding to its figures until cleared or
//     expired.
//   - A declared speed (--speed, ResolveSpeed) is reported as α, and
//     Throttle makes the daemon's tasks really run that many times slower
//     by pausing them at safe points and before each message they send
//     ((α−1)·busy after busy time of computation, waits for messages
//     excluded: Meter); EmulatedFactor extends the slow-down to emulated
//     external load.
//
// Sources take the time as a parameter and the emulation sources hold no
// clock, so they are deterministic under test; only Proc (the files it
// reads) and Calibrate (the wall clock) measure the real machine.
package load
