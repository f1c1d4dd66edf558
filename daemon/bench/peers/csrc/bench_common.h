/*
 * bench_common.h: timing, medians and JSON output shared by the PVM and
 * Open MPI benchmark programs of the peer harness.
 *
 * Every figure is measured the way `dpvm bench pingpong` measures it:
 *   - one-way latency: half the median round trip of many repetitions;
 *   - bandwidth: message size divided by that one-way latency, in MB/s
 *     (10^6 bytes per second);
 *   - message rate: a one-way stream of 8-byte messages closed by an
 *     acknowledgement from the receiver, in messages per second.
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Message sizes of the latency rows, in bytes. */
static const int bench_sizes[] = {8, 1024, 65536, 1048576};
#define BENCH_NSIZES ((int)(sizeof bench_sizes / sizeof bench_sizes[0]))

/* Upper bounds on repetitions per size (the time cap may stop earlier). */
static const int bench_reps[] = {4000, 4000, 600, 120};

/* The repetition plan of one latency row: reps timed round trips after
 * warm untimed ones, stopping early (after at least 10) once the timed
 * ones have taken cap_us. */
struct bench_plan {
	int reps, warm;
	double cap_us;
};

/* bench_plan_scaled returns the plan of at most reps timed iterations
 * (at least 10) capped at cap_us, both scaled; a tenth of them (at least
 * 5) run untimed first. */
static inline struct bench_plan bench_plan_scaled(int reps, double cap_us, double scale)
{
	struct bench_plan p;
	p.reps = (int)(reps * scale);
	if (p.reps < 10)
		p.reps = 10;
	p.warm = p.reps / 10 < 5 ? 5 : p.reps / 10;
	p.cap_us = cap_us * scale;
	return p;
}

/* bench_plan_for returns the plan of row k at the given scale. */
static inline struct bench_plan bench_plan_for(int k, double scale)
{
	return bench_plan_scaled(bench_reps[k], k < 2 ? 2e6 : 4e6, scale);
}

/* bench_max_reps returns the most timed round trips any row may take at
 * the given scale: the length of the round-trip buffer. */
static inline int bench_max_reps(double scale)
{
	int max = 0;
	for (int k = 0; k < BENCH_NSIZES; k++)
		if (bench_plan_for(k, scale).reps > max)
			max = bench_plan_for(k, scale).reps;
	return max;
}

/* Small-message stream: at most this many messages, at most rate_secs. */
#define BENCH_RATE_MAX 400000
#define BENCH_RATE_SIZE 8

/* Tags shared by the programs. */
enum {
	TAG_PING = 1,
	TAG_PONG = 2,
	TAG_DONE = 3,
	TAG_RATE = 4,
	TAG_RATE_END = 5,
	TAG_RATE_ACK = 6,
	TAG_HELLO = 7,
	TAG_BYE = 8,
	TAG_EXIT = 9,
	TAG_CTL = 10,
	TAG_BC = 11,
	TAG_BC_ACK = 12,
	TAG_RED = 13,
	TAG_COLL_TIMES = 14
};

/* Collectives of two ranks (mpi_bench.c; dpvm's twin is in
 * daemon/bench/peers.go): every operation at every size, size being the
 * bytes of doubles each rank contributes (allreduce: its vector; bcast: the
 * root's vector; allgather: its chunk; alltoall: its chunk for each rank). */
#define COLL_NP 2
static const char *const coll_ops[] = {"allreduce", "bcast", "allgather", "alltoall"};
#define COLL_NOPS ((int)(sizeof coll_ops / sizeof coll_ops[0]))
enum { COLL_ALLREDUCE, COLL_BCAST, COLL_ALLGATHER, COLL_ALLTOALL };
static const int coll_sizes[] = {8, 8192, 1048576};
#define COLL_NSIZES ((int)(sizeof coll_sizes / sizeof coll_sizes[0]))
/* Upper bounds on timed iterations per size; each operation and size
 * stops early (after at least 10) once its timed iterations took 1 s. */
static const int coll_reps[] = {2000, 1000, 100};

/* coll_plan_for returns the plan of size k at the given scale. */
static inline struct bench_plan coll_plan_for(int k, double scale)
{
	return bench_plan_scaled(coll_reps[k], 1e6, scale);
}

/* coll_val is element j of what rank r contributes in iteration i (for
 * alltoall, r is sender * 16 + receiver): small integers, so that sums
 * are exact. */
static inline double coll_val(int i, int r, int j)
{
	return (double)((i + 3 * r + j) % 4096);
}

/* One collective's figure: the median over the iterations of the slower
 * rank's time. */
struct coll_result {
	double us[COLL_NOPS][COLL_NSIZES];
	int reps[COLL_NOPS][COLL_NSIZES];
};

/* print_coll_fields prints ,"coll_np":…,"coll":[…] of the JSON line. */
static inline void print_coll_fields(FILE *f, const struct coll_result *c)
{
	fprintf(f, ",\"coll_np\":%d,\"coll\":[", COLL_NP);
	for (int o = 0; o < COLL_NOPS; o++)
		for (int k = 0; k < COLL_NSIZES; k++)
			fprintf(f, "%s{\"op\":\"%s\",\"size\":%d,\"us\":%.3f,\"reps\":%d}",
				o || k ? "," : "", coll_ops[o], coll_sizes[k], c->us[o][k], c->reps[o][k]);
	fprintf(f, "]");
}

/* now_us returns a monotonic clock reading in microseconds. */
static inline double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static inline int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* median sorts v[0..n) in place and returns its median (0 when n is 0). */
static inline double median(double *v, int n)
{
	if (n <= 0)
		return 0;
	qsort(v, (size_t)n, sizeof v[0], cmp_double);
	if (n % 2)
		return v[n / 2];
	return (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* fill writes a pattern naming round i into buf, so that a wrong or
 * corrupted echo is noticed by check. */
static inline void fill(unsigned char *buf, int n, int i)
{
	for (int j = 0; j < n; j++)
		buf[j] = (unsigned char)(i + j);
}

static inline int check(const unsigned char *buf, int n, int i)
{
	for (int j = 0; j < n; j++)
		if (buf[j] != (unsigned char)(i + j))
			return 0;
	return 1;
}

/* Results of the point-to-point part. */
struct p2p_result {
	double oneway_us[BENCH_NSIZES];
	int reps[BENCH_NSIZES];
	double rate;     /* messages per second */
	long rate_msgs;  /* messages in the stream */
};

/* print_p2p_fields prints the fields of the dpvm pingpong JSON shape
 * (without the braces), so that a peer line can be read by the same code. */
static inline void print_p2p_fields(FILE *f, const char *system, const char *mode,
			     const struct p2p_result *r)
{
	fprintf(f, "\"system\":\"%s\",\"mode\":\"%s\",\"results\":[", system, mode);
	for (int k = 0; k < BENCH_NSIZES; k++) {
		double ow = r->oneway_us[k];
		fprintf(f, "%s{\"size\":%d,\"oneway_us\":%.3f,\"mbps\":%.1f,\"reps\":%d}",
			k ? "," : "", bench_sizes[k], ow,
			ow > 0 ? bench_sizes[k] / ow : 0.0, r->reps[k]);
	}
	fprintf(f, "],\"rate_msgs_per_s\":%.0f,\"rate_msgs\":%ld", r->rate, r->rate_msgs);
}

#endif
