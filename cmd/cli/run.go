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
	"github.com/dpvm/dpvm/daemon/pki"
	_ "github.com/dpvm/dpvm/examples" // registers the example programs
	"github.com/dpvm/dpvm/task"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run a registered program on an embedded virtual machine",
		ArgsUsage: "PROGRAM [program flags and arguments]",
		Description: "Starts a virtual machine inside this process, runs PROGRAM's root task to\n" +
			"completion, prints the tasks' output and exits with the root task's status.\n" +
			"Everything after PROGRAM belongs to the program: 'dpvm run hello --help'\n" +
			"shows its flags. 'dpvm run --list' lists the programs.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "hosts", Value: 1, Usage: "number of daemons in the embedded virtual machine"},
			&cli.BoolFlag{Name: "list", Usage: "list the registered programs and exit"},
			&cli.StringFlag{Name: "master", Usage: "run on the running virtual machine whose master is at this address instead of an embedded one"},
			&cli.StringFlag{Name: "shared-dir", Usage: "shared directory for indirect migration and job checkpoints on the embedded machine (default: a temporary one)"},
			checkpointEveryFlag,
			keepFlag,
			clusterKeyFlag,
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object when the job ends: its output lines, exit status and the root's result (what it recorded with Ctx.SetResult)"},
		},
		Action: func(c *cli.Context) error {
			out := c.App.Writer
			if c.Bool("list") {
				listPrograms(out)
				return nil
			}
			if c.NArg() == 0 {
				return cli.Exit("run: no program named; known programs: "+programNames(), 2)
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
				progOut = &lines
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
				})
			}
			if c.Bool("json") {
				if jerr := printJSON(out, runJSON(name, lines.String(), result, err)); jerr != nil {
					return jerr
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

// exitFor maps a program's result to the command's: the root task's exit
// status becomes the process's.
func exitFor(what string, err error) error {
	if err == nil {
		return nil
	}
	status := 1
	var ee *task.ExitError
	if errors.As(err, &ee) && ee.Status > 0 && ee.Status < 256 {
		status = ee.Status
	}
	if errors.Is(err, context.Canceled) {
		return cli.Exit(what+": interrupted: the whole job was ended", 130)
	}
	return cli.Exit(fmt.Sprintf("%s: %v", what, err), status)
}

// runResult is what 'dpvm run --json' prints.
type runResult struct {
	Program string   `json:"program"`
	Status  int      `json:"status"`
	Error   string   `json:"error,omitempty"`
	Output  []string `json:"output"`
	Result  any      `json:"result,omitempty"`
}

// runJSON describes a finished run: its output lines, exit status and the
// root task's result.
func runJSON(name, output string, result any, err error) runResult {
	r := runResult{Program: name, Output: []string{}, Result: result}
	if s := strings.TrimSuffix(output, "\n"); s != "" {
		r.Output = strings.Split(s, "\n")
	}
	if err != nil {
		r.Status, r.Error = 1, err.Error()
		var ee *task.ExitError
		if errors.As(err, &ee) && ee.Status > 0 {
			r.Status = ee.Status
		}
		if errors.Is(err, context.Canceled) {
			r.Status = 130
		}
	}
	return r
}

// runRemote runs root as a job on the virtual machine named by --master,
// printing its output as it comes, and decodes the root's result into
// result.
func runRemote(ctx context.Context, c *cli.Context, root task.Task, out io.Writer, result *any) error {
	key, err := pki.Load(c.String("cluster-key"))
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
