// Package pvm holds ports of PVM 3.4's example programs to the task API,
// registered with `dpvm run` under the names pvm.hello, pvm.master1,
// pvm.spmd, pvm.gexample and pvm.timing:
//
//   - hello (hello.c, hello_other.c): a task spawns another, which greets
//     it with its host's name;
//   - master1 (master1.c, slave1.c): a master multicasts data to three
//     slaves per host, which pass partial sums to their neighbour and
//     report to the master;
//   - spmd (spmd.c): a token goes once around a ring of tasks spawned
//     together;
//   - gexample (gexample.c): a group computes the 1-norm and the product of
//     the first column of a Toeplitz matrix with two reductions, one of
//     them a user-defined operation;
//   - timing (timing.c, timing_slave.c): round-trip times and bandwidths
//     between two tasks.
//
// Each file ports one program, beside a comment naming the original's
// files, and prints what the original prints. The tests compare each
// port's output, with task IDs, host names and times normalised, against
// the output of the original under PVM 3.4.6 (testdata). README.md lists
// the PVM calls the programs use and their dpvm counterparts.
package pvm
