// Package bench measures dpvm's message passing and sets it beside raw
// quic-go on the same loopback, so the runtime's own cost shows as a ratio.
// It backs `dpvm bench pingpong` and `dpvm bench quic`; Migrate backs `dpvm
// bench migrate` (direct versus indirect migration against state size,
// DynamicPVM's Table 2, with raw quic-go and write+fsync+read of the same
// bytes as baselines), and SEDExperiment backs `dpvm bench sed` (a job with
// and without the Dynamic-SED scheduler when a user arrives on a host).
//
// A TaskPair is two tasks of a running virtual machine: a pinger (a root
// task that carries out the measurements handed to it by the caller) and
// an echo task. In ModeRemote they live on two daemons of an in-process
// virtual machine talking real QUIC over 127.0.0.1 (the master and one
// host); in ModeLocal both live on one standalone daemon. A QUICPair is
// one quic-go connection with one stream to an echo server, with the same
// mutual TLS, flow-control windows and socket buffers as the daemons'
// transport, and no dpvm code on the path.
//
// Both implement Pair, and Measure runs the same protocol on either:
//
//   - one-way latency per message size: half the median round trip of up
//     to Reps timed round trips, after a warm-up, stopped early once
//     MaxTime has passed (never before 10 round trips); every echo is
//     compared with what was sent;
//   - bandwidth per size: the size divided by that one-way latency, in MB/s
//     (10^6 bytes per second);
//   - message rate: a one-way stream of 8-byte messages (at most RateMsgs,
//     for at most RateTime), closed by an acknowledgement carrying the
//     receiver's count, which must match.
//
// For task pairs, Pingpong adds the time to spawn 32 tasks on the other
// daemon and hear a hello from each, and the mean time of a barrier of 8
// tasks spread over both daemons. Compare runs dpvm and raw quic-go in
// alternating rounds and reports the medians and the per-round ratios.
//
// These are measurements of wall-clock time on a real network stack: they
// are for benchmarks and the command line, never for timed assertions in
// tests. Every loop is bounded both in count and in time.
package bench
