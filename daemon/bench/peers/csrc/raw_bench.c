/*
 * raw_bench: the floor under every process-based system on this host.
 *
 * Two processes (a parent and a forked child) exchange length-prefixed
 * messages over a TCP connection on 127.0.0.1 with TCP_NODELAY and nothing
 * else: no daemon, no packing, no library. It measures what the other
 * programs measure (one-way latency for 8 B, 1 KiB, 64 KiB and 1 MiB as half
 * the median round trip, bandwidth as size / one-way latency, the rate of a
 * one-way stream of 8-byte messages closed by an acknowledgement), and, as
 * the floor under task spawn, the time from the first fork until each of 1,
 * 8 and 32 fork+exec'd copies of this program has written a hello byte back
 * through a pipe.
 *
 * A machine whose kernel makes these slow makes PVM, Open MPI and dpvm slow
 * with it; the harness prints this row so that a reader can tell.
 *
 * Output: one JSON line in the shape of `dpvm bench pingpong --json` with
 * "system":"raw-tcp", "mode":"remote" (a network transport, to stand beside
 * transports between daemons) and a "spawn" array.
 *
 * Usage: raw_bench [-s scale]      (raw_bench hello FD is the spawned form)
 * Every loop is bounded in count and in time; every read has a timeout.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"

#define TIMEOUT_MS 60000
#define END_MARK 0xffffffffu
#define STREAM_FLAG 0x40000000u /* set in the length of stream messages */

static void die(const char *what)
{
	fprintf(stderr, "raw_bench[%d]: %s: %s\n", (int)getpid(), what, strerror(errno));
	exit(1);
}

static void write_full(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n > 0) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			die("write");
		c += w;
		n -= (size_t)w;
	}
}

/* read_full reads exactly n bytes from a socket with SO_RCVTIMEO set. */
static void read_full(int fd, void *p, size_t n)
{
	char *c = p;
	while (n > 0) {
		ssize_t r = read(fd, c, n); /* SO_RCVTIMEO bounds the wait */
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			errno = ETIMEDOUT;
			die("read");
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0)
			errno = ECONNRESET;
		if (r <= 0)
			die("read");
		c += r;
		n -= (size_t)r;
	}
}

/* send_msg writes the header and the payload with one system call where
 * the kernel takes them whole, so that a small message is one segment. */
static void send_msg(int fd, const unsigned char *buf, uint32_t n)
{
	uint32_t h = htonl(n);
	size_t len = (n == END_MARK) ? 0 : (n & ~STREAM_FLAG);
	struct iovec iov[2] = {{&h, 4}, {(void *)buf, len}};
	ssize_t w;
	do
		w = writev(fd, iov, len ? 2 : 1);
	while (w < 0 && errno == EINTR);
	if (w < 0)
		die("writev");
	if ((size_t)w < 4) {
		write_full(fd, (char *)&h + w, 4 - (size_t)w);
		w = 4;
	}
	if ((size_t)w - 4 < len)
		write_full(fd, buf + (w - 4), len - ((size_t)w - 4));
}

/* recv_msg reads one message into buf and returns its header: the length,
 * with STREAM_FLAG set for stream messages, or END_MARK. */
static uint32_t recv_msg(int fd, unsigned char *buf, uint32_t max)
{
	uint32_t h, n;
	read_full(fd, &h, 4);
	h = ntohl(h);
	if (h == END_MARK)
		return h;
	n = h & ~STREAM_FLAG;
	if (n > max) {
		errno = EMSGSIZE;
		die("recv_msg");
	}
	read_full(fd, buf, n);
	return h;
}

static void nodelay(int fd)
{
	int one = 1;
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
		die("setsockopt TCP_NODELAY");
	struct timeval tv = {TIMEOUT_MS / 1000, 0};
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
		die("setsockopt SO_RCVTIMEO");
}

/* echo serves the parent: pings come back, the stream is counted and its end
 * acknowledged with the count, a zero-length message ends it. */
static void echo(int fd)
{
	uint32_t max = (uint32_t)bench_sizes[BENCH_NSIZES - 1];
	unsigned char *buf = malloc(max);
	uint64_t count = 0;
	if (!buf)
		die("malloc");
	for (long iter = 0; iter < 100000000L; iter++) {
		uint32_t n = recv_msg(fd, buf, max);
		if (n == 0)
			break;
		if (n == END_MARK) {
			send_msg(fd, (unsigned char *)&count, sizeof count);
			count = 0;
		} else if (n & STREAM_FLAG) {
			count++;
		} else {
			send_msg(fd, buf, n);
		}
	}
	free(buf);
}

static void run_p2p(double scale, struct p2p_result *r)
{
	int ls, fd;
	struct sockaddr_in a;
	socklen_t al = sizeof a;
	pid_t child;
	uint32_t max = (uint32_t)bench_sizes[BENCH_NSIZES - 1];
	unsigned char *out = malloc(max), *in = malloc(max);
	double *rtt;

	rtt = malloc(sizeof(double) * (size_t)bench_max_reps(scale));
	if (!out || !in || !rtt)
		die("malloc");

	ls = socket(AF_INET, SOCK_STREAM, 0);
	if (ls < 0)
		die("socket");
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 1) < 0 ||
	    getsockname(ls, (struct sockaddr *)&a, &al) < 0)
		die("listen on 127.0.0.1");
	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		close(ls);
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
			die("connect");
		nodelay(fd);
		echo(fd);
		_exit(0);
	}
	fd = accept(ls, NULL, NULL);
	if (fd < 0)
		die("accept");
	close(ls);
	nodelay(fd);

	for (int k = 0; k < BENCH_NSIZES; k++) {
		int size = bench_sizes[k];
		struct bench_plan p = bench_plan_for(k, scale);
		int n = 0;
		double start = 0;
		for (int i = 0; i < p.warm + p.reps; i++) {
			double t0, t1;
			uint32_t got;
			if (i == p.warm)
				start = now_us();
			fill(out, size, i);
			t0 = now_us();
			send_msg(fd, out, (uint32_t)size);
			got = recv_msg(fd, in, max);
			t1 = now_us();
			if (got != (uint32_t)size || memcmp(in, out, (size_t)size) != 0) {
				errno = EPROTO;
				die("echo differs from what was sent");
			}
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
		long lim = (long)(BENCH_RATE_MAX * scale), i;
		uint64_t got = 0;
		double cap = 2e6 * scale, t0, t1;
		if (lim < 1000)
			lim = 1000;
		fill(out, BENCH_RATE_SIZE, 0);
		t0 = now_us();
		for (i = 0; i < lim; i++) {
			send_msg(fd, out, BENCH_RATE_SIZE | STREAM_FLAG);
			if ((i & 1023) == 1023 && now_us() - t0 > cap) {
				i++;
				break;
			}
		}
		send_msg(fd, NULL, END_MARK);
		if (recv_msg(fd, (unsigned char *)&got, sizeof got) != sizeof got)
			die("stream ack");
		t1 = now_us();
		if (got != (uint64_t)i) {
			errno = EPROTO;
			die("stream: receiver counted a different number of messages");
		}
		r->rate = (double)i / (t1 - t0) * 1e6;
		r->rate_msgs = i;
	}
	send_msg(fd, NULL, 0);
	close(fd);
	waitpid(child, NULL, 0);
	free(out);
	free(in);
	free(rtt);
}

static const int spawn_counts[] = {1, 8, 32};
static const int spawn_reps[] = {10, 5, 3};
#define NSPAWN 3

static void run_spawn(const char *self, double scale, double *us, int *reps_done)
{
	for (int k = 0; k < NSPAWN; k++) {
		int n = spawn_counts[k], m = 0;
		int reps = (int)(spawn_reps[k] * scale + 0.5);
		double v[16], start = now_us();
		if (reps < 1)
			reps = 1;
		for (int rep = 0; rep < reps && rep < 16; rep++) {
			int p[2];
			pid_t pids[32];
			char fdarg[16], c;
			double t0, t1;
			if (pipe(p) < 0)
				die("pipe");
			snprintf(fdarg, sizeof fdarg, "%d", p[1]);
			t0 = now_us();
			for (int j = 0; j < n; j++) {
				pids[j] = fork();
				if (pids[j] < 0)
					die("fork");
				if (pids[j] == 0) {
					close(p[0]);
					execl(self, self, "hello", fdarg, (char *)NULL);
					_exit(127);
				}
			}
			close(p[1]);
			for (int j = 0; j < n; j++) {
				struct pollfd pfd = {p[0], POLLIN, 0};
				if (poll(&pfd, 1, TIMEOUT_MS) <= 0 || read(p[0], &c, 1) != 1)
					die("hello");
			}
			t1 = now_us();
			close(p[0]);
			for (int j = 0; j < n; j++)
				waitpid(pids[j], NULL, 0);
			v[m++] = t1 - t0;
			if (now_us() - start > 20e6 * scale)
				break;
		}
		us[k] = median(v, m);
		reps_done[k] = m;
	}
}

int main(int argc, char **argv)
{
	double scale = 1;
	int opt;
	struct p2p_result r;
	double spawn_us[NSPAWN];
	int spawn_n[NSPAWN];

	if (argc == 3 && strcmp(argv[1], "hello") == 0) {
		int fd = atoi(argv[2]);
		char c = 'h';
		return write(fd, &c, 1) == 1 ? 0 : 1;
	}
	while ((opt = getopt(argc, argv, "s:")) != -1) {
		if (opt == 's') {
			scale = atof(optarg);
			if (scale > 0 && scale <= 100)
				continue;
			fprintf(stderr, "raw_bench: -s must be in (0, 100], not %s\n", optarg);
			return 2;
		}
		fprintf(stderr, "usage: raw_bench [-s scale]\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	memset(&r, 0, sizeof r);
	run_p2p(scale, &r);
	run_spawn(argv[0], scale, spawn_us, spawn_n);
	printf("{");
	print_p2p_fields(stdout, "raw-tcp", "remote", &r);
	printf(",\"spawn\":[");
	for (int k = 0; k < NSPAWN; k++)
		printf("%s{\"tasks\":%d,\"us\":%.1f,\"reps\":%d}", k ? "," : "",
		       spawn_counts[k], spawn_us[k], spawn_n[k]);
	printf("]}\n");
	return 0;
}
