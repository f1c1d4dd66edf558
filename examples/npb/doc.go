// Package npb holds the NAS Parallel Benchmark kernels EP, CG, MG, FT and IS
// (NPB 3.4) as parallel programs on dpvm's task API.
//
// Each kernel is a worker task type whose exported fields are its whole
// progress (iteration counters, partial sums, the arrays that evolve), so a
// worker can be checkpointed at the safe point that ends each iteration,
// or in any wait for its peers (the collectives of its team's task.Comm,
// which Run re-entered replays, and MG's and FT's receives with
// task.Safe, whose progress their fields record), and resumed elsewhere
// with the same result; arrays that are
// derived (the CG matrix, MG's right-hand side, the IS keys, FT's
// evolution factors) are rebuilt on resume. A Root task spawns np workers as a
// communicator of their own (task.Ctx.Spawn with task.Team), relays rank 0's progress
// and prints the report; each worker joins the communicator once (its
// rank and its peers' TIDs), then talks through Send and Recv.
//
// The kernels follow NPB 3.4: the same random number generator reproduced
// bit for bit (the integer form of randlc/vranlc), the same problem classes
// (S, W, A, B, C, D), iteration counts, timed regions and Mop/s formulas, and
// the same verification: Verify checks every class against the official
// reference values with the official tolerances.
// Their decompositions:
//
//   - EP: contiguous blocks of the 2^(M-16) batches; the sums are reduced.
//   - CG: blocks of matrix rows; the search direction is all-gathered before
//     each product, dot products are all-reduced.
//   - MG: slabs of planes at every level with ghost-plane exchange; with more
//     than two tasks the coarsest levels are gathered and computed by every
//     task (np a power of two, at most N/2).
//   - FT: slabs of z-planes for the x and y transforms, transposed into slabs
//     of y-planes for the z transforms (np a power of two dividing ny and nz).
//   - IS: blocks of keys; each ranking sends every key to the task owning its
//     bucket, the buckets split so each task gets about as many keys (np a
//     power of two).
//
// RunSerial runs a kernel's code as a single task without the runtime: the
// serial reference form and the baseline for the runtime's overhead. Run
// runs a kernel on an embedded virtual machine and returns its Report; the
// root task hands the report over as a line of the job's output, so the
// design works wherever the root runs. Each kernel is also registered as a
// program for `dpvm run` (npb-ep, npb-cg, npb-mg, npb-ft, npb-is with
// -class and -np), which prints the NPB-style report.
package npb
