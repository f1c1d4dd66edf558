package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon/bench"
)

// benchCommand is `dpvm bench`, the parent of the measurement commands.
func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure the runtime on this machine",
		Description: "Measurements on loopback, inside this process: 'pingpong' between two tasks\n" +
			"(on two daemons over QUIC, or --local on one daemon), 'quic' for raw quic-go\n" +
			"on the same loopback, 'pingpong --compare' for both side by side, and\n" +
			"'migrate' for direct against indirect migration by state size.\n" +
			"The machine's load shows in the figures: compare only what ran in one run.",
		Subcommands: []*cli.Command{
			benchPingpongCommand(),
			benchQUICCommand(),
			benchMigrateCommand(),
			benchSEDCommand(),
			benchPeersCommand(),
			benchNPBLoadCommand(),
			benchNPBOfficialCommand(),
			benchScaleCommand(),
		},
	}
}

// benchFlags are the bounds common to the measurement commands; tasks adds
// those of measurements between tasks.
func benchFlags(tasks bool) []cli.Flag {
	fs := []cli.Flag{
		&cli.BoolFlag{Name: "json", Usage: "print the results as one JSON object"},
		&cli.IntFlag{Name: "rounds", Value: 1, Usage: "repeat the run `N` times and report medians"},
		&cli.StringFlag{Name: "sizes", Value: "8,1K,64K,1M", Usage: "message `sizes` of the latency table (suffixes K, M)"},
		&cli.IntFlag{Name: "reps", Usage: "timed round trips per size, at most (default 4000 up to 1 KiB, 600 up to 64 KiB, 120 above)"},
		&cli.IntFlag{Name: "warmup", Usage: "untimed round trips before each size's timed ones (default a tenth of --reps, at least 5)"},
		&cli.DurationFlag{Name: "warm-time", Usage: "each size's warm-up lasts this long at least, after --warmup round trips (default 300ms)"},
		&cli.DurationFlag{Name: "max-time", Usage: "stop a size's round trips once this has passed (default 2s; at least 10 are timed)"},
		&cli.IntFlag{Name: "rate-msgs", Usage: "messages of the 8 B stream, at most (default 1000000)"},
		&cli.DurationFlag{Name: "rate-time", Usage: "duration of the 8 B stream, at most (default 1s)"},
		&cli.DurationFlag{Name: "timeout", Usage: "give up a run after this long (default 5m)"},
	}
	if tasks {
		fs = append(fs,
			&cli.IntFlag{Name: "rate-window", Usage: "messages the receiving task acknowledges at once in the stream (default 65536)"},
			&cli.IntFlag{Name: "spawn-reps", Usage: "timed spawns of 32 tasks (default 5)"},
			&cli.IntFlag{Name: "barrier-rounds", Usage: "timed barriers of 8 tasks (default 1000)"},
		)
	}
	return fs
}

// benchOptions reads the bounds from the flags.
func benchOptions(c *cli.Context) (bench.Options, error) {
	sizes, err := bench.ParseSizes(c.String("sizes"))
	if err != nil {
		return bench.Options{}, err
	}
	o := bench.Options{
		Sizes:         sizes,
		Reps:          c.Int("reps"),
		Warmup:        c.Int("warmup"),
		WarmTime:      c.Duration("warm-time"),
		MaxTime:       c.Duration("max-time"),
		RateMsgs:      c.Int("rate-msgs"),
		RateTime:      c.Duration("rate-time"),
		RateWindow:    c.Int("rate-window"),
		SpawnReps:     c.Int("spawn-reps"),
		BarrierRounds: c.Int("barrier-rounds"),
		Timeout:       c.Duration("timeout"),
	}
	if _, err := o.WithDefaults(); err != nil {
		return o, err
	}
	if c.Int("rounds") < 1 {
		return o, fmt.Errorf("%w: --rounds %d: need at least one", bench.ErrOptions, c.Int("rounds"))
	}
	return o, nil
}

func benchPingpongCommand() *cli.Command {
	return &cli.Command{
		Name:  "pingpong",
		Usage: "latency, bandwidth, message rate, spawn and barrier between tasks",
		Description: "Two tasks on two daemons of an in-process virtual machine talking QUIC over\n" +
			"loopback (--local: on one daemon) exchange messages: one-way latency of\n" +
			"8 B, 1 KiB, 64 KiB and 1 MiB (half the median round trip, after a warm-up),\n" +
			"bandwidth (size / one-way latency, MB/s = 10^6 B/s), the rate of a one-way\n" +
			"stream of 8 B messages, the time to spawn 32 tasks on the other daemon and\n" +
			"hear from each, and the mean time of a barrier of 8 tasks over both daemons.\n" +
			"--compare also measures raw quic-go in alternating rounds and prints the\n" +
			"ratios and the runtime's performance targets. --metrics makes the daemons\n" +
			"keep their Prometheus metrics (scraped once at the end); --compare --metrics\n" +
			"measures dpvm without and with metrics in alternating rounds instead: their cost.\n" +
			"Messages of 64 KiB and more between daemons go on the bulk lane, TCP beside\n" +
			"the QUIC connection, sealed under a TLS 1.3 handshake's keys (--no-bulk: over\n" +
			"QUIC; --small-bulk: smaller ones too once it is open). CPU per GB is the\n" +
			"process's CPU time (both ends) per 10^9 bytes carried by the timed round trips.",
		Flags: append(benchFlags(true),
			&cli.BoolFlag{Name: "local", Usage: "both tasks on one daemon"},
			&cli.BoolFlag{Name: "compare", Usage: "measure raw quic-go too and print the ratios (with --metrics: dpvm without metrics)"},
			&cli.BoolFlag{Name: "metrics", Usage: "the daemons keep their metrics, as with 'dpvm daemon --metrics-listen'"},
			&cli.BoolFlag{Name: "no-bulk", Usage: "every message between daemons over QUIC: the bulk lane (sealed TCP, from 64 KiB) off"},
			&cli.BoolFlag{Name: "small-bulk", Usage: "messages under 64 KiB between daemons take the bulk lane too once it is open (daemon.Config.BulkSmall)"},
		),
		Action: func(c *cli.Context) error {
			o, err := benchOptions(c)
			if err != nil {
				return benchUsage(err)
			}
			mode := bench.ModeRemote
			if c.Bool("local") {
				mode = bench.ModeLocal
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := c.App.Writer
			o.Metrics = c.Bool("metrics")
			o.NoBulk = c.Bool("no-bulk")
			o.SmallBulk = c.Bool("small-bulk")
			if c.Bool("compare") && o.Metrics {
				cmp, err := bench.CompareMetrics(ctx, mode, o, c.Int("rounds"))
				if err != nil {
					return benchFailed(err)
				}
				if c.Bool("json") {
					return writeJSONLine(out, cmp)
				}
				benchHeader(out, "pingpong --compare --metrics")
				return bench.WriteMetricsComparison(out, cmp)
			}
			if c.Bool("compare") {
				cmp, err := bench.Compare(ctx, mode, o, c.Int("rounds"))
				if err != nil {
					return benchFailed(err)
				}
				if c.Bool("json") {
					return writeJSONLine(out, cmp)
				}
				benchHeader(out, "pingpong --compare")
				return bench.WriteComparison(out, cmp)
			}
			res, err := bench.Rounds(c.Int("rounds"), func() (*bench.Result, error) { return bench.Pingpong(ctx, mode, o) })
			if err != nil {
				return benchFailed(err)
			}
			return writeResult(c, out, "pingpong", res)
		},
	}
}

func benchQUICCommand() *cli.Command {
	return &cli.Command{
		Name:  "quic",
		Usage: "the raw quic-go baseline: one connection, one stream, an echo server",
		Description: "The same latency table as 'pingpong' over one quic-go stream on loopback,\n" +
			"with the daemons' mutual TLS, flow-control windows and socket buffers, and\n" +
			"the rate of pipelined 8 B writes closed by an acknowledgement.",
		Flags: benchFlags(false),
		Action: func(c *cli.Context) error {
			o, err := benchOptions(c)
			if err != nil {
				return benchUsage(err)
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, err := bench.Rounds(c.Int("rounds"), func() (*bench.Result, error) { return bench.QUIC(ctx, o) })
			if err != nil {
				return benchFailed(err)
			}
			return writeResult(c, c.App.Writer, "quic", res)
		},
	}
}

func writeResult(c *cli.Context, out io.Writer, name string, res *bench.Result) error {
	if c.Bool("json") {
		return writeJSONLine(out, res)
	}
	benchHeader(out, name)
	return bench.WriteText(out, res)
}

// benchHeader names the command and the machine the figures belong to.
func benchHeader(out io.Writer, name string) {
	fmt.Fprintf(out, "dpvm bench %s on %s/%s, %d CPUs, %s\n", name, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
}

func benchUsage(err error) error {
	return cli.Exit(err.Error(), 2)
}

func benchFailed(err error) error {
	if errors.Is(err, bench.ErrOptions) {
		return benchUsage(err)
	}
	return cli.Exit(err.Error(), 1)
}
