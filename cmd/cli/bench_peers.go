package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon/bench"
	"github.com/dpvm/dpvm/daemon/bench/peers"
)

// benchPeersCommand is `dpvm bench peers`: dpvm beside PVM 3.4 and Open
// MPI, measured in one run by daemon/bench/peers/run.sh.
func benchPeersCommand() *cli.Command {
	return &cli.Command{
		Name:  "peers",
		Usage: "dpvm beside PVM 3.4 and Open MPI on this host, in one run, with ratios",
		Description: "Runs the peer harness this binary carries (daemon/bench/peers/run.sh, written into\n" +
			"OUT/harness; --script runs another). It installs PVM 3.4 and Open MPI with\n" +
			"apt-get when they are missing (--no-install: fail instead), starts a private PVM\n" +
			"virtual machine, and measures in alternating rounds PVM through pvmd and with\n" +
			"PvmRouteDirect, Open MPI over shared memory and TCP, raw TCP, and dpvm itself\n" +
			"(two tasks on one daemon, two daemons over QUIC, and raw quic-go), each run\n" +
			"being this binary with --line; Open MPI and dpvm also time allreduce, bcast,\n" +
			"allgather and alltoall of two tasks at 8 B, 8 KiB and 1 MiB. Then it prints one table: medians over the\n" +
			"rounds with their range, dpvm beside each peer, and dpvm's advantage (peer ÷\n" +
			"dpvm for times, dpvm ÷ peer for bandwidth and rate; above 1, dpvm is better).\n" +
			"--plot FILE.svg draws one-way latency against message size into FILE.svg and\n" +
			"bandwidth into FILE-bandwidth.svg. The raw lines stay in --out.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "rounds", Value: 3, Usage: "rounds over all systems, alternating their order"},
			&cli.Float64Flag{Name: "scale", Value: 1, Usage: "repetitions and time caps multiplied by `S` (0.1 is a quick run)"},
			&cli.StringFlag{Name: "out", Value: "peers-results", Usage: "`DIR` for results.jsonl, machine.txt and table.md"},
			&cli.StringFlag{Name: "plot", Usage: "draw latency and bandwidth against message size as SVG into `FILE.svg`"},
			&cli.StringFlag{Name: "script", Usage: "the harness script (default: the one this binary carries, written into --out/harness)"},
			&cli.StringFlag{Name: "only", Usage: "comma-separated `systems` to run (run.sh --only; default all)"},
			&cli.BoolFlag{Name: "no-install", Usage: "fail instead of installing missing packages"},
			&cli.BoolFlag{Name: "json", Usage: "print the summaries as one JSON object"},
			&cli.StringFlag{Name: "line", Usage: "measure dpvm once in `MODE` (local, remote or quic) and print the harness's JSON line (what run.sh runs)"},
		},
		Action: func(c *cli.Context) error {
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			if mode := c.String("line"); mode != "" {
				l, err := bench.PeerMeasure(ctx, mode, c.Float64("scale"))
				if err != nil {
					return benchFailed(err)
				}
				return writeJSONLine(c.App.Writer, l)
			}
			return runBenchPeers(ctx, benchPeersOptions{
				Rounds: c.Int("rounds"), Scale: c.Float64("scale"), Out: c.String("out"),
				Plot: c.String("plot"), Script: c.String("script"), Only: c.String("only"),
				NoInstall: c.Bool("no-install"), JSON: c.Bool("json"),
			}, c.App.Writer, c.App.ErrWriter)
		},
	}
}

type benchPeersOptions struct {
	Rounds    int
	Scale     float64
	Out       string
	Plot      string
	Script    string
	Only      string
	NoInstall bool
	JSON      bool
}

// peersReport is the JSON form of `dpvm bench peers --json`.
type peersReport struct {
	Command string          `json:"command"`
	Machine []string        `json:"machine"`
	Systems []peers.Summary `json:"systems"`
	Failed  string          `json:"failed,omitempty"`
}

func runBenchPeers(ctx context.Context, o benchPeersOptions, stdout, stderr io.Writer) error {
	if o.Rounds < 1 || o.Rounds > 50 {
		return cli.Exit(fmt.Sprintf("bench peers: --rounds %d is outside 1..50", o.Rounds), 2)
	}
	if !(o.Scale > 0 && o.Scale <= 10) {
		return cli.Exit(fmt.Sprintf("bench peers: --scale %v is outside (0, 10]", o.Scale), 2)
	}
	out, err := filepath.Abs(o.Out)
	if err != nil {
		return cli.Exit("bench peers: --out: "+err.Error(), 2)
	}
	script := o.Script
	if script == "" {
		// The harness this binary carries, written beside the results.
		if script, err = peers.WriteHarness(filepath.Join(out, "harness")); err != nil {
			return cli.Exit("bench peers: "+err.Error(), 1)
		}
	} else if st, err := os.Stat(script); err != nil || st.IsDir() {
		return cli.Exit(fmt.Sprintf("bench peers: --script %s: not a file", script), 1)
	}
	exe, err := os.Executable()
	if err != nil {
		return cli.Exit("bench peers: cannot find this binary to measure dpvm: "+err.Error(), 1)
	}
	args := []string{script, "--rounds", strconv.Itoa(o.Rounds), "--scale", strconv.FormatFloat(o.Scale, 'g', -1, 64),
		"--out", out, "--dpvm-bin", exe, "--no-table"}
	if o.Only != "" {
		args = append(args, "--only", o.Only)
	}
	if o.NoInstall {
		args = append(args, "--no-install")
	}
	command := "dpvm bench peers " + strings.Join(flagsOf(o), " ")
	fmt.Fprintf(stderr, "bench peers: %s %s\n", "bash", strings.Join(args, " "))
	runErr := runHarness(ctx, args, stderr)
	lines, err := peers.ReadFile(filepath.Join(out, "results.jsonl"))
	if err != nil {
		if runErr != nil {
			return cli.Exit(fmt.Sprintf("bench peers: the harness failed: %v", runErr), 1)
		}
		return cli.Exit("bench peers: "+err.Error(), 1)
	}
	sums, err := peers.Summarize(lines)
	if err != nil {
		return cli.Exit("bench peers: "+err.Error(), 1)
	}
	machine := readMachine(filepath.Join(out, "machine.txt"))
	if o.Plot != "" {
		title := "dpvm, PVM 3.4 and Open MPI on one host"
		if len(machine) > 0 {
			title += " (" + strings.TrimPrefix(machine[0], "date: ") + ")"
		}
		if err := peers.WritePlots(o.Plot, sums, title); err != nil {
			return cli.Exit("bench peers: "+err.Error(), 1)
		}
		fmt.Fprintf(stderr, "bench peers: plots in %s and %s\n", o.Plot, peers.BandwidthPath(o.Plot))
	}
	failed := ""
	if runErr != nil {
		failed = runErr.Error()
	}
	if o.JSON {
		if err := writeJSONLine(stdout, peersReport{Command: command, Machine: machine, Systems: sums, Failed: failed}); err != nil {
			return err
		}
	} else {
		writeMachine(stdout, command, machine)
		if err := peers.WriteSideBySide(stdout, sums); err != nil {
			// Without dpvm beside a peer (--only), the plain table still helps.
			if err := peers.WriteTable(stdout, sums); err != nil {
				return cli.Exit("bench peers: "+err.Error(), 1)
			}
		}
		fmt.Fprintf(stdout, "\nCells: median over the rounds (range in parentheses); ×: dpvm's advantage over the peer to its left (above 1, dpvm is better). Raw lines: %s\n",
			filepath.Join(out, "results.jsonl"))
	}
	if runErr != nil {
		return harnessFailed("bench peers", runErr)
	}
	return nil
}

// flagsOf renders the options as the flags that would repeat the run.
func flagsOf(o benchPeersOptions) []string {
	f := []string{"--rounds", strconv.Itoa(o.Rounds)}
	if o.Scale != 1 {
		f = append(f, "--scale", strconv.FormatFloat(o.Scale, 'g', -1, 64))
	}
	if o.Only != "" {
		f = append(f, "--only", o.Only)
	}
	if o.Plot != "" {
		f = append(f, "--plot", o.Plot)
	}
	return f
}

// readMachine returns the lines of the harness's machine.txt (none if it
// cannot be read).
func readMachine(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
