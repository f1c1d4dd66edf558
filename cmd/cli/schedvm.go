package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/load"
)

// schedStatusCommand shows a running virtual machine's scheduler.
func schedStatusCommand() *cli.Command { return schedStatusControl().command() }

func schedStatusControl() controlCommand {
	return controlCommand{
		cmd: &cli.Command{
			Name:  "status",
			Usage: "show the running master's Dynamic-SED scheduler: classes, availability, each process's class, counter and candidate reason",
			Flags: []cli.Flag{jsonFlag()},
		},
		act: func(c *cli.Context, cl *daemon.Client, ctx context.Context) error {
			st, err := cl.SchedStatus(ctx)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, st)
			}
			return writeSchedStatus(c.App.Writer, st)
		},
	}
}

func writeSchedStatus(w io.Writer, st daemon.SchedStatus) error {
	if !st.Enabled {
		fmt.Fprintln(w, "the scheduler is off (start the master with --sched-period)")
		return nil
	}
	fmt.Fprintf(w, "Dynamic-SED every %v: %d checks (%d listed the processes, the others found nothing to count), %d migrations made, %d failed; last check %s\n",
		st.Period, st.Checks, st.Listings, st.Migrations, st.Failed, st.At.Format("15:04:05.000"))
	var cls []string
	for i, c := range st.Classes {
		cls = append(cls, fmt.Sprintf("%d:[%g,%g)", i+1, c.Min, c.Max))
	}
	fmt.Fprintf(w, "delay classes %s; availability %v\n", strings.Join(cls, " "), st.Availability)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tALPHA\tLOAD\tDELAY\tUSERS\t")
	for _, h := range st.Hosts {
		fmt.Fprintf(tw, "%s\t%g\t%.2f\t%.2f\t%d\t\n", h.Name, h.Alpha, h.Load, h.Delay, h.Users)
	}
	fmt.Fprintln(tw, "\t\t\t\t\t\t")
	fmt.Fprintln(tw, "TID\tHOST\tCLASS\tMEM MiB\tCOUNTER\tCANDIDATE\tDECISION")
	for _, p := range st.Processes {
		fmt.Fprintf(tw, "%v\t%s\t%d\t%.1f\t%d/%d\t%s\t%s\n", p.TID, p.Host, p.Class, p.MemMiB, p.Counter, p.Limit, p.Candidate, p.Decision)
	}
	return tw.Flush()
}

// loadCommand changes a live host's situation, for emulating interactive
// users and background load on one machine.
func loadCommand() *cli.Command {
	return &cli.Command{
		Name:        "load",
		Usage:       "emulate a host's situation: interactive users, load, free memory (labelled as emulation)",
		Subcommands: []*cli.Command{loadInjectControl().command()},
	}
}

// loadInjectControl sets or clears a host's emulated load figures.
func loadInjectControl() controlCommand {
	return controlCommand{
		cmd: &cli.Command{
			Name:      "inject",
			Usage:     "set (or with --clear remove) emulated figures on a live host",
			ArgsUsage: "HOST",
			Flags: []cli.Flag{
				&cli.IntFlag{Name: "users", Value: -1, Usage: "interactive users"},
				&cli.Float64Flag{Name: "load", Value: -1, Usage: "runnable processes besides the daemon's tasks"},
				&cli.Float64Flag{Name: "mem-free", Value: -1, Usage: "free memory in MiB"},
				&cli.DurationFlag{Name: "for", Usage: "expire after this long (default: until cleared)"},
				&cli.BoolFlag{Name: "add", Usage: "add to the measured figures instead of replacing them"},
				&cli.BoolFlag{Name: "clear", Usage: "remove the host's overlay"},
				jsonFlag(),
			},
		},
		act: func(c *cli.Context, cl *daemon.Client, ctx context.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("load inject: name one host", 2)
			}
			o := load.Overlay{For: c.Duration("for")}
			if c.Bool("add") {
				o.Mode = load.Add
			}
			if u := c.Int("users"); u >= 0 {
				o.Users = &u
			}
			if l := c.Float64("load"); l >= 0 {
				o.Load = &l
			}
			if m := c.Float64("mem-free"); m >= 0 {
				o.MemFreeMiB = &m
			}
			if !c.Bool("clear") {
				if err := o.Validate(); err != nil {
					return cli.Exit("load inject: "+err.Error(), 2)
				}
			}
			if err := cl.InjectLoad(ctx, c.Args().First(), o, c.Bool("clear")); err != nil {
				return err
			}
			if c.Bool("json") {
				res := map[string]any{"host": c.Args().First(), "cleared": c.Bool("clear")}
				if !c.Bool("clear") {
					res["overlay"] = o
				}
				return printJSON(c.App.Writer, res)
			}
			return nil
		},
	}
}
