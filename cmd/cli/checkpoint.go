package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon"
)

// checkpointEveryFlag and keepFlag are the job checkpoint flags shared by
// run, restart, spawn and npb. Flags are made anew for each command tree:
// urfave/cli writes the values it parses into them.
func checkpointEveryFlag() cli.Flag {
	return &cli.DurationFlag{Name: "checkpoint-every", Usage: "take a coordinated checkpoint of the job this often, into the shared directory (0: only with 'dpvm checkpoint')"}
}

func keepFlag() cli.Flag {
	return &cli.IntFlag{Name: "keep", Value: 2, Usage: "complete checkpoints of the job to keep"}
}

func jobOptions(c *cli.Context) (daemon.JobOptions, error) {
	o := daemon.JobOptions{CheckpointEvery: c.Duration("checkpoint-every"), Keep: c.Int("keep")}
	if o.CheckpointEvery < 0 {
		return o, fmt.Errorf("--checkpoint-every %v: must not be negative", o.CheckpointEvery)
	}
	if o.Keep < 1 {
		return o, fmt.Errorf("--keep %d: keep at least one checkpoint", o.Keep)
	}
	return o, nil
}

// parseJob reads a job number: "3" or "j3", as ps shows jobs.
func parseJob(s string) (uint64, error) {
	n, err := strconv.ParseUint(strings.TrimPrefix(s, "j"), 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("job %q: want a job number (as 'dpvm ps' shows it)", s)
	}
	return n, nil
}

func checkpointCommand() *cli.Command { return checkpointControl().command() }

// checkpointControl takes a job checkpoint now.
func checkpointControl() controlCommand {
	return controlCommand{
		cmd: &cli.Command{
			Name:      "checkpoint",
			Usage:     "take a coordinated checkpoint of a running job now",
			ArgsUsage: "JOB",
			Description: "Every task of the job stops at its next safe point, the messages between them\n" +
				"are delivered, each host writes its tasks' checkpoints into a new set under the\n" +
				"directory (--dir, default the daemons' shared directory: every host must reach\n" +
				"it), and the master writes the set's manifest last; then the tasks go on.\n" +
				"'dpvm restart DIR/job-NAME' starts the job again from its newest complete set.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "dir", Usage: "directory to write the checkpoint under (default: the shared directory)"},
				jsonFlag(),
			},
		},
		act: func(c *cli.Context, cl *daemon.Client, ctx context.Context) error {
			if c.NArg() != 1 {
				return cli.Exit(fmt.Sprintf("checkpoint: give one job, got %d arguments", c.NArg()), 2)
			}
			job, err := parseJob(c.Args().First())
			if err != nil {
				return cli.Exit("checkpoint: "+err.Error(), 2)
			}
			r, err := cl.Checkpoint(ctx, job, c.String("dir"))
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, r)
			}
			fmt.Fprintf(c.App.Writer, "job %d (%s): checkpoint %d of %d tasks, %d bytes, in %.3f s (tasks held %.1f ms): %s\n",
				r.Job, r.Name, r.Seq, r.Tasks, r.Bytes, r.Seconds, r.PausedMS, r.Dir)
			return nil
		},
	}
}

// restartCommand restarts a job from its newest complete checkpoint.
func restartCommand() *cli.Command {
	return &cli.Command{
		Name:      "restart",
		Usage:     "restart a job from its newest complete checkpoint, on the hosts there are now",
		ArgsUsage: "DIR",
		Description: "DIR is a job's checkpoint directory (SHARED/job-NAME) or one set in it. The newest\n" +
			"complete, authentic set is used; newer incomplete or tampered ones are named and passed\n" +
			"over. Every task keeps its identity and goes back to its host if that host is still\n" +
			"in the virtual machine. The job's output follows, as with 'dpvm run --master', and the\n" +
			"command exits with the root task's status.",
		Flags: []cli.Flag{masterAddrFlag(), credentialFlag(), legacyKeyFlag(), checkpointEveryFlag(), keepFlag(),
			&cli.BoolFlag{Name: "json", Usage: "print the result as one JSON object ({dir, status, error}); the job's output goes to standard error"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit(fmt.Sprintf("restart: give one directory, got %d arguments", c.NArg()), 2)
			}
			opts, err := jobOptions(c)
			if err != nil {
				return cli.Exit("restart: "+err.Error(), 2)
			}
			if c.String("master") == "" {
				return cli.Exit("restart: no virtual machine named: give --master ADDR or set DPVM_MASTER", 2)
			}
			key, err := loadCredential(c)
			if err != nil {
				return cli.Exit("restart: "+err.Error(), 2)
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			cl, err := daemon.Dial(dctx, c.String("master"), key)
			cancel()
			if err != nil {
				return cli.Exit("restart: "+err.Error(), 1)
			}
			defer cl.Close()
			// The master reads the directory: make it absolute, for a
			// master on this machine started elsewhere.
			dir, err := filepath.Abs(c.Args().First())
			if err != nil {
				return cli.Exit("restart: "+err.Error(), 2)
			}
			out := c.App.Writer
			if c.Bool("json") {
				out = c.App.ErrWriter
			}
			cl.OnJobNote(jobNoteTo(c.App.ErrWriter))
			info, err := cl.Restart(ctx, dir, opts, out)
			if err == nil {
				err = daemon.ExitError(info)
			}
			if c.Bool("json") {
				if jerr := printJSON(c.App.Writer, newRunResult("", dir, err)); jerr != nil {
					return cli.Exit("restart: "+jerr.Error(), exitFailed)
				}
			}
			return exitFor("restart", err)
		},
	}
}
