package cli

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon/bench"
)

// benchMigrateCommand is `dpvm bench migrate`: DynamicPVM's Table 2 today.
func benchMigrateCommand() *cli.Command {
	return &cli.Command{
		Name:  "migrate",
		Usage: "direct against indirect migration by state size (DynamicPVM's Table 2)",
		Description: "Two daemons of an in-process virtual machine talk QUIC over loopback and\n" +
			"share a directory. For each size, a task holding that many MiB of state (a\n" +
			"[]float64 filled with a seeded pattern) is moved back and forth between them,\n" +
			"directly (a QUIC stream) and indirectly (a file in the shared directory); its\n" +
			"state is verified after the moves. Beside the moves, in alternating order, run\n" +
			"their baselines on the checkpoint's bytes: raw quic-go on one connection, and\n" +
			"write+fsync+read of a file in the same directory. Prints the medians: seconds\n" +
			"per move, the task's freeze time (suspension to resumption), the ratios and\n" +
			"the targets. The default sizes take 10-20 seconds; adding 256 and 1024 MiB\n" +
			"makes it about two minutes and 5 GiB of memory. With --criu FILE, CRIU's\n" +
			"same-host dump+restore of a process holding the same state, and its move\n" +
			"between hosts (dump, ssh copy of the images, restore), as\n" +
			"integration/criu/run.sh measured them, are printed and plotted beside them;\n" +
			"they replace the feature's CRIU figures in the targets, and the move between\n" +
			"hosts judges direct migration from 256 MiB up.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "sizes", Value: "0,0.5,1,2,4,8,12,16,64", Usage: "state `sizes` in MiB, comma-separated (up to 4096)"},
			&cli.StringFlag{Name: "via", Value: "direct,indirect", Usage: "migration `modes`: direct, indirect or both"},
			&cli.IntFlag{Name: "reps", Value: 5, Usage: "timed rounds per size"},
			&cli.IntFlag{Name: "warmup", Value: 1, Usage: "untimed rounds per size before the timed ones (0: none)"},
			&cli.StringFlag{Name: "dir", Usage: "the shared `directory` (default: a new one under $TMPDIR, removed after)"},
			&cli.BoolFlag{Name: "baselines", Value: true, Usage: "measure raw quic-go and write+fsync+read too (--baselines=false: not)"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of the state's pattern"},
			&cli.DurationFlag{Name: "move-timeout", Value: bench.DefaultMoveTimeout, Usage: "bound on each move's wait for a safe point and a direct checkpoint"},
			&cli.DurationFlag{Name: "timeout", Value: bench.DefaultMigrateTimeout, Usage: "give up the run after this long"},
			&cli.BoolFlag{Name: "json", Usage: "print the results as one JSON object"},
			&cli.BoolFlag{Name: "csv", Usage: "print the results as CSV"},
			&cli.StringFlag{Name: "plot", Usage: "also draw seconds against size as an SVG `FILE`"},
			&cli.StringFlag{Name: "criu", Usage: "CRIU figures (same-host dump+restore, and between hosts) to set beside the moves: the JSON lines of integration/criu/run.sh in `FILE`"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress lines on stderr"},
		},
		Action: func(c *cli.Context) error {
			o, err := benchMigrateOptions(c)
			if err != nil {
				return benchUsage(err)
			}
			if c.Bool("json") && c.Bool("csv") {
				return benchUsage(fmt.Errorf("%w: --json and --csv together", bench.ErrOptions))
			}
			if !c.Bool("quiet") {
				o.Progress = c.App.ErrWriter
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, err := bench.Migrate(ctx, o)
			if err != nil {
				return benchFailed(err)
			}
			if p := c.String("plot"); p != "" {
				if err := writeMigratePlot(p, rep); err != nil {
					return cli.Exit(err.Error(), 1)
				}
			}
			out := c.App.Writer
			switch {
			case c.Bool("json"):
				return writeJSONLine(out, rep)
			case c.Bool("csv"):
				return bench.WriteMigrateCSV(out, rep)
			}
			benchHeader(out, "migrate")
			return bench.WriteMigrateText(out, rep)
		},
	}
}

// benchMigrateOptions reads the options of `dpvm bench migrate`.
func benchMigrateOptions(c *cli.Context) (bench.MigrateOptions, error) {
	sizes, err := bench.ParseMiBSizes(c.String("sizes"))
	if err != nil {
		return bench.MigrateOptions{}, err
	}
	vias, err := bench.ParseVias(c.String("via"))
	if err != nil {
		return bench.MigrateOptions{}, err
	}
	if c.Int("reps") < 1 {
		return bench.MigrateOptions{}, fmt.Errorf("%w: --reps %d: need at least one", bench.ErrOptions, c.Int("reps"))
	}
	if c.Int("warmup") < 0 {
		return bench.MigrateOptions{}, fmt.Errorf("%w: --warmup %d is negative", bench.ErrOptions, c.Int("warmup"))
	}
	if c.Uint64("seed") == 0 {
		return bench.MigrateOptions{}, fmt.Errorf("%w: --seed 0: give a positive seed", bench.ErrOptions)
	}
	warm := c.Int("warmup")
	if warm == 0 {
		warm = -1 // none
	}
	o := bench.MigrateOptions{
		SizesMiB:    sizes,
		Via:         vias,
		Reps:        c.Int("reps"),
		Warmup:      warm,
		Dir:         c.String("dir"),
		NoBaselines: !c.Bool("baselines"),
		Seed:        c.Uint64("seed"),
		MoveTimeout: c.Duration("move-timeout"),
		Timeout:     c.Duration("timeout"),
	}
	if p := c.String("criu"); p != "" {
		f, err := os.Open(p)
		if err != nil {
			return o, fmt.Errorf("%w: --criu: %w", bench.ErrOptions, err)
		}
		defer f.Close()
		if o.CRIU, err = bench.ReadCRIU(f); err != nil {
			return o, fmt.Errorf("--criu %s: %w", p, err)
		}
	}
	if _, err := o.WithDefaults(); err != nil {
		return o, err
	}
	return o, nil
}

// writeMigratePlot draws the report to path.
func writeMigratePlot(path string, rep *bench.MigrateReport) error {
	return writeFile(path, "plot", func(w io.Writer) error { return bench.WriteMigrateSVG(w, rep) })
}

// writeFile creates path and writes it with write; what names the file in
// errors.
func writeFile(path, what string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
