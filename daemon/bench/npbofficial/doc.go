// Package npbofficial reads and summarises the results of the NPB
// comparison harness: the official NPB 3.4 kernels, serial, MPI and
// OpenMP, beside `dpvm npb` on the same host.
//
// The harness itself is run.sh beside this file. It installs gfortran and
// Open MPI, builds the official kernels from a source directory the user
// supplies (dpvm does not ship it) with the suites' own make.def templates
// at -O3, and runs, round after round, the official serial binary beside
// `dpvm npb K --np 1`, `mpirun -np 2` beside `dpvm npb K --np 2` and, with
// --omp, the OpenMP binary at N threads beside `dpvm npb K --np N` for each
// thread count, alternating which goes first. Every run prints one JSON
// line, naming the suite it belongs to or is paired with:
//
//	{"round":1,"kernel":"ep","class":"A","system":"official","suite":"mpi",
//	 "np":2,"time_s":1.25,"mops":430.55,"verified":true,"maxrss_kib":[13140,12960]}
//
// with the peak resident set of every process of the run (one per MPI rank;
// dpvm's tasks share one process).
//
// ParseLines reads such lines, Summarize pairs dpvm's runs with the
// official ones of the same round and reduces them to medians and ranges,
// and WriteTable prints the comparison table of `dpvm bench npb-official`.
// Nothing here needs the official source: the tests use recorded lines.
package npbofficial
