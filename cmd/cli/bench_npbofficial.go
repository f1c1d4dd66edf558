package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon/bench/npbofficial"
	"github.com/dpvm/dpvm/examples/npb"
)

// benchNPBOfficialCommand is `dpvm bench npb-official`: the NPB kernels
// beside the official NPB 3.4 serial and MPI codes, measured in one run by
// daemon/bench/npbofficial/run.sh.
func benchNPBOfficialCommand() *cli.Command {
	return &cli.Command{
		Name:  "npb-official",
		Usage: "the NPB kernels beside the official NPB 3.4 serial, MPI and (--omp) OpenMP codes on this host, with ratios",
		Description: "Runs the harness this binary carries (daemon/bench/npbofficial/run.sh, written into\n" +
			"OUT/harness; --script runs another) on the official NPB 3.4 source in --src\n" +
			"(dpvm does not ship it). The harness installs gfortran and Open MPI with apt-get\n" +
			"when they are missing (--no-install: fail instead), builds the official serial and\n" +
			"MPI kernels from the suites' own make.def templates at -O3, and runs them in\n" +
			"alternating rounds beside `dpvm npb` (np=1 beside the serial code, np=2 beside\n" +
			"`mpirun -np 2`). With --omp it also builds the OpenMP suite and runs it at each of\n" +
			"the --threads counts N beside `dpvm npb --np N`. Then it prints the machine it ran on\n" +
			"and a table: dpvm's Mop/s over the official code's (medians of the per-round ratios\n" +
			"with their range; above 1, dpvm is faster) and peak memory at np=2 (the sum of the\n" +
			"processes' peak resident sets); with --omp, a second table per thread count. The raw\n" +
			"lines stay in --out.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "src", Usage: "`DIR` of the official NPB 3.4 source (holding NPB3.4-OMP and NPB3.4-MPI, or a parent)"},
			&cli.StringFlag{Name: "class", Value: "A", Usage: "NPB `class`: S, W, A, B, C or D"},
			&cli.IntFlag{Name: "rounds", Value: 3, Usage: "rounds over all runs, alternating their order"},
			&cli.StringFlag{Name: "kernels", Value: strings.Join(npb.Kernels, ","), Usage: "comma-separated `kernels`"},
			&cli.StringFlag{Name: "out", Value: "npb-official-results", Usage: "`DIR` for the builds, results.jsonl and machine.txt"},
			&cli.StringFlag{Name: "script", Usage: "the harness script (default: the one this binary carries, written into --out/harness)"},
			&cli.StringFlag{Name: "dpvm-bin", Usage: "the dpvm binary to measure (default: this one)"},
			&cli.BoolFlag{Name: "omp", Usage: "also run the official OpenMP suite at each --threads count beside dpvm at as many tasks"},
			&cli.StringFlag{Name: "threads", Value: "1,2", Usage: "comma-separated OpenMP thread `counts` for --omp"},
			&cli.BoolFlag{Name: "no-install", Usage: "fail instead of installing missing packages"},
			&cli.BoolFlag{Name: "json", Usage: "print the summary as one JSON object"},
		},
		Action: func(c *cli.Context) error {
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBenchNPBOfficial(ctx, benchNPBOfficialOptions{
				Src: c.String("src"), Class: c.String("class"), Rounds: c.Int("rounds"),
				Kernels: c.String("kernels"), Out: c.String("out"), Script: c.String("script"),
				Dpvm: c.String("dpvm-bin"), NoInstall: c.Bool("no-install"), JSON: c.Bool("json"),
				OMP: c.Bool("omp"), Threads: c.String("threads"), ThreadsSet: c.IsSet("threads"),
			}, c.App.Writer, c.App.ErrWriter)
		},
	}
}

type benchNPBOfficialOptions struct {
	Src, Class, Kernels, Out, Script, Dpvm string
	Rounds                                 int
	NoInstall, JSON                        bool
	// OMP adds the OpenMP suite at each of Threads (a comma-separated
	// list; ThreadsSet: given by the user).
	OMP        bool
	Threads    string
	ThreadsSet bool
}

// maxOMPThreads bounds a thread count of --threads.
const maxOMPThreads = 1024

// npbOfficialReport is the JSON form of `dpvm bench npb-official --json`.
type npbOfficialReport struct {
	Command string            `json:"command"`
	Machine []string          `json:"machine"`
	Kernels []npbofficial.Row `json:"kernels"`
	Failed  string            `json:"failed,omitempty"`
}

func runBenchNPBOfficial(ctx context.Context, o benchNPBOfficialOptions, stdout, stderr io.Writer) error {
	usage := func(format string, a ...any) error {
		return cli.Exit("bench npb-official: "+fmt.Sprintf(format, a...), 2)
	}
	if o.Src == "" {
		return usage("--src DIR is required: the official NPB 3.4 source (dpvm does not ship it)")
	}
	if st, err := os.Stat(o.Src); err != nil || !st.IsDir() {
		return usage("--src %s: not a directory", o.Src)
	}
	class, err := npb.NormClass(o.Class)
	if err != nil {
		return usage("--class %v", err)
	}
	o.Class = class
	if o.Rounds < 1 || o.Rounds > 50 {
		return usage("--rounds %d is outside 1..50", o.Rounds)
	}
	ks := strings.Split(o.Kernels, ",")
	for i, k := range ks {
		if ks[i], err = npb.NormKernel(k); err != nil {
			return usage("--kernels: %v", err)
		}
	}
	o.Kernels = strings.Join(ks, ",")
	if o.ThreadsSet && !o.OMP {
		return usage("--threads needs --omp")
	}
	if o.OMP {
		ts := strings.Split(o.Threads, ",")
		for i, s := range ts {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 || n > maxOMPThreads {
				return usage("--threads: %q is not a thread count from 1 to %d", s, maxOMPThreads)
			}
			ts[i] = strconv.Itoa(n)
		}
		o.Threads = strings.Join(ts, ",")
	}
	out, err := filepath.Abs(o.Out)
	if err != nil {
		return usage("--out: %v", err)
	}
	script := o.Script
	if script == "" {
		// The harness this binary carries, written beside the results.
		if script, err = npbofficial.WriteScript(filepath.Join(out, "harness")); err != nil {
			return cli.Exit("bench npb-official: "+err.Error(), 1)
		}
	} else if st, err := os.Stat(script); err != nil || st.IsDir() {
		return cli.Exit(fmt.Sprintf("bench npb-official: --script %s: not a file", script), 1)
	}
	exe, _ := os.Executable()
	bin := o.Dpvm
	if bin == "" {
		if exe == "" {
			return cli.Exit("bench npb-official: cannot find this binary to measure dpvm; pass --dpvm-bin", 1)
		}
		bin = exe
	}
	src, err := filepath.Abs(o.Src)
	if err != nil {
		return usage("--src: %v", err)
	}
	args := []string{script, "--src", src, "--dpvm-bin", bin, "--class", o.Class,
		"--rounds", strconv.Itoa(o.Rounds), "--kernels", o.Kernels, "--out", out}
	if o.NoInstall {
		args = append(args, "--no-install")
	}
	command := fmt.Sprintf("dpvm bench npb-official --src %s --class %s --rounds %d --kernels %s", o.Src, o.Class, o.Rounds, o.Kernels)
	if o.OMP {
		args = append(args, "--omp", "--threads", o.Threads)
		command += " --omp --threads " + o.Threads
	}
	fmt.Fprintf(stderr, "bench npb-official: bash %s\n", strings.Join(args, " "))
	runErr := runHarness(ctx, args, stderr)
	lines, err := npbofficial.ReadFile(filepath.Join(out, "results.jsonl"))
	if err != nil || len(lines) == 0 {
		if runErr != nil {
			return cli.Exit(fmt.Sprintf("bench npb-official: the harness failed: %v", runErr), 1)
		}
		if err == nil {
			err = errors.New("the harness recorded no runs")
		}
		return cli.Exit("bench npb-official: "+err.Error(), 1)
	}
	rows := npbofficial.Summarize(lines)
	machine := readMachine(filepath.Join(out, "machine.txt"))
	failed := ""
	if runErr != nil {
		failed = runErr.Error()
	}
	if o.JSON {
		if err := writeJSONLine(stdout, npbOfficialReport{Command: command, Machine: machine, Kernels: rows, Failed: failed}); err != nil {
			return err
		}
	} else {
		writeMachine(stdout, command, machine)
		if err := npbofficial.WriteTable(stdout, rows); err != nil {
			return cli.Exit("bench npb-official: "+err.Error(), 1)
		}
		fmt.Fprintf(stdout, "\nCells: median over the rounds (range in parentheses). Ratios: dpvm's Mop/s ÷ the official code's in the same round (above 1, dpvm is faster). Raw lines: %s\n",
			filepath.Join(out, "results.jsonl"))
	}
	if runErr != nil {
		return harnessFailed("bench npb-official", runErr)
	}
	return nil
}
