package cli

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon"
	vmsim "github.com/dpvm/dpvm/daemon/sim"
)

// simScaleCommand builds `dpvm sim scale`: the master's cost in messages
// and bytes per join, spawn, idle second and move, on a simulated virtual
// machine of many hosts and tasks, in virtual time (daemon/sim's Scale).
func simScaleCommand() *cli.Command {
	return &cli.Command{
		Name:      "scale",
		Usage:     "count the master's messages and bytes per join, spawn, idle second and move on a large simulated virtual machine",
		ArgsUsage: " ",
		Description: "Simulates a virtual machine of --hosts hosts in virtual time, on one goroutine,\n" +
			"with the real routing and move protocols (daemon/sim): the hosts join the\n" +
			"master; a task spawns --tasks idle tasks (each waits at a safe point), one\n" +
			"spawn each, placed round robin; the hosts heartbeat for --idle of virtual\n" +
			"time; then --moves moves of idle tasks drawn from --seed, one after another.\n" +
			"Every message the master sends (out) and receives (in) is counted by kind,\n" +
			"with the bytes the daemon puts on the wire for it (its msgpack encoding and\n" +
			"frame header). Prints, per phase, the master's messages and bytes in and out,\n" +
			"in all and per join, spawn, idle second or move, and the simulator's own wall\n" +
			"time and memory. The same flags give the same counts and trace_hash. Joins are\n" +
			"counted as the daemon's handshake makes them, not played as events.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "hosts", Value: 1000, Usage: "hosts of the simulated virtual machine"},
			&cli.IntFlag{Name: "tasks", Value: 10000, Usage: "idle tasks spawned"},
			&cli.IntFlag{Name: "moves", Value: 100, Usage: "moves of idle tasks, one after another"},
			&cli.DurationFlag{Name: "idle", Value: 10 * time.Second, Usage: "virtual time the virtual machine idles (heartbeats only)"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of the run's draws"},
			&cli.StringFlag{Name: "routes", Value: "demand", Usage: "how the master spreads a move's route: broadcast (to every host) or demand (to the task's origin, old and new host)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object: {hosts, tasks, moves, idle_ms, seed, routes, phases: [{name, per, count, msgs_in, msgs_out, bytes_in, bytes_out, msgs_in_per, msgs_out_per, bytes_in_per, bytes_out_per, kinds: [{kind, msgs_in, msgs_out, bytes_in, bytes_out}], virtual_ms, wall_ms}], events, trace_hash, wall_ms, heap_mib, sys_mib, goroutines}"},
		},
		Action: simScaleAction,
	}
}

func simScaleAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit("sim scale: takes no arguments (see 'dpvm sim scale --help')", exitUsage)
	}
	routes, err := vmsim.ParseRoutes(c.String("routes"))
	if err != nil {
		return cli.Exit("sim scale: --routes: "+err.Error(), exitUsage)
	}
	cfg := vmsim.ScaleConfig{Hosts: c.Int("hosts"), Tasks: c.Int("tasks"), Moves: c.Int("moves"),
		Idle: c.Duration("idle"), Seed: c.Uint64("seed"), Wire: daemon.NewWireSizes(), Routes: routes}
	res, err := vmsim.Scale(cfg)
	if errors.Is(err, vmsim.ErrScaleConfig) {
		return cli.Exit("sim scale: "+err.Error()+" (see 'dpvm sim scale --help')", exitUsage)
	}
	if err != nil {
		return cli.Exit("sim scale: "+err.Error(), exitFailed)
	}
	if c.Bool("json") {
		if jerr := printJSON(c.App.Writer, res); jerr != nil {
			return cli.Exit("sim scale: "+jerr.Error(), exitFailed)
		}
		return nil
	}
	printSimScale(c.App.Writer, res)
	return nil
}

// printSimScale prints a scale run as a table of phases, each with its
// kinds of message below it, then the simulator's own cost.
func printSimScale(w io.Writer, r vmsim.ScaleResult) {
	fmt.Fprintf(w, "%d hosts, %d tasks, %v idle, %d moves, seed %d, routes by %s: the master's messages and bytes\n",
		r.Hosts, r.Tasks, r.Idle, r.Moves, r.Seed, r.Routes)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tper\tcount\tmsgs in\tmsgs out\tbytes in\tbytes out\tmsgs in/per\tmsgs out/per\tbytes in/per\tbytes out/per\tvirtual ms\twall ms\t")
	for _, p := range r.Phases {
		fmt.Fprintf(tw, "%s\t%s\t%g\t%d\t%d\t%d\t%d\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", p.Name, p.Per, p.Count,
			p.MsgsIn, p.MsgsOut, p.BytesIn, p.BytesOut, p.MsgsInPer, p.MsgsOutPer, p.BytesInPer, p.BytesOutPer, p.VirtualMS, p.WallMS)
		for _, k := range p.Kinds {
			fmt.Fprintf(tw, "  %s\t\t\t%d\t%d\t%d\t%d\t\t\t\t\t\t\t\n", k.Kind, k.MsgsIn, k.MsgsOut, k.BytesIn, k.BytesOut)
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "simulator: %d events, %.0f ms wall, %.0f MiB heap in use (most), %.0f MiB from the system, %d goroutines (most); trace %s\n",
		r.Events, r.WallMS, r.HeapMiB, r.SysMiB, r.Goroutines, r.TraceHash)
}
