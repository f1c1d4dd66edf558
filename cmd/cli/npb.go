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
	var subs []*cli.Command
	for _, k := range npb.Kernels {
		subs = append(subs, &cli.Command{
			Name:  k,
			Usage: usage[k],
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "class", Value: "S", Usage: "problem class: S, W, A, B or C"},
				&cli.IntFlag{Name: "np", Value: 1, Usage: "number of worker tasks"},
				&cli.IntFlag{Name: "hosts", Value: 1, Usage: "number of hosts of the embedded virtual machine"},
				&cli.BoolFlag{Name: "json", Usage: "print the report as one JSON object"},
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
		Name:  "npb",
		Usage: "run an NAS Parallel Benchmark kernel (EP, CG, MG, FT, IS) and verify it",
		Description: "Runs the kernel as a parallel program of --np tasks on an embedded virtual\n" +
			"machine (or, with --master or DPVM_MASTER set, on a running one) and prints the NPB-style report:\n" +
			"time, Mop/s and verification. The exit status is 1 when verification fails.\n" +
			"Example: dpvm npb cg --class A --np 2",
		Subcommands: subs,
	}
}

func npbAction(c *cli.Context, kernel string) error {
	class, np, hosts := c.String("class"), c.Int("np"), c.Int("hosts")
	if _, err := npb.NewRoot(kernel, class, np); err != nil {
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
	job, err := jobOptions(c)
	if err != nil {
		return cli.Exit(fmt.Sprintf("npb %s: %v", kernel, err), 2)
	}
	if job.CheckpointEvery > 0 && c.String("master") == "" && hosts < 2 {
		return cli.Exit(fmt.Sprintf("npb %s: --checkpoint-every needs a virtual machine of several hosts (--hosts N or --master ADDR)", kernel), 2)
	}
	opts := npb.RunOptions{Hosts: hosts, Output: stderr}
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
	if !rep.Passed() {
		return cli.Exit(fmt.Sprintf("npb %s class %s: verification %s", kernel, rep.Class, rep.Verified), 1)
	}
	return nil
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
