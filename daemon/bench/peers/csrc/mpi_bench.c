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
 * Output: one JSON line in the shape of `dpvm bench pingpong --json`.
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

int main(int argc, char **argv)
{
	const char *system = "mpi", *mode = "local";
	double scale = 1;
	int rank, size, opt;
	struct p2p_result r;

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
	if (rank == 0) {
		rank0(scale, &r);
		printf("{");
		print_p2p_fields(stdout, system, mode, &r);
		printf("}\n");
		fflush(stdout);
	} else {
		rank1();
	}
	MPI_Finalize();
	return 0;
}
