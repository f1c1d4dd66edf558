// Package peers reads and summarises the results of the peer benchmark
// harness: the figures of PVM 3.4 (through pvmd and with PvmRouteDirect),
// Open MPI (TCP and shared memory) and raw TCP on one host, measured the way
// `dpvm bench pingpong` measures dpvm.
//
// The harness itself is outside Go: run.sh installs the peers, builds the C
// programs in csrc/ (pvm_bench.c, mpi_bench.c, raw_bench.c), starts
// a private PVM virtual machine and runs every configuration in alternating
// rounds. Each run prints one JSON line in the shape of
// `dpvm bench pingpong --json`,
//
//	{"mode":"local","results":[{"size":8,"oneway_us":…,"mbps":…},…],"rate_msgs_per_s":…}
//
// with a "system" field naming the configuration (pvm-daemon, pvm-direct,
// mpi-tcp, mpi-shm, raw-tcp) and, for PVM, "spawn", "barrier_us",
// "bcast_us" and "reduce_us". A line without "system" is dpvm's own, named
// dpvm-local or dpvm-remote after its mode, so dpvm's lines can be read by
// the same code and put beside the peers.
//
// A line of mode "quic" (raw quic-go, `dpvm bench quic --json`) is named
// quic-go and counts as remote. With --dpvm-bin, run.sh measures dpvm in the
// same alternating rounds (`dpvm bench peers --line MODE`, whose lines carry
// their system: dpvm-local, dpvm-remote, quic-go).
//
// ParseLines reads such lines, Summarize reduces the rounds of each system
// to medians and ranges, and WriteTable prints them as a Markdown table,
// with the ratio of each peer to dpvm in the same mode when dpvm's lines are
// present. cmd/peertable is the command run.sh uses. WriteSideBySide is the
// one table of `dpvm bench peers` (dpvm beside each peer with the ratio
// after it), WritePlots its latency and bandwidth charts, and WriteHarness
// writes out the harness the dpvm binary carries (run.sh and csrc).
//
// The tests use recorded lines, and build and run mpi_bench.c on two ranks
// at the smallest scale where mpicc and mpirun are installed (its
// collectives check their results).
package peers
