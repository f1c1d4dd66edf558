/*
 * pvm_bench: PVM 3.4 side of the dpvm peer comparison.
 *
 * Started by hand (or by run.sh) on a host whose pvmd is running, it spawns
 * copies of itself and measures, on this host:
 *   p2p    one-way latency for 8 B, 1 KiB, 64 KiB and 1 MiB (half the median
 *          round trip), bandwidth (size / one-way latency) and the rate of a
 *          one-way stream of 8-byte messages closed by an acknowledgement;
 *   spawn  time from the pvm_spawn call until each of 1, 8 and 32 spawned
 *          tasks has sent a hello back (median over repetitions);
 *   coll   pvm_barrier, pvm_bcast (8 B, until all members acknowledged) and
 *          pvm_reduce (PvmSum of one double) in a frozen group of 8 tasks,
 *          each the median of many iterations started by an untimed barrier.
 * Every message is packed with PvmDataRaw. With -r direct every task asks
 * for direct task-to-task links (pvm_setopt(PvmRoute, PvmRouteDirect));
 * with -r daemon (PVM's default) messages go through pvmd.
 *
 * Output: one JSON line in the shape of `dpvm bench pingpong --json` with a
 * "system" field and extra fields for spawn and the collectives.
 *
 * Usage: pvm_bench [-r daemon|direct] [-s scale] [-p p2p,spawn,coll]
 *                  [-g groupsize] [-t timeout_s] [-f fragsize]
 * -f sets PvmFragSize in every task (0, the default, keeps PVM's own).
 * Children are started with a role as their first argument (pong, hello,
 * member); they are not meant to be started by hand.
 *
 * Every loop is bounded in count and in time; every receive has a timeout.
 */
#include <errno.h>
#include <pvm3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "bench_common.h"

#define PROG "pvm_bench"
#define GROUP "dpvm_peers"
#define MAX_GROUP 64
#define MAX_SPAWN 32

static int timeout_s = 60;
static int direct;
static int fragsize; /* PvmFragSize; 0 leaves PVM's default */

static void die(const char *what, int code)
{
	fprintf(stderr, "pvm_bench[t%x]: %s: error %d", pvm_mytid(), what, code);
	if (code < 0)
		pvm_perror("");
	fprintf(stderr, "\n");
	pvm_exit();
	exit(1);
}

static void ok(int rc, const char *what)
{
	if (rc < 0)
		die(what, rc);
}

/* recv_tmo receives a message from tid with tag, or dies after timeout_s. */
static int recv_tmo(int tid, int tag, const char *what)
{
	struct timeval tv = {timeout_s, 0};
	int bufid = pvm_trecv(tid, tag, &tv);
	if (bufid == 0)
		die(what, -ETIMEDOUT);
	ok(bufid, what);
	return bufid;
}

static void set_route(void)
{
	if (direct)
		ok(pvm_setopt(PvmRoute, PvmRouteDirect), "setopt PvmRoute");
	if (fragsize > 0)
		ok(pvm_setopt(PvmFragSize, fragsize), "setopt PvmFragSize");
}

static void send_bytes(int tid, int tag, const unsigned char *buf, int n)
{
	ok(pvm_initsend(PvmDataRaw), "initsend");
	if (n > 0)
		ok(pvm_pkbyte((char *)buf, n, 1), "pkbyte");
	ok(pvm_send(tid, tag), "send");
}

static void send_long(int tid, int tag, long v)
{
	ok(pvm_initsend(PvmDataRaw), "initsend");
	ok(pvm_pklong(&v, 1, 1), "pklong");
	ok(pvm_send(tid, tag), "send");
}

static long recv_long(int tid, int tag, const char *what)
{
	long v;
	recv_tmo(tid, tag, what);
	ok(pvm_upklong(&v, 1, 1), "upklong");
	return v;
}

/* route_arg writes the route argument given to spawned children. */
static void route_arg(char *buf, size_t n)
{
	snprintf(buf, n, "%s/%d", direct ? "direct" : "daemon", fragsize);
}

/* ---- children ---- */

/* pong echoes pings, counts the small-message stream and acknowledges its
 * end, until told it is done. */
static void child_pong(void)
{
	int parent = pvm_parent();
	unsigned char *buf = malloc(bench_sizes[BENCH_NSIZES - 1]);
	long count = 0;
	if (!buf)
		die("malloc", -ENOMEM);
	/* Bounded: far more messages than any run sends, each wait timed. */
	for (long iter = 0; iter < 100000000L; iter++) {
		int bufid = recv_tmo(parent, -1, "pong recv");
		int bytes, tag, src;
		ok(pvm_bufinfo(bufid, &bytes, &tag, &src), "bufinfo");
		if (tag == TAG_DONE)
			break;
		switch (tag) {
		case TAG_PING:
			if (bytes > bench_sizes[BENCH_NSIZES - 1])
				die("ping too large", bytes);
			ok(pvm_upkbyte((char *)buf, bytes, 1), "upkbyte");
			send_bytes(parent, TAG_PONG, buf, bytes);
			break;
		case TAG_RATE:
			ok(pvm_upkbyte((char *)buf, bytes, 1), "upkbyte");
			count++;
			break;
		case TAG_RATE_END: {
			long sent;
			ok(pvm_upklong(&sent, 1, 1), "upklong");
			send_long(parent, TAG_RATE_ACK, count);
			count = 0;
			break;
		}
		default:
			die("unexpected tag", tag);
		}
	}
	free(buf);
}

/* ---- point to point ---- */

static void run_p2p(double scale, struct p2p_result *r)
{
	char route[32];
	char *args[] = {"pong", route, NULL};
	int child;
	unsigned char *out, *in;
	double *rtt;

	route_arg(route, sizeof route);
	if (pvm_spawn(PROG, args, PvmTaskDefault, "", 1, &child) != 1)
		die("spawn pong", child);
	out = malloc(bench_sizes[BENCH_NSIZES - 1]);
	in = malloc(bench_sizes[BENCH_NSIZES - 1]);
	rtt = malloc(sizeof(double) * (size_t)bench_max_reps(scale));
	if (!out || !in || !rtt)
		die("malloc", -ENOMEM);

	for (int k = 0; k < BENCH_NSIZES; k++) {
		int size = bench_sizes[k];
		struct bench_plan p = bench_plan_for(k, scale);
		int n = 0;
		double start = 0;
		for (int i = 0; i < p.warm + p.reps; i++) {
			double t0, t1;
			int bufid, bytes, tag, src;
			if (i == p.warm)
				start = now_us();
			fill(out, size, i);
			t0 = now_us();
			send_bytes(child, TAG_PING, out, size);
			bufid = recv_tmo(child, TAG_PONG, "recv pong");
			ok(pvm_upkbyte((char *)in, size, 1), "upkbyte");
			t1 = now_us();
			ok(pvm_bufinfo(bufid, &bytes, &tag, &src), "bufinfo");
			if (bytes != size || !check(in, size, i))
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

	/* One-way stream of 8-byte messages, closed by an acknowledgement. */
	{
		long max = (long)(BENCH_RATE_MAX * scale), i;
		double cap = 2e6 * scale, t0, t1;
		long got;
		if (max < 1000)
			max = 1000;
		fill(out, BENCH_RATE_SIZE, 0);
		t0 = now_us();
		for (i = 0; i < max; i++) {
			send_bytes(child, TAG_RATE, out, BENCH_RATE_SIZE);
			if ((i & 1023) == 1023 && now_us() - t0 > cap) {
				i++;
				break;
			}
		}
		send_long(child, TAG_RATE_END, i);
		got = recv_long(child, TAG_RATE_ACK, "recv rate ack");
		t1 = now_us();
		if (got != i)
			die("stream: receiver counted a different number of messages", (int)got);
		r->rate = (double)i / (t1 - t0) * 1e6;
		r->rate_msgs = i;
	}
	send_bytes(child, TAG_DONE, NULL, 0);
	free(out);
	free(in);
	free(rtt);
}

/* ---- spawn ---- */

static void child_hello(void)
{
	int parent = pvm_parent();
	send_long(parent, TAG_HELLO, pvm_mytid());
	recv_tmo(parent, TAG_BYE, "hello wait bye");
}

static const int spawn_counts[] = {1, 8, 32};
static const int spawn_reps[] = {10, 5, 3};
#define NSPAWN 3

static void run_spawn(double scale, double *spawn_us, int *spawn_n)
{
	char route[32];
	char *args[] = {"hello", route, NULL};
	int tids[MAX_SPAWN];
	route_arg(route, sizeof route);
	for (int k = 0; k < NSPAWN; k++) {
		int n = spawn_counts[k];
		int reps = (int)(spawn_reps[k] * scale + 0.5);
		double v[16], start = now_us();
		int m = 0;
		if (reps < 1)
			reps = 1;
		for (int rep = 0; rep < reps && rep < 16; rep++) {
			double t0, t1;
			int got;
			t0 = now_us();
			got = pvm_spawn(PROG, args, PvmTaskDefault, "", n, tids);
			if (got != n)
				die("spawn hello tasks", got < 0 ? got : tids[got]);
			for (int j = 0; j < n; j++)
				recv_long(-1, TAG_HELLO, "recv hello");
			t1 = now_us();
			v[m++] = t1 - t0;
			/* Let them go and wait until every one has exited, so the
			 * next repetition starts on an idle virtual machine. */
			ok(pvm_notify(PvmTaskExit, TAG_EXIT, n, tids), "notify");
			for (int j = 0; j < n; j++)
				send_bytes(tids[j], TAG_BYE, NULL, 0);
			for (int j = 0; j < n; j++)
				recv_tmo(-1, TAG_EXIT, "recv exit notify");
			if (now_us() - start > 20e6 * scale)
				break;
		}
		spawn_us[k] = median(v, m);
		spawn_n[k] = m;
	}
}

/* ---- collectives ---- */

enum { OP_STOP = 0, OP_BARRIER = 1, OP_BCAST = 2, OP_REDUCE = 3 };

/* do_op performs one collective operation; instance 0 (the task that
 * spawned the others) is the root. */
static void do_op(int op, int inst, int gsize, int iter)
{
	switch (op) {
	case OP_BARRIER:
		ok(pvm_barrier(GROUP, gsize), "barrier");
		break;
	case OP_BCAST:
		if (inst == 0) {
			unsigned char b[8];
			fill(b, 8, iter);
			ok(pvm_initsend(PvmDataRaw), "initsend");
			ok(pvm_pkbyte((char *)b, 8, 1), "pkbyte");
			ok(pvm_bcast(GROUP, TAG_BC), "bcast");
			for (int j = 1; j < gsize; j++)
				recv_tmo(-1, TAG_BC_ACK, "recv bcast ack");
		} else {
			unsigned char b[8];
			recv_tmo(-1, TAG_BC, "recv bcast");
			ok(pvm_upkbyte((char *)b, 8, 1), "upkbyte");
			if (!check(b, 8, iter))
				die("bcast payload differs", iter);
			send_bytes(pvm_parent(), TAG_BC_ACK, NULL, 0);
		}
		break;
	case OP_REDUCE: {
		double x = inst + 1;
		ok(pvm_reduce(PvmSum, &x, 1, PVM_DOUBLE, TAG_RED, GROUP, 0), "reduce");
		if (inst == 0 && x != gsize * (gsize + 1) / 2.0)
			die("reduce result wrong", (int)x);
		break;
	}
	default:
		die("unknown op", op);
	}
}

static void child_member(int gsize)
{
	int parent = pvm_parent();
	int inst = pvm_joingroup(GROUP);
	ok(inst, "joingroup");
	ok(pvm_freezegroup(GROUP, gsize), "freezegroup");
	for (int iter = 0; iter < 1000000; iter++) {
		long op = recv_long(parent, TAG_CTL, "member recv ctl");
		if (op == OP_STOP)
			break;
		ok(pvm_barrier(GROUP, gsize), "barrier");
		do_op((int)op, inst, gsize, (int)(op * 1000000 + iter));
	}
	pvm_lvgroup(GROUP);
}

static void run_coll(double scale, int gsize, double *us, int *iters)
{
	char route[32], gs[16];
	char *args[] = {"member", route, gs, NULL};
	int tids[MAX_GROUP], inst, iter = 0;
	double *v;
	int maxit = (int)(300 * scale);
	if (maxit < 10)
		maxit = 10;
	v = malloc(sizeof(double) * (size_t)maxit);
	if (!v)
		die("malloc", -ENOMEM);
	route_arg(route, sizeof route);
	snprintf(gs, sizeof gs, "%d", gsize);
	inst = pvm_joingroup(GROUP);
	if (inst != 0)
		die("joingroup: the root must be instance 0", inst);
	if (pvm_spawn(PROG, args, PvmTaskDefault, "", gsize - 1, tids) != gsize - 1)
		die("spawn members", tids[0]);
	ok(pvm_freezegroup(GROUP, gsize), "freezegroup");
	for (int op = OP_BARRIER; op <= OP_REDUCE; op++) {
		int n = 0;
		double start = now_us();
		for (int i = 0; i < maxit; i++) {
			double t0, t1;
			ok(pvm_initsend(PvmDataRaw), "initsend");
			{
				long o = op;
				ok(pvm_pklong(&o, 1, 1), "pklong");
			}
			ok(pvm_bcast(GROUP, TAG_CTL), "bcast ctl");
			ok(pvm_barrier(GROUP, gsize), "barrier");
			t0 = now_us();
			do_op(op, 0, gsize, op * 1000000 + iter);
			t1 = now_us();
			iter++;
			v[n++] = t1 - t0;
			if (n >= 10 && t1 - start > 5e6 * scale)
				break;
		}
		us[op - 1] = median(v, n);
		iters[op - 1] = n;
	}
	{
		long o = OP_STOP;
		ok(pvm_initsend(PvmDataRaw), "initsend");
		ok(pvm_pklong(&o, 1, 1), "pklong");
		ok(pvm_bcast(GROUP, TAG_CTL), "bcast stop");
	}
	pvm_lvgroup(GROUP);
	free(v);
}

/* ---- main ---- */

static int has(const char *list, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
		if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	const char *parts = "p2p,spawn,coll";
	double scale = 1;
	int gsize = 8, opt;
	struct p2p_result r;
	double spawn_us[NSPAWN] = {0}, coll_us[3] = {0};
	int spawn_n[NSPAWN] = {0}, coll_n[3] = {0};
	int mytid;
	char system[64];

	if (argc >= 3 && (strcmp(argv[1], "pong") == 0 || strcmp(argv[1], "hello") == 0 ||
			  strcmp(argv[1], "member") == 0)) {
		direct = strncmp(argv[2], "direct", 6) == 0;
		/* The route argument may carry a fragment size: "daemon/65536". */
		if (strchr(argv[2], '/'))
			fragsize = atoi(strchr(argv[2], '/') + 1);
		if (pvm_mytid() < 0)
			return 1;
		set_route();
		if (strcmp(argv[1], "pong") == 0)
			child_pong();
		else if (strcmp(argv[1], "hello") == 0)
			child_hello();
		else
			child_member(argc >= 4 ? atoi(argv[3]) : 8);
		pvm_exit();
		return 0;
	}

	while ((opt = getopt(argc, argv, "r:s:p:g:t:f:")) != -1) {
		switch (opt) {
		case 'r':
			if (strcmp(optarg, "direct") == 0)
				direct = 1;
			else if (strcmp(optarg, "daemon") == 0)
				direct = 0;
			else {
				fprintf(stderr, "pvm_bench: -r must be daemon or direct, not %s\n", optarg);
				return 2;
			}
			break;
		case 's':
			scale = atof(optarg);
			if (scale <= 0 || scale > 100) {
				fprintf(stderr, "pvm_bench: -s must be in (0, 100], not %s\n", optarg);
				return 2;
			}
			break;
		case 'p':
			parts = optarg;
			break;
		case 'g':
			gsize = atoi(optarg);
			if (gsize < 2 || gsize > MAX_GROUP) {
				fprintf(stderr, "pvm_bench: -g must be in [2, %d], not %s\n", MAX_GROUP, optarg);
				return 2;
			}
			break;
		case 'f':
			fragsize = atoi(optarg);
			if (fragsize < 0 || fragsize > (1 << 24)) {
				fprintf(stderr, "pvm_bench: -f must be in [0, 16777216], not %s\n", optarg);
				return 2;
			}
			break;
		case 't':
			timeout_s = atoi(optarg);
			if (timeout_s < 1) {
				fprintf(stderr, "pvm_bench: -t must be at least 1, not %s\n", optarg);
				return 2;
			}
			break;
		default:
			fprintf(stderr, "usage: pvm_bench [-r daemon|direct] [-s scale] "
					"[-p p2p,spawn,coll] [-g groupsize] [-t timeout_s] "
					"[-f fragsize]\n");
			return 2;
		}
	}

	mytid = pvm_mytid();
	if (mytid < 0) {
		pvm_perror("pvm_bench: pvm_mytid (is pvmd running?)");
		return 1;
	}
	set_route();
	fprintf(stderr, "pvm_bench: route %s, fragment size %d\n", direct ? "direct" : "daemon",
		pvm_getopt(PvmFragSize));
	memset(&r, 0, sizeof r);
	if (has(parts, "p2p"))
		run_p2p(scale, &r);
	if (has(parts, "spawn"))
		run_spawn(scale, spawn_us, spawn_n);
	if (has(parts, "coll"))
		run_coll(scale, gsize, coll_us, coll_n);

	/* The system is named after the route, and after the fragment size
	 * when it is not PVM's default. */
	snprintf(system, sizeof system, "%s", direct ? "pvm-direct" : "pvm-daemon");
	if (fragsize > 0)
		snprintf(system + strlen(system), sizeof system - strlen(system), "-frag%d", fragsize);

	/* Only what was measured is printed: a part left out is absent. */
	printf("{");
	if (has(parts, "p2p"))
		print_p2p_fields(stdout, system, "local", &r);
	else
		printf("\"system\":\"%s\",\"mode\":\"local\",\"results\":[]", system);
	if (has(parts, "spawn")) {
		printf(",\"spawn\":[");
		for (int k = 0; k < NSPAWN; k++)
			printf("%s{\"tasks\":%d,\"us\":%.1f,\"reps\":%d}", k ? "," : "",
			       spawn_counts[k], spawn_us[k], spawn_n[k]);
		printf("]");
	}
	if (has(parts, "coll"))
		printf(",\"group_size\":%d,\"barrier_us\":%.2f,\"bcast_us\":%.2f,"
		       "\"reduce_us\":%.2f,\"coll_iters\":[%d,%d,%d]",
		       gsize, coll_us[0], coll_us[1], coll_us[2], coll_n[0], coll_n[1], coll_n[2]);
	printf("}\n");
	fflush(stdout);
	pvm_exit();
	return 0;
}
