package cli

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/bench"
)

// benchSEDCommand runs the Dynamic-SED experiment.
func benchSEDCommand() *cli.Command {
	return &cli.Command{
		Name:  "sed",
		Usage: "the Dynamic-SED experiment: a parallel job with and without the scheduler when a user arrives on a host",
		Description: "Runs the pi program on an embedded virtual machine whose hosts emulate their load\n" +
			"(labelled as emulation: tasks are really slowed, by pausing them for the time they compute). Mid-run,\n" +
			"interactive users arrive on one host and its load rises; the job runs once without\n" +
			"Dynamic-SED and once with it, and the table compares wall time, migrations and result.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "hosts", Value: 4, Usage: "daemons"},
			&cli.IntFlag{Name: "workers", Usage: "pi workers (default: one per host)"},
			&cli.Int64Flag{Name: "samples", Value: 1_000_000_000, Usage: "pi samples"},
			&cli.DurationFlag{Name: "period", Value: 200 * time.Millisecond, Usage: "δT, the scheduler's check period"},
			&cli.DurationFlag{Name: "after", Value: time.Second, Usage: "when the user arrives"},
			&cli.StringFlag{Name: "host", Value: "h2", Usage: "where the user arrives"},
			&cli.IntFlag{Name: "users", Value: 1, Usage: "interactive users arriving"},
			&cli.Float64Flag{Name: "load", Value: 2, Usage: "the load they bring (the host's tasks run 1+load times slower)"},
			&cli.StringFlag{Name: "via", Value: "direct", Usage: "how the scheduler moves tasks: direct or indirect"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(c *cli.Context) error {
			via, err := daemon.ParseVia(c.String("via"))
			if err != nil {
				return cli.Exit("bench sed: "+err.Error(), 2)
			}
			r, err := bench.SEDExperiment(c.Context, bench.SEDOptions{
				Hosts: c.Int("hosts"), Workers: c.Int("workers"), Samples: c.Int64("samples"),
				Period: c.Duration("period"), After: c.Duration("after"), Host: c.String("host"),
				Users: c.Int("users"), Load: c.Float64("load"), Via: via,
			})
			if err != nil {
				return cli.Exit("bench sed: "+err.Error(), 1)
			}
			if c.Bool("json") {
				return writeJSONLine(c.App.Writer, r)
			}
			return bench.WriteSED(c.App.Writer, r)
		},
	}
}
