package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/examples/npb"
)

// npbCommand is `dpvm npb KERNEL`: run one NAS Parallel Benchmark kernel on
// an embedded virtual machine and print its report.
func npbCommand() *cli.Command {
	usage := map[string]string{
		"ep": "EP: embarrassingly parallel Gaussian deviates",
		"cg": "CG: conjugate gradient estimate of a sparse matrix's smallest eigenvalue",
		"mg": "MG: multigrid V-cycles on a 3-D Poisson problem",
		"ft": "FT: 3-D FFT solution of a diffusion equation",
		"is": "IS: integer sort",
	}
	desc := "Runs the kernel as a parallel program of --np tasks on an embedded virtual\n" +
		"machine (or, with --master or DPVM_MASTER set, on a running one) and prints the NPB-style report:\n" +
		"time, Mop/s and verification.\n" +
		"\n" +
		"Every class (S, W, A, B, C, D) of every kernel is verified against the official NPB 3.4 reference\n" +
		"values with the official tolerances: EP's sums sx and sy (relative error 1e-8), CG's zeta (1e-10),\n" +
		"MG's L2 norm (1e-8), FT's checksum of every iteration (1e-12), IS's 50 partial checks of test-key\n" +
		"ranks and its full sort check. The exit status is 1 when verification fails, and 1 when the run\n" +
		"cannot be verified (NOT PERFORMED, e.g. with --iterations; the report says why) unless --no-verify\n" +
		"is given; 2 for bad parameters.\n" +
		"\n" +
		"On an embedded machine a run whose memory estimate exceeds MemAvailable in /proc/meminfo is refused\n" +
		"(status 1) unless --no-memory-check is given; a class D run, or any run needing 1 GiB or more,\n" +
		"says on stderr how much memory it needs before it starts.\n" +
		"Example: dpvm npb cg --class A --np 2"
	var subs []*cli.Command
	for _, k := range npb.Kernels {
		subs = append(subs, &cli.Command{
			Name:        k,
			Usage:       usage[k],
			Description: desc,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "class", Value: "S", Usage: "problem class: S, W, A, B, C or D"},
				&cli.IntFlag{Name: "np", Value: 1, Usage: "number of worker tasks"},
				&cli.IntFlag{Name: "hosts", Value: 1, Usage: "number of hosts of the embedded virtual machine"},
				&cli.BoolFlag{Name: "json", Usage: "print the report as one JSON object"},
				&cli.BoolFlag{Name: "no-verify", Usage: "accept a run that cannot be verified (Verification = NOT PERFORMED): exit status 0 instead of 1"},
				&cli.IntFlag{Name: "iterations", Usage: "CG, MG, FT: run `N` timed iterations instead of the class's; the reference values hold for the class's count only, so the run cannot be verified (see --no-verify)"},
				&cli.BoolFlag{Name: "no-memory-check", Usage: "run even when /proc/meminfo reports less memory available than the run needs"},
				runMasterFlag(),
				credentialFlag(), legacyKeyFlag(),
				&cli.StringFlag{Name: "shared-dir", Usage: "shared directory of the embedded machine, for job checkpoints (default: a temporary one)"},
				checkpointEveryFlag(),
				keepFlag(),
			},
			Action: func(c *cli.Context) error { return npbAction(c, k) },
		})
	}
	return &cli.Command{
		Name:        "npb",
		Usage:       "run an NAS Parallel Benchmark kernel (EP, CG, MG, FT, IS) and verify it",
		Description: desc,
		Subcommands: subs,
	}
}

// npbMemAvailable reports the memory available to a run on an embedded
// machine (MemAvailable in /proc/meminfo; tests replace it).
var npbMemAvailable = npb.MemAvailable

func npbAction(c *cli.Context, kernel string) error {
	class, np, hosts := c.String("class"), c.Int("np"), c.Int("hosts")
	root, err := npb.NewRoot(kernel, class, np)
	if err != nil {
		return cli.Exit(fmt.Sprintf("npb %s: %v", kernel, err), 2)
	}
	if err := checkMasterHosts(c, "npb "+kernel); err != nil {
		return err
	}
	if hosts < 1 {
		return cli.Exit(fmt.Sprintf("npb %s: --hosts %d: at least one host is needed", kernel, hosts), 2)
	}
	asJSON := c.Bool("json")
	stderr := c.App.ErrWriter
	var prog *progressLine
	if !asJSON && isTerminal(stderr) {
		prog = &progressLine{w: stderr, what: fmt.Sprintf("npb %s class %s np %d", kernel, strings.ToUpper(class), np)}
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := npb.RunOptions{Hosts: hosts, Output: stderr, Iterations: c.Int("iterations"), NoMemoryCheck: c.Bool("no-memory-check")}
	if c.IsSet("iterations") && opts.Iterations < 1 {
		return cli.Exit(fmt.Sprintf("npb %s: --iterations %d: at least one iteration is needed", kernel, opts.Iterations), 2)
	}
	if c.IsSet("iterations") && !npb.TakesIterations(root.Kernel) {
		return cli.Exit(fmt.Sprintf("npb %s: --iterations: only cg, mg and ft take an iteration count", kernel), 2)
	}
	job, err := jobOptions(c)
	if err != nil {
		return cli.Exit(fmt.Sprintf("npb %s: %v", kernel, err), 2)
	}
	if job.CheckpointEvery > 0 && c.String("master") == "" && hosts < 2 {
		return cli.Exit(fmt.Sprintf("npb %s: --checkpoint-every needs a virtual machine of several hosts (--hosts N or --master ADDR)", kernel), 2)
	}
	if prog != nil {
		opts.Progress = prog.show
	}
	var rep *npb.Report
	if addr := c.String("master"); addr != "" {
		var key *pki.Credential
		if key, err = loadCredential(c); err != nil {
			return cli.Exit(fmt.Sprintf("npb %s: %v", kernel, err), 2)
		}
		var cl *daemon.Client
		if cl, err = daemon.Dial(ctx, addr, key); err != nil {
			return cli.Exit(fmt.Sprintf("npb %s: %v", kernel, err), 1)
		}
		defer cl.Close()
		cl.OnJobNote(jobNoteTo(stderr))
		if hs, herr := cl.Hosts(ctx); herr == nil {
			opts.Hosts = len(hs)
		}
		rep, err = npb.Run(ctx, cl.Runner(job), kernel, class, np, opts)
	} else {
		opts.Local = true
		opts.MemAvailable = npbMemAvailable
		announceMemory(stderr, root, hosts, npbMemAvailable)
		// Every task lives in this process, which runs nothing else: the
		// collector is told to keep the heap within the run's estimate,
		// so the garbage the messages leave is reclaimed as it comes
		// instead of when the heap has doubled.
		if limit, err := npb.HeapLimit(kernel, class, np, hosts); err == nil {
			defer debug.SetMemoryLimit(debug.SetMemoryLimit(limit))
		}
		vm := daemon.RunOptions{Hosts: hosts, Logger: loggerFrom(c), Job: job, SharedDir: c.String("shared-dir"), OnJobNote: jobNoteTo(stderr)}
		rep, err = npb.Run(ctx, daemon.LocalRunner(vm), kernel, class, np, opts)
	}
	if prog != nil {
		prog.clear()
	}
	if err != nil {
		return exitFor("npb "+kernel, err)
	}
	out := c.App.Writer
	if asJSON {
		b, err := json.Marshal(rep)
		if err != nil {
			return cli.Exit(fmt.Sprintf("npb %s: %v", kernel, err), 1)
		}
		fmt.Fprintf(out, "%s\n", b)
	} else if err := rep.WriteText(out); err != nil {
		return err
	}
	return npbVerdict(kernel, rep, c.Bool("no-verify"))
}

// npbVerdict is the command's outcome for a completed run: a run that
// failed verification exits 1, and so does one that could not be verified
// unless noVerify accepts it.
func npbVerdict(kernel string, rep *npb.Report, noVerify bool) error {
	switch {
	case rep.Passed():
		return nil
	case rep.Verified == npb.NotPerformed && noVerify:
		return nil
	case rep.Verified == npb.NotPerformed:
		return cli.Exit(fmt.Sprintf("npb %s class %s: verification %s: %s (--no-verify accepts a run that cannot be verified)",
			kernel, rep.Class, rep.Verified, rep.Reason), 1)
	}
	msg := fmt.Sprintf("npb %s class %s: verification %s", kernel, rep.Class, rep.Verified)
	if rep.Reason != "" {
		msg += ": " + rep.Reason
	}
	return cli.Exit(msg, 1)
}

// announceMemory says on w how much memory a local run needs before it
// starts, for class D and for any run that needs 1 GiB or more, with the
// memory available (from /proc/meminfo) when it can be learnt.
func announceMemory(w io.Writer, root *npb.Root, hosts int, available func() (int64, error)) {
	need, err := npb.MemoryNeed(root.Kernel, root.Class, root.NP, hosts)
	if err != nil || (root.Class != "D" && need < 1<<30) {
		return
	}
	msg := fmt.Sprintf("npb %s class %s np %d: needs about %s of memory", root.Kernel, root.Class, root.NP, npb.FormatBytes(need))
	if avail, err := available(); err == nil {
		msg += fmt.Sprintf("; /proc/meminfo reports %s available", npb.FormatBytes(avail))
	}
	fmt.Fprintln(w, msg)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressLine shows a run's progress on one terminal line.
type progressLine struct {
	w     io.Writer
	what  string
	shown bool
}

func (p *progressLine) show(pr npb.Progress) {
	fmt.Fprintf(p.w, "\r%s: %d/%d iterations", p.what, pr.Done, pr.Total)
	p.shown = true
}

func (p *progressLine) clear() {
	if p.shown {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", len(p.what)+32))
	}
}
