package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	vmsim "github.com/dpvm/dpvm/daemon/sim"
)

// simVMMaxSeeds bounds --seeds (each seed's result is kept until the end).
const simVMMaxSeeds = 10_000_000

// simVMCommand builds `dpvm sim vm`: a registered program on the
// deterministic simulation of a whole virtual machine (daemon/sim), seed
// after seed, each compared with the program's fault-free run.
func simVMCommand() *cli.Command {
	return &cli.Command{
		Name:      "vm",
		Usage:     "run a registered program on a simulated virtual machine under seeded faults and moves; every seed replays exactly",
		ArgsUsage: "PROGRAM [program flags and arguments]",
		Description: "Runs PROGRAM (any registered program, as for 'dpvm run'; a program of your own\n" +
			"binary too) on a deterministic simulation of a virtual machine: a master and\n" +
			"--hosts hosts running the real routing and move protocols, the program's tasks\n" +
			"one at a time, in virtual time. First its fault-free run (seed 0, no faults),\n" +
			"then one run per seed, the seeds in parallel over the machine's cores, each\n" +
			"taking the faults --faults allows at seeded moments. A seed fails if it breaks\n" +
			"an invariant (a task live on two hosts or on none outside a move, messages of a\n" +
			"sender to a receiver out of order, lost or twice, a route's epoch going back),\n" +
			"does not end, or ends with another result than the fault-free run. The result\n" +
			"is the root task's exit status and a hash of the program's output lines, sorted.\n" +
			"The same seed gives the same run on any machine (its trace_hash); a failed seed\n" +
			"is printed with the faults and moves it took and the command that replays it.\n" +
			"\n" +
			"--faults takes default, all, none, or a comma-separated list of: loss (messages\n" +
			"and control calls lost), dup (messages delivered twice), reorder (messages\n" +
			"overtaking), delay (messages held back past the resend timeout), partition\n" +
			"(two hosts cut apart for a while), freeze (a host stopped for a while), move\n" +
			"(tasks moved between hosts at seeded moments; their state goes through a real\n" +
			"msgpack checkpoint), checkpoint (job checkpoints at a seeded period), crash (a\n" +
			"host crashed for good; the job rolls back to its newest checkpoint), restart (a\n" +
			"host crashed, then back empty under its old ID once the master deemed it lost;\n" +
			"the job rolls back as for crash), master (the master crashed: the job is lost\n" +
			"with it once the hosts learn it, a seed's documented outcome beside the\n" +
			"fault-free result). default is every kind but checkpoint, crash, restart and\n" +
			"master; 'default,checkpoint,crash,restart' (all) adds all but master.\n" +
			"\n" +
			"Flags go before PROGRAM; everything after it belongs to the program. Exits 1 if\n" +
			"any seed fails.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "seeds", Value: 100, Usage: "number of seeds to run"},
			&cli.Uint64Flag{Name: "first-seed", Value: 1, Usage: "the first seed"},
			&cli.IntFlag{Name: "hosts", Value: 4, Usage: "hosts of the simulated virtual machine"},
			&cli.StringFlag{Name: "faults", Value: "default", Usage: "faults the seeds may take: default, all, none, or a list of " + strings.Join(vmsim.FaultNames(), ",")},
			&cli.StringFlag{Name: "routes", Value: "demand", Usage: "how the master spreads a move's route: broadcast (to every host) or demand (to the task's origin, old and new host; the others learn it from refusals and the origin)"},
			&cli.BoolFlag{Name: "shrink", Usage: "for each failed seed, drop the kinds of fault one at a time while it still fails, and print the smallest --faults found with its replay command"},
			&cli.StringFlag{Name: "trace", Usage: "write the trace of the run (every event, one per line) to `FILE` (with --seeds 1)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object: {program, args, hosts, faults, first_seed, failed, reference, seeds: [{seed, ok, result, trace_hash, events, virtual_ms, error, taken, replay, shrunk_faults, shrunk_replay}]}"},
		},
		Action: simVMAction,
	}
}

// simVMSeed is one seed's line of `sim vm --json`.
type simVMSeed struct {
	Seed      uint64  `json:"seed"`
	OK        bool    `json:"ok"`
	Result    string  `json:"result"`
	TraceHash string  `json:"trace_hash"`
	Events    int     `json:"events"`
	VirtualMS float64 `json:"virtual_ms"`
	Error     string  `json:"error,omitempty"`
	// Taken and Replay, for a failed seed: the faults and moves it took,
	// and the command that runs it again.
	Taken  []string `json:"taken,omitempty"`
	Replay string   `json:"replay,omitempty"`
	// ShrunkFaults and ShrunkReplay (--shrink): the fewest kinds of fault
	// found under which the seed still fails, and its command.
	ShrunkFaults string `json:"shrunk_faults,omitempty"`
	ShrunkReplay string `json:"shrunk_replay,omitempty"`
}

// simVMReport is what `sim vm --json` prints.
type simVMReport struct {
	Program   string      `json:"program"`
	Args      []string    `json:"args"`
	Hosts     int         `json:"hosts"`
	Faults    string      `json:"faults"`
	FirstSeed uint64      `json:"first_seed"`
	Failed    int         `json:"failed"`
	Reference simVMSeed   `json:"reference"`
	Seeds     []simVMSeed `json:"seeds"`
}

func simVMAction(c *cli.Context) error {
	usage := func(msg string) error {
		return cli.Exit("sim vm: "+msg+" (see 'dpvm sim vm --help')", exitUsage)
	}
	if c.NArg() == 0 {
		return usage("no program named; known programs: " + programNames())
	}
	n, hosts := c.Int("seeds"), c.Int("hosts")
	if n < 1 || n > simVMMaxSeeds {
		return usage(fmt.Sprintf("--seeds %d: want 1 to %d", n, simVMMaxSeeds))
	}
	if hosts < 1 || hosts > 1024 {
		return usage(fmt.Sprintf("--hosts %d: want 1 to 1024", hosts))
	}
	faults, err := vmsim.ParseFaults(c.String("faults"))
	if err != nil {
		return usage("--faults: " + err.Error())
	}
	routes, err := vmsim.ParseRoutes(c.String("routes"))
	if err != nil {
		return usage("--routes: " + err.Error())
	}
	if c.String("trace") != "" && n != 1 {
		return usage("--trace needs --seeds 1")
	}
	first := c.Uint64("first-seed")
	if first+uint64(n-1) < first {
		return usage(fmt.Sprintf("--first-seed %d with --seeds %d: past the largest seed", first, n))
	}
	name, args := c.Args().First(), c.Args().Tail()
	prog, err := vmsim.ProgramFromArgs(name, args)
	switch {
	case errors.Is(err, vmsim.ErrUnknownProgram):
		return usage(fmt.Sprintf("unknown program %q; known programs: %s", name, programNames()))
	case err != nil:
		return usage(fmt.Sprintf("%s: %v (see 'dpvm run %s --help')", name, err, name))
	}
	cfg := vmsim.Config{Hosts: hosts, Faults: faults, Routes: routes}
	if path := c.String("trace"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return cli.Exit("sim vm: --trace: "+err.Error(), exitFailed)
		}
		defer f.Close()
		cfg.Trace = f
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = first + uint64(i)
	}
	rep, err := vmsim.Check(cfg, seeds, prog, 0)
	cmd := filepath.Base(c.App.Name)
	out := simVMReport{Program: name, Args: append([]string{}, args...), Hosts: hosts, Faults: faults.String(), FirstSeed: first, Seeds: []simVMSeed{}}
	if rep != nil {
		out.Reference = simVMLine(rep.Reference, cmd, vmsim.Config{}, "", nil)
		for _, r := range rep.Seeds {
			sc := cfg
			sc.Seed = r.Seed
			line := simVMLine(r, cmd, sc, name, args)
			if !r.OK && c.Bool("shrink") {
				if small, res, serr := vmsim.Shrink(sc, prog, rep.Reference); serr == nil && !res.OK {
					line.ShrunkFaults = small.Faults.String()
					line.ShrunkReplay = vmsim.ReplayCommand(cmd, small, name, args)
				}
			}
			out.Seeds = append(out.Seeds, line)
		}
		out.Failed = rep.Failed()
	}
	if c.Bool("json") {
		if jerr := printJSON(c.App.Writer, out); jerr != nil {
			return cli.Exit("sim vm: "+jerr.Error(), exitFailed)
		}
	} else {
		printSimVM(c.App.Writer, out)
	}
	switch {
	case err != nil:
		return cli.Exit(fmt.Sprintf("sim vm %s: %v", name, err), exitFailed)
	case out.Failed > 0:
		return cli.Exit(fmt.Sprintf("sim vm %s: %d of %d seeds failed", name, out.Failed, n), exitFailed)
	}
	return nil
}

// simVMLine is r as `sim vm` reports it; a failed seed gets what it took
// and its replay command.
func simVMLine(r vmsim.Result, cmd string, cfg vmsim.Config, name string, args []string) simVMSeed {
	s := simVMSeed{Seed: r.Seed, OK: r.OK, Result: r.Result, TraceHash: r.TraceHash, Events: r.Events,
		VirtualMS: float64(r.Time) / float64(time.Millisecond)}
	if r.Err != nil {
		s.Error = r.Err.Error()
	}
	if !r.OK && name != "" {
		s.Taken = r.Taken
		s.Replay = vmsim.ReplayCommand(cmd, cfg, name, args)
	}
	return s
}

// printSimVM prints the report as a table, then each failed seed with
// what it took and its replay command.
func printSimVM(w io.Writer, r simVMReport) {
	fmt.Fprintf(w, "%s on %d simulated hosts, faults %s: fault-free result %s (%.3f ms virtual)\n",
		strings.Join(append([]string{r.Program}, r.Args...), " "), r.Hosts, r.Faults, r.Reference.Result, r.Reference.VirtualMS)
	if r.Reference.Error != "" {
		fmt.Fprintf(w, "fault-free run failed: %s\n", r.Reference.Error)
		return
	}
	fmt.Fprintf(w, "%-10s %-4s %-32s %-16s %8s %12s\n", "SEED", "OK", "RESULT", "TRACE", "EVENTS", "VIRTUAL_MS")
	for _, s := range r.Seeds {
		ok := "ok"
		if !s.OK {
			ok = "FAIL"
		}
		fmt.Fprintf(w, "%-10d %-4s %-32s %-16s %8d %12.3f\n", s.Seed, ok, s.Result, s.TraceHash[:16], s.Events, s.VirtualMS)
	}
	for _, s := range r.Seeds {
		if s.OK {
			continue
		}
		fmt.Fprintf(w, "\nseed %d failed: %s\n", s.Seed, s.Error)
		if len(s.Taken) > 0 {
			fmt.Fprintf(w, "  faults and moves taken:\n")
			for _, t := range s.Taken {
				fmt.Fprintf(w, "    %s\n", t)
			}
		}
		fmt.Fprintf(w, "  replay: %s\n", s.Replay)
		if s.ShrunkFaults != "" {
			fmt.Fprintf(w, "  fails with --faults %s too: %s\n", s.ShrunkFaults, s.ShrunkReplay)
		}
	}
	fmt.Fprintf(w, "%d seeds, %d failed\n", len(r.Seeds), r.Failed)
}
