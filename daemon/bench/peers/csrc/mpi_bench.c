/*
 * mpi_bench: Open MPI side of the dpvm peer comparison.
 *
 * Run with two ranks (mpirun -np 2 ...); rank 0 measures, rank 1 echoes:
 * one-way latency for 8 B, 1 KiB, 64 KiB and 1 MiB (half the median round
 * trip), bandwidth (size / one-way latency) and the rate of a one-way stream
 * of 8-byte messages closed by an acknowledgement, with MPI_Send/MPI_Recv.
 * The transport is chosen by mpirun's --mca btl option; the name printed in
 * the "system" field is given with -n (mpi-tcp, mpi-shm).
 *
 * Then both ranks time allreduce (sum of doubles), bcast, allgather and
 * alltoall at 8 B, 8 KiB and 1 MiB (bench_common.h): each iteration starts
 * with a control broadcast from rank 0 (go on or stop) and an untimed
 * barrier, then each rank times the operation and checks its result; rank
 * 1 sends its times to rank 0, which takes, for every iteration, the
 * slower rank's time, and reports the median. The bcast is timed until
 * rank 1 has acknowledged it (a 0-byte message), as the PVM group
 * broadcast is.
 *
 * Output: one JSON line in the shape of `dpvm bench pingpong --json`, with
 * "coll_np" and "coll" added.
 *
 * Usage: mpirun -np 2 mpi_bench [-n system] [-m mode] [-s scale]
 * Every loop is bounded in count and in time.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"

static void die(const char *what, int code)
{
	fprintf(stderr, "mpi_bench: %s: %d\n", what, code);
	MPI_Abort(MPI_COMM_WORLD, 1);
	exit(1);
}

static void rank1(void)
{
	int max = bench_sizes[BENCH_NSIZES - 1];
	unsigned char *buf = malloc((size_t)max);
	long count = 0;
	if (!buf)
		die("malloc", max);
	for (long iter = 0; iter < 100000000L; iter++) {
		MPI_Status st;
		int n;
		MPI_Recv(buf, max, MPI_BYTE, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
		MPI_Get_count(&st, MPI_BYTE, &n);
		if (st.MPI_TAG == TAG_DONE)
			break;
		switch (st.MPI_TAG) {
		case TAG_PING:
			MPI_Send(buf, n, MPI_BYTE, 0, TAG_PONG, MPI_COMM_WORLD);
			break;
		case TAG_RATE:
			count++;
			break;
		case TAG_RATE_END:
			MPI_Send(&count, 1, MPI_LONG, 0, TAG_RATE_ACK, MPI_COMM_WORLD);
			count = 0;
			break;
		default:
			die("unexpected tag", st.MPI_TAG);
		}
	}
	free(buf);
}

static void rank0(double scale, struct p2p_result *r)
{
	int max = bench_sizes[BENCH_NSIZES - 1];
	unsigned char *out = malloc((size_t)max), *in = malloc((size_t)max);
	double *rtt;
	rtt = malloc(sizeof(double) * (size_t)bench_max_reps(scale));
	if (!out || !in || !rtt)
		die("malloc", max);

	for (int k = 0; k < BENCH_NSIZES; k++) {
		int size = bench_sizes[k];
		struct bench_plan p = bench_plan_for(k, scale);
		int n = 0;
		double start = 0;
		for (int i = 0; i < p.warm + p.reps; i++) {
			double t0, t1;
			MPI_Status st;
			int got;
			if (i == p.warm)
				start = now_us();
			fill(out, size, i);
			t0 = now_us();
			MPI_Send(out, size, MPI_BYTE, 1, TAG_PING, MPI_COMM_WORLD);
			MPI_Recv(in, size, MPI_BYTE, 1, TAG_PONG, MPI_COMM_WORLD, &st);
			t1 = now_us();
			MPI_Get_count(&st, MPI_BYTE, &got);
			if (got != size || !check(in, size, i))
				die("echo differs from what was sent", i);
			if (i >= p.warm) {
				rtt[n++] = t1 - t0;
				if (n >= 10 && t1 - start > p.cap_us)
					break;
			}
		}
		r->oneway_us[k] = median(rtt, n) / 2;
		r->reps[k] = n;
	}

	{
		long lim = (long)(BENCH_RATE_MAX * scale), i, got;
		double cap = 2e6 * scale, t0, t1;
		if (lim < 1000)
			lim = 1000;
		fill(out, BENCH_RATE_SIZE, 0);
		t0 = now_us();
		for (i = 0; i < lim; i++) {
			MPI_Send(out, BENCH_RATE_SIZE, MPI_BYTE, 1, TAG_RATE, MPI_COMM_WORLD);
			if ((i & 1023) == 1023 && now_us() - t0 > cap) {
				i++;
				break;
			}
		}
		MPI_Send(&i, 1, MPI_LONG, 1, TAG_RATE_END, MPI_COMM_WORLD);
		MPI_Recv(&got, 1, MPI_LONG, 1, TAG_RATE_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		t1 = now_us();
		if (got != i)
			die("stream: receiver counted a different number of messages", (int)got);
		r->rate = (double)i / (t1 - t0) * 1e6;
		r->rate_msgs = i;
	}
	MPI_Send(out, 0, MPI_BYTE, 1, TAG_DONE, MPI_COMM_WORLD);
	free(out);
	free(in);
	free(rtt);
}

/* coll_fill writes what this rank contributes to operation op in
 * iteration i into in (n doubles a chunk) and, for bcast on a non-root
 * rank, clears it. */
static void coll_fill(int op, int rank, int i, double *in, int n)
{
	switch (op) {
	case COLL_ALLTOALL:
		for (int d = 0; d < COLL_NP; d++)
			for (int j = 0; j < n; j++)
				in[d * n + j] = coll_val(i, rank * 16 + d, j);
		break;
	case COLL_BCAST:
		for (int j = 0; j < n; j++)
			in[j] = rank == 0 ? coll_val(i, 0, j) : -1;
		break;
	default:
		for (int j = 0; j < n; j++)
			in[j] = coll_val(i, rank, j);
	}
}

/* coll_check tells whether out holds operation op's result of iteration
 * i at this rank. */
static int coll_check(int op, int rank, int i, const double *in, const double *out, int n)
{
	switch (op) {
	case COLL_ALLREDUCE:
		for (int j = 0; j < n; j++) {
			double want = 0;
			for (int r = 0; r < COLL_NP; r++)
				want += coll_val(i, r, j);
			if (out[j] != want)
				return 0;
		}
		return 1;
	case COLL_BCAST:
		for (int j = 0; j < n; j++)
			if (in[j] != coll_val(i, 0, j))
				return 0;
		return 1;
	case COLL_ALLGATHER:
		for (int r = 0; r < COLL_NP; r++)
			for (int j = 0; j < n; j++)
				if (out[r * n + j] != coll_val(i, r, j))
					return 0;
		return 1;
	default:
		for (int r = 0; r < COLL_NP; r++)
			for (int j = 0; j < n; j++)
				if (out[r * n + j] != coll_val(i, r * 16 + rank, j))
					return 0;
		return 1;
	}
}

/* coll_run times every collective on both ranks; rank 0 fills c. */
static void coll_run(int rank, double scale, struct coll_result *c)
{
	int maxn = coll_sizes[COLL_NSIZES - 1] / (int)sizeof(double);
	double *in = malloc(sizeof(double) * (size_t)(maxn * COLL_NP));
	double *out = malloc(sizeof(double) * (size_t)(maxn * COLL_NP));
	int maxreps = 0;
	for (int k = 0; k < COLL_NSIZES; k++)
		if (coll_plan_for(k, scale).reps > maxreps)
			maxreps = coll_plan_for(k, scale).reps;
	double *mine = malloc(sizeof(double) * (size_t)maxreps);
	double *theirs = malloc(sizeof(double) * (size_t)maxreps);
	if (!in || !out || !mine || !theirs)
		die("malloc", maxn);
	for (int o = 0; o < COLL_NOPS; o++) {
		for (int k = 0; k < COLL_NSIZES; k++) {
			int n = coll_sizes[k] / (int)sizeof(double), got = 0;
			struct bench_plan p = coll_plan_for(k, scale);
			double start = 0;
			for (int i = 0; i < p.warm + p.reps; i++) {
				int go = 1;
				double t0, t1;
				if (rank == 0 && i > p.warm + 10 && now_us() - start > p.cap_us)
					go = 0;
				MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
				if (!go)
					break;
				if (i == p.warm)
					start = now_us();
				coll_fill(o, rank, i, in, n);
				MPI_Barrier(MPI_COMM_WORLD);
				t0 = now_us();
				switch (o) {
				case COLL_ALLREDUCE:
					MPI_Allreduce(in, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
					break;
				case COLL_BCAST:
					MPI_Bcast(in, n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
					if (rank == 0)
						MPI_Recv(NULL, 0, MPI_BYTE, 1, TAG_BC_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
					else
						MPI_Send(NULL, 0, MPI_BYTE, 0, TAG_BC_ACK, MPI_COMM_WORLD);
					break;
				case COLL_ALLGATHER:
					MPI_Allgather(in, n, MPI_DOUBLE, out, n, MPI_DOUBLE, MPI_COMM_WORLD);
					break;
				default:
					MPI_Alltoall(in, n, MPI_DOUBLE, out, n, MPI_DOUBLE, MPI_COMM_WORLD);
				}
				t1 = now_us();
				if (!coll_check(o, rank, i, in, out, n))
					die("collective result differs from the expected one", o * 10 + k);
				if (i >= p.warm)
					mine[got++] = t1 - t0;
			}
			/* The slower rank's time, iteration by iteration. */
			if (rank == 1) {
				MPI_Send(mine, got, MPI_DOUBLE, 0, TAG_COLL_TIMES, MPI_COMM_WORLD);
				continue;
			}
			MPI_Status st;
			int tn;
			MPI_Recv(theirs, maxreps, MPI_DOUBLE, 1, TAG_COLL_TIMES, MPI_COMM_WORLD, &st);
			MPI_Get_count(&st, MPI_DOUBLE, &tn);
			if (tn != got)
				die("rank 1 timed another number of iterations", tn);
			for (int j = 0; j < got; j++)
				if (theirs[j] > mine[j])
					mine[j] = theirs[j];
			c->us[o][k] = median(mine, got);
			c->reps[o][k] = got;
		}
	}
	free(in);
	free(out);
	free(mine);
	free(theirs);
}

int main(int argc, char **argv)
{
	const char *system = "mpi", *mode = "local";
	double scale = 1;
	int rank, size, opt;
	struct p2p_result r;
	struct coll_result c;

	MPI_Init(&argc, &argv);
	while ((opt = getopt(argc, argv, "n:m:s:")) != -1) {
		switch (opt) {
		case 'n':
			system = optarg;
			break;
		case 'm':
			mode = optarg;
			break;
		case 's':
			scale = atof(optarg);
			if (scale <= 0 || scale > 100)
				die("-s must be in (0, 100]", 0);
			break;
		default:
			die("usage: mpi_bench [-n system] [-m local|remote] [-s scale]", 0);
		}
	}
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2)
		die("needs exactly 2 ranks, got", size);
	memset(&r, 0, sizeof r);
	memset(&c, 0, sizeof c);
	if (rank == 0)
		rank0(scale, &r);
	else
		rank1();
	coll_run(rank, scale, &c);
	if (rank == 0) {
		printf("{");
		print_p2p_fields(stdout, system, mode, &r);
		print_coll_fields(stdout, &c);
		printf("}\n");
		fflush(stdout);
	}
	MPI_Finalize();
	return 0;
}
