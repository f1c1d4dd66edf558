package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon"
	_ "github.com/dpvm/dpvm/examples"     // registers the example programs
	_ "github.com/dpvm/dpvm/examples/pvm" // registers the ports of PVM's examples
	"github.com/dpvm/dpvm/task"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run a registered program on an embedded virtual machine, or on the running one --master (DPVM_MASTER) names",
		ArgsUsage: "PROGRAM [program flags and arguments]",
		Description: "Starts a virtual machine inside this process (or, with --master or DPVM_MASTER\n" +
			"set, uses the running one), runs PROGRAM's root task to completion, prints the\n" +
			"tasks' output and exits with the root task's status. The job ends once its other\n" +
			"tasks have too; one that failed, or was killed at the job's end, makes the run\n" +
			"fail, named. --master '' ignores DPVM_MASTER.\n" +
			"Everything after PROGRAM belongs to the program: 'dpvm run hello --help'\n" +
			"shows its flags. 'dpvm run --list' lists the programs.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "hosts", Value: 1, Usage: "number of daemons in the embedded virtual machine"},
			&cli.BoolFlag{Name: "list", Usage: "list the registered programs and exit"},
			runMasterFlag(),
			&cli.BoolFlag{Name: "json", Usage: "print the result as one JSON object ({program, status, error, output, result}: the output lines and the root's result, what it recorded with Ctx.SetResult); the tasks' output also goes to standard error as it comes"},
			&cli.StringFlag{Name: "shared-dir", Usage: "shared directory for indirect migration and job checkpoints on the embedded machine (default: a temporary one)"},
			checkpointEveryFlag(),
			keepFlag(),
			credentialFlag(), legacyKeyFlag(),
		},
		Action: func(c *cli.Context) error {
			out := c.App.Writer
			if c.Bool("json") {
				out = c.App.ErrWriter
			}
			if c.Bool("list") {
				listPrograms(out)
				return nil
			}
			if c.NArg() == 0 {
				return cli.Exit("run: no program named; known programs: "+programNames(), 2)
			}
			if err := checkMasterHosts(c, "run"); err != nil {
				return err
			}
			if c.Int("hosts") < 1 {
				return cli.Exit(fmt.Sprintf("run: --hosts %d: need at least one", c.Int("hosts")), 2)
			}
			name := c.Args().First()
			prog, ok := task.LookupProgram(name)
			if !ok {
				return cli.Exit(fmt.Sprintf("run: unknown program %q; known programs: %s", name, programNames()), 2)
			}
			root, err := setupProgram(prog, c.Args().Tail(), out)
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			if err != nil {
				return cli.Exit(fmt.Sprintf("run %s: %v (see 'dpvm run %s --help')", name, err, name), 2)
			}
			opts, err := jobOptions(c)
			if err != nil {
				return cli.Exit("run: "+err.Error(), 2)
			}
			if opts.CheckpointEvery > 0 && c.String("master") == "" && c.Int("hosts") < 2 {
				return cli.Exit("run: --checkpoint-every needs a virtual machine of several hosts (--hosts N or --master ADDR)", 2)
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			var lines bytes.Buffer
			progOut := out
			if c.Bool("json") {
				progOut = io.MultiWriter(out, &lines)
			}
			var result any
			if c.String("master") != "" {
				err = runRemote(ctx, c, root, progOut, &result)
			} else {
				err = daemon.Run(ctx, root, daemon.RunOptions{
					Hosts:     c.Int("hosts"),
					Output:    progOut,
					Logger:    loggerFrom(c),
					SharedDir: c.String("shared-dir"),
					Job:       opts,
					Result:    &result,
					OnJobNote: jobNoteTo(c.App.ErrWriter),
				})
			}
			if c.Bool("json") {
				r := newRunResult(name, "", err)
				r.Output, r.Result = []string{}, result
				if s := strings.TrimSuffix(lines.String(), "\n"); s != "" {
					r.Output = strings.Split(s, "\n")
				}
				if jerr := printJSON(c.App.Writer, r); jerr != nil {
					return cli.Exit("run: "+jerr.Error(), exitFailed)
				}
			}
			return exitFor("run "+name, err)
		},
	}
}

// setupProgram parses a program's flags and builds its root task. --help
// prints the program's usage to out and returns flag.ErrHelp.
func setupProgram(p task.Program, args []string, out io.Writer) (task.Task, error) {
	fs := flag.NewFlagSet("dpvm run "+p.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	build := p.Setup(fs)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(out, "%s — %s\n\nUsage: dpvm run [run flags] %s [flags]\n\nFlags:\n", p.Name, p.Summary, p.Name)
			fs.SetOutput(out)
			fs.PrintDefaults()
		}
		return nil, err
	}
	return build(fs.Args())
}

func listPrograms(out io.Writer) {
	for _, p := range task.Programs() {
		fmt.Fprintf(out, "%-12s %s\n", p.Name, p.Summary)
	}
}

func programNames() string {
	var names []string
	for _, p := range task.Programs() {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}

// runMasterFlag names the virtual machine run and npb use instead of an
// embedded one. Like every command that talks to a virtual machine they
// read DPVM_MASTER, so that one exported variable points them all at it;
// --master "" runs on an embedded machine all the same.
func runMasterFlag() cli.Flag {
	return &cli.StringFlag{
		Name:    "master",
		Usage:   "run on the running virtual machine whose master is at this address instead of an embedded one (--master '' ignores DPVM_MASTER)",
		EnvVars: []string{"DPVM_MASTER"},
	}
}

// checkMasterHosts rejects --hosts, the size of an embedded machine,
// together with a running machine's master.
func checkMasterHosts(c *cli.Context, what string) error {
	if c.String("master") != "" && c.IsSet("hosts") {
		return usageErrorf(what, "--hosts sizes an embedded virtual machine; the one at %s (--master or DPVM_MASTER) has its own hosts ('--master \"\"' runs on an embedded one)", c.String("master"))
	}
	return nil
}

// exitStatus is the exit status of a command whose result is err: 0, the
// root task's own status for a program that exited with one, 130 when
// interrupted, else 1.
func exitStatus(err error) int {
	if err == nil {
		return exitOK
	}
	if errors.Is(err, context.Canceled) {
		return exitInterrupted
	}
	var ee *task.ExitError
	if errors.As(err, &ee) && ee.Status > 0 && ee.Status < 256 {
		return ee.Status
	}
	return exitFailed
}

// exitFor maps a program's result to the command's: the root task's exit
// status becomes the process's.
func exitFor(what string, err error) error {
	switch status := exitStatus(err); status {
	case exitOK:
		return nil
	case exitInterrupted:
		return cli.Exit(what+": interrupted", status)
	default:
		return cli.Exit(withContext(what, err).Error(), status)
	}
}

// A runResult is what run --json and restart --json print: which program
// ran and how it ended.
type runResult struct {
	Program string `json:"program,omitempty"`
	Dir     string `json:"dir,omitempty"` // restart: the job's checkpoint directory
	Status  int    `json:"status"`        // the command's exit status
	Error   string `json:"error,omitempty"`
	// Output are the job's output lines and Result the root's result
	// (run only).
	Output []string `json:"output,omitempty"`
	Result any      `json:"result,omitempty"`
}

func newRunResult(program, dir string, err error) runResult {
	r := runResult{Program: program, Dir: dir, Status: exitStatus(err)}
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

// runRemote runs root as a job on the virtual machine named by --master,
// printing its output as it comes, and decodes the root's result into
// result.
func runRemote(ctx context.Context, c *cli.Context, root task.Task, out io.Writer, result *any) error {
	key, err := loadCredential(c)
	if err != nil {
		return err
	}
	cl, err := daemon.Dial(ctx, c.String("master"), key)
	if err != nil {
		return err
	}
	defer cl.Close()
	typ, state, err := task.EncodeState(root)
	if err != nil {
		return err
	}
	opts, err := jobOptions(c)
	if err != nil {
		return err
	}
	cl.OnJobNote(jobNoteTo(c.App.ErrWriter))
	info, err := cl.RunJob(ctx, typ, state, opts, out)
	if err != nil {
		return err
	}
	if v, ok, err := info.ResultValue(); err != nil {
		return err
	} else if ok {
		*result = v
	}
	return daemon.ExitError(info)
}

// jobNoteTo prints what befalls a running job (a rollback, and to which
// checkpoint) to w, as the command's own remark.
func jobNoteTo(w io.Writer) func(daemon.JobNote) {
	return func(n daemon.JobNote) { fmt.Fprintf(w, "dpvm: %s\n", n) }
}
