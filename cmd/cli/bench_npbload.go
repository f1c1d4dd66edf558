package cli

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/bench"
)

// benchNPBLoadCommand is `dpvm bench npb-load`: DynamicPVM's Table 3.
func benchNPBLoadCommand() *cli.Command {
	return &cli.Command{
		Name:  "npb-load",
		Usage: "DynamicPVM's Table 3: NPB kernels with a host made busy mid-run, with and without Dynamic-SED",
		Description: "Runs each NPB kernel on an embedded virtual machine of --hosts daemons talking QUIC\n" +
			"over loopback whose hosts emulate their load (labelled as emulation: tasks are\n" +
			"really slowed, by pausing them for the time they compute). When rank 0 has done --at of its\n" +
			"iterations, --users interactive users arrive on a host that holds a worker, with\n" +
			"background --load, so that host's tasks run 1+load times slower. Each kernel runs\n" +
			"with migration disabled and with the Dynamic-SED scheduler for each checkpoint\n" +
			"mode (--via); an untimed run of each kernel comes first. The table gives per\n" +
			"kernel the times (medians over --rounds, with the range), migrations, the largest\n" +
			"checkpoint and the speedup. The overhead when nothing migrates comes from\n" +
			"--idle-rounds pairs of runs on the idle machine, scheduler off and Dynamic-SED on,\n" +
			"in ABBA order (off-on, on-off, …): the median of the per-pair ratios with its\n" +
			"interquartile range and range, in wall time and in the process's CPU time\n" +
			"(user+sys, far less sensitive to other tenants of a shared machine), and whether\n" +
			"the median wall-time ratio meets the 2% target. Before them, the scheduler's own\n" +
			"cost is measured directly: the virtual machine without a kernel sits idle for\n" +
			"--probe with the scheduler off and on (--probe-rounds pairs, ABBA), and the CPU\n" +
			"it adds per second is given as a share of each kernel's CPU time. Every run must\n" +
			"verify.\n" +
			"Example: dpvm bench npb-load --kernel cg,mg --class A\n" +
			"         dpvm bench npb-load --only-idle --idle-rounds 8",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "kernel", Value: "ep,cg,mg,ft,is", Usage: "comma-separated NPB `kernels`"},
			&cli.StringFlag{Name: "class", Value: "A", Usage: "problem class: S, W, A, B or C"},
			&cli.IntFlag{Name: "hosts", Value: 4, Usage: "daemons"},
			&cli.IntFlag{Name: "np", Usage: "worker tasks (default: half the hosts, so that some hosts hold no worker)"},
			&cli.DurationFlag{Name: "period", Value: bench.DefaultNPBPeriod, Usage: "δT, the scheduler's check period"},
			&cli.Float64Flag{Name: "at", Value: 0.2, Usage: "the user arrives once rank 0 has done this `fraction` of its iterations"},
			&cli.IntFlag{Name: "users", Value: 1, Usage: "interactive users arriving"},
			&cli.Float64Flag{Name: "load", Value: 2, Usage: "the background load they bring (the host's tasks run 1+load times slower)"},
			&cli.Float64Flag{Name: "sched-load", Usage: "the load they bring in the runs with Dynamic-SED instead (default: --load); far above it, the worker cannot finish before it is moved (demonstrations, tests; the speedups then compare unlike runs)"},
			&cli.StringFlag{Name: "host", Usage: "where they arrive (default: a host holding a worker, not the master)"},
			&cli.StringFlag{Name: "via", Value: "both", Usage: "checkpoint mode of the Dynamic-SED runs: direct, indirect or both"},
			&cli.BoolFlag{Name: "no-idle", Usage: "skip the runs on the idle machine (the overhead)"},
			&cli.BoolFlag{Name: "only-idle", Usage: "make only the runs on the idle machine (the overhead)"},
			&cli.IntFlag{Name: "rounds", Value: 1, Usage: "make every run with the user arriving `N` times in alternating order and report medians and ranges"},
			&cli.IntFlag{Name: "idle-rounds", Value: bench.DefaultIdleRounds, Usage: "`N` pairs of idle runs (scheduler off, Dynamic-SED on) per kernel, in ABBA order"},
			&cli.DurationFlag{Name: "probe", Value: bench.DefaultProbe, Usage: "length of each idle spell measuring the scheduler's own cost"},
			&cli.IntFlag{Name: "probe-rounds", Value: 3, Usage: "`N` pairs of idle spells (scheduler off, on) measuring its own cost"},
			&cli.BoolFlag{Name: "no-probe", Usage: "skip measuring the scheduler's own cost"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as one JSON object"},
		},
		Action: func(c *cli.Context) error {
			if c.Int("rounds") < 1 {
				return cli.Exit(fmt.Sprintf("bench npb-load: --rounds %d: need at least one", c.Int("rounds")), 2)
			}
			if c.Int("idle-rounds") < 1 {
				return cli.Exit(fmt.Sprintf("bench npb-load: --idle-rounds %d: need at least one", c.Int("idle-rounds")), 2)
			}
			if c.Int("probe-rounds") < 1 || c.Duration("probe") <= 0 {
				return cli.Exit(fmt.Sprintf("bench npb-load: --probe %v --probe-rounds %d: need a positive length and at least one pair (or --no-probe)",
					c.Duration("probe"), c.Int("probe-rounds")), 2)
			}
			if c.Bool("no-idle") && c.Bool("only-idle") {
				return cli.Exit("bench npb-load: --no-idle and --only-idle leave nothing to run", 2)
			}
			var vias []daemon.Via
			switch v := strings.ToLower(c.String("via")); v {
			case "both":
				vias = []daemon.Via{daemon.Direct, daemon.Indirect}
			default:
				via, err := daemon.ParseVia(v)
				if err != nil {
					return cli.Exit("bench npb-load: --via: "+err.Error(), 2)
				}
				vias = []daemon.Via{via}
			}
			var kernels []string
			for _, k := range strings.Split(c.String("kernel"), ",") {
				if k = strings.TrimSpace(k); k != "" {
					kernels = append(kernels, k)
				}
			}
			if len(kernels) == 0 {
				return cli.Exit("bench npb-load: --kernel names no kernel", 2)
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			errw := c.App.ErrWriter
			r, err := bench.NPBLoad(ctx, bench.NPBLoadOptions{
				Kernels: kernels, Class: c.String("class"), Hosts: c.Int("hosts"), NP: c.Int("np"),
				Period: c.Duration("period"), At: c.Float64("at"), Users: c.Int("users"), Load: c.Float64("load"), SchedLoad: c.Float64("sched-load"),
				Host: c.String("host"), Vias: vias, NoIdle: c.Bool("no-idle"), OnlyIdle: c.Bool("only-idle"),
				Rounds: c.Int("rounds"), IdleRounds: c.Int("idle-rounds"),
				Probe: c.Duration("probe"), ProbeRounds: c.Int("probe-rounds"), NoProbe: c.Bool("no-probe"),
				Progress: func(run bench.NPBRun) {
					fmt.Fprintf(errw, "bench npb-load: %s %s: %.2f s, CPU %.2f s, %s, %d migration(s)\n",
						run.Kernel, run.Name, run.Seconds, run.CPUSeconds, strings.ToLower(run.Verified), run.Migrations)
				},
			})
			if r != nil { // what ran, even if a run failed or did not verify
				var werr error
				if c.Bool("json") {
					werr = writeJSONLine(c.App.Writer, r)
				} else {
					benchHeader(c.App.Writer, "npb-load")
					werr = bench.WriteNPBLoad(c.App.Writer, r)
				}
				if err == nil {
					err = werr
				}
			}
			if err != nil {
				if errors.Is(err, bench.ErrOptions) {
					return benchUsage(err)
				}
				return cli.Exit("bench npb-load: "+err.Error(), 1)
			}
			return nil
		},
	}
}
