// Package examples holds small parallel programs written against the task
// API, registered with `dpvm run`:
//
//   - hello: a parent spawns N children and collects their greetings;
//   - pingpong: two tasks bounce a message back and forth and time it;
//   - ring: a token goes K laps around a ring of N tasks (a team of ranks);
//   - pi: master/worker Monte Carlo estimate of π with a reduce;
//   - squares: the README's walk-through, a sum of squares with an all-reduce;
//   - watch: workers across hosts, and notify telling which are lost;
//   - jacobi: Jacobi iteration in strips on a communicator, with ghost-row
//     exchange and a convergence all-reduce;
//   - jacobi2d: the same iteration in blocks on a 2-D Cartesian
//     communicator, exchanging edges with non-blocking sends and receives
//     (jacobi2d.py is its mpi4py twin, which prints the same line).
//
// The ports of PVM 3.4's example programs live in examples/pvm.
//
// Each program is one file that compiles on its own — its tags and
// constants are declared in it (jacobi_serial.go is jacobi's serial
// reference for the tests) — keeps its whole progress in its exported
// fields and waits at safe points (SafePoint, a Recv with task.Safe, the collectives,
// the waits of non-blocking requests),
// so its tasks can be checkpointed and moved mid-run without changing the
// result. The NAS Parallel Benchmark kernels live in
// examples/npb.
package examples
