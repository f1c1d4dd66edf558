package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/bench"
)

// benchScaleCommand is `dpvm bench scale`: how the master's costs grow
// with the hosts and the tasks.
func benchScaleCommand() *cli.Command {
	return &cli.Command{
		Name:  "scale",
		Usage: "virtual machines of many hosts and tasks on this machine: how each cost grows",
		Description: "For every count of --hosts and of --tasks, starts a master in a process of its\n" +
			"own (this binary, 'daemon --master --no-tasks') and that many host daemons in\n" +
			"this process, each on its own UDP socket, all talking QUIC over loopback. It\n" +
			"measures the time for every host to join; one spawn of the idle tasks (total\n" +
			"and rate) and a barrier of all of them; the median of --moves moves of one\n" +
			"task between two hosts, neither the master; the master's CPU while the machine\n" +
			"idles (heartbeats, load reports, scheduler checks every --sched-period), the\n" +
			"QUIC packets it receives per second meanwhile, and its memory (under\n" +
			"--detector swim, every daemon's, the hosts probe each other, not the master); memory per host and per idle task on the hosts and on the master;\n" +
			"the master's last listing check (listing, the hosts it called, sched.Step),\n" +
			"its checks per second and CPU per check while idle, and sched.Step's\n" +
			"allocations; with --recover, the time a new master started with --recover\n" +
			"takes to take every host and task back after the first is killed. Then the\n" +
			"growth of each cost along the hosts and along the tasks (cost ∝ x^k).\n" +
			"Each process needs a file descriptor per host: raise 'ulimit -n' for 1024 hosts.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "hosts", Value: "8,64", Usage: "host `counts`, comma-separated"},
			&cli.StringFlag{Name: "tasks", Value: "1000", Usage: "idle task `counts`, comma-separated"},
			&cli.DurationFlag{Name: "heartbeat", Value: time.Second, Usage: "every daemon's heartbeat period"},
			&cli.DurationFlag{Name: "sched-period", Value: 50 * time.Millisecond, Usage: "the master's δT (0: the scheduler off)"},
			&cli.DurationFlag{Name: "idle", Value: 3 * time.Second, Usage: "how long the idle master's CPU is measured"},
			&cli.IntFlag{Name: "moves", Value: 5, Usage: "moves timed per virtual machine"},
			&cli.BoolFlag{Name: "recover", Usage: "also kill the master and time a new one's recovery"},
			&cli.IntFlag{Name: "join-parallel", Value: 64, Usage: "hosts started at once"},
			&cli.StringFlag{Name: "master-pprof", Usage: "the master process serves Go's profiles at http://`ADDR`/debug/pprof/ (loopback), to profile it while it idles"},
			&cli.StringFlag{Name: "detector", Value: daemon.DetectorSwim, Usage: "every daemon's failure detector: swim (hosts probe each other) or master (hosts ping the master every heartbeat)"},
			&cli.BoolFlag{Name: "in-process-master", Usage: "run the master in this process (its CPU and memory are then not measured apart)"},
			&cli.DurationFlag{Name: "wait", Value: 5 * time.Minute, Usage: "bound on each wait for the virtual machine (joins, barrier, recovery)"},
			&cli.DurationFlag{Name: "timeout", Value: time.Hour, Usage: "give up the run after this long"},
			&cli.BoolFlag{Name: "json", Usage: "print the results as one JSON object"},
			&cli.StringFlag{Name: "plot", Usage: "also draw each cost's growth with the hosts as an SVG `FILE`"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress lines on stderr"},
		},
		Action: func(c *cli.Context) error {
			hosts, err := parseCounts("--hosts", c.String("hosts"))
			if err != nil {
				return benchUsage(err)
			}
			tasks, err := parseCounts("--tasks", c.String("tasks"))
			if err != nil {
				return benchUsage(err)
			}
			o := bench.ScaleOptions{Hosts: hosts, Tasks: tasks, Heartbeat: c.Duration("heartbeat"),
				SchedPeriod: c.Duration("sched-period"), Idle: c.Duration("idle"), Moves: c.Int("moves"),
				Recover: c.Bool("recover"), JoinParallel: c.Int("join-parallel"), InProcessMaster: c.Bool("in-process-master"),
				Wait: c.Duration("wait"), Logger: loggerFrom(c), MasterLogLevel: c.String("log-level"),
				MasterPprof: c.String("master-pprof"), Detector: c.String("detector")}
			if d := o.Detector; d != daemon.DetectorMaster && d != daemon.DetectorSwim {
				return benchUsage(fmt.Errorf("%w: --detector %q: want %s or %s", bench.ErrOptions, d, daemon.DetectorMaster, daemon.DetectorSwim))
			}
			if o.SchedPeriod == 0 {
				o.SchedPeriod = -1 // off
			}
			if !c.Bool("quiet") {
				o.Progress = c.App.ErrWriter
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, c.Duration("timeout"))
			defer cancel()
			rep, err := bench.Scale(ctx, o)
			if err != nil {
				// What was measured before the failure is still worth
				// having: print it, then fail.
				if rep != nil && len(rep.Rows) > 0 {
					if c.Bool("json") {
						_ = writeJSONLine(c.App.Writer, rep)
					} else {
						_ = bench.WriteScaleText(c.App.Writer, rep)
					}
				}
				return benchFailed(err)
			}
			if p := c.String("plot"); p != "" {
				if err := writeFile(p, "plot", func(w io.Writer) error { return bench.WriteScaleSVG(w, rep) }); err != nil {
					return cli.Exit(err.Error(), 1)
				}
			}
			if c.Bool("json") {
				return writeJSONLine(c.App.Writer, rep)
			}
			benchHeader(c.App.Writer, "scale")
			return bench.WriteScaleText(c.App.Writer, rep)
		},
	}
}

// parseCounts reads a comma-separated list of positive counts.
func parseCounts(flag, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: %s %q: want positive counts separated by commas", bench.ErrOptions, flag, s)
		}
		out = append(out, n)
	}
	return out, nil
}
