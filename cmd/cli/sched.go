package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/sched"
)

// schedCommand builds `dpvm sched`: the Dynamic-SED policy as operators'
// what-if tools that read a cluster snapshot and print the decision without
// a running virtual machine.
func schedCommand() *cli.Command {
	stateFlag := &cli.StringFlag{
		Name:  "state",
		Usage: "cluster snapshot `FILE` (JSON; - for standard input); required",
	}
	decisionJSON := &cli.BoolFlag{Name: "json", Usage: "print the decision as one line of JSON"}
	return &cli.Command{
		Name:  "sched",
		Usage: "dry-run the Dynamic-SED scheduler on a cluster snapshot",
		Description: "The snapshot is a JSON object with hosts (name, alpha, load, mem_free_mib,\n" +
			"users, max_users, slowdown), optional delay classes and params, a job\n" +
			"(minsize, maxsize) for plan and processes (tid, host, class, mem_mib,\n" +
			"counter) for step. Memory is in MiB; a host's load counts every runnable\n" +
			"process on it, the listed parallel processes included.",
		Subcommands: []*cli.Command{
			{
				Name:      "plan",
				Usage:     "map the snapshot's job with SED: delay class, size, expected delay time, placement",
				ArgsUsage: " ",
				Flags:     []cli.Flag{stateFlag, decisionJSON},
				Action: func(c *cli.Context) error {
					return schedAction(c, "plan", func(s *sched.Snapshot, out io.Writer, asJSON bool) error {
						m, err := sched.Plan(s, s.Job)
						if err != nil {
							return err
						}
						if asJSON {
							return writeJSONLine(out, m)
						}
						return sched.WritePlan(out, s, s.Job, m)
					})
				},
			},
			{
				Name:      "step",
				Usage:     "run one check period: counters, migrations, processes that stay",
				ArgsUsage: " ",
				Flags:     []cli.Flag{stateFlag, decisionJSON},
				Action: func(c *cli.Context) error {
					return schedAction(c, "step", func(s *sched.Snapshot, out io.Writer, asJSON bool) error {
						r, err := sched.Step(s)
						if err != nil {
							return err
						}
						if asJSON {
							return writeJSONLine(out, r)
						}
						return sched.WriteStep(out, s, r)
					})
				},
			},
			schedStatusCommand(),
		},
	}
}

// schedAction reads and decodes the snapshot named by --state, then runs
// decide on it. Every failure is one line and exit status 1.
func schedAction(c *cli.Context, name string, decide func(*sched.Snapshot, io.Writer, bool) error) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("sched %s: unexpected argument %q (the snapshot is given with --state)", name, c.Args().First()), 2)
	}
	path := c.String("state")
	if path == "" {
		return cli.Exit(fmt.Sprintf("sched %s: --state FILE is required (a JSON snapshot; - for standard input)", name), 2)
	}
	data, err := readState(c, path)
	if err != nil {
		return cli.Exit(fmt.Sprintf("sched %s: %v", name, err), 1)
	}
	s, err := sched.ParseSnapshot(data)
	if err != nil {
		return cli.Exit(fmt.Sprintf("sched %s: %s: %v", name, stateName(path), err), 1)
	}
	if err := decide(s, c.App.Writer, c.Bool("json")); err != nil {
		return cli.Exit(fmt.Sprintf("sched %s: %v", name, err), 1)
	}
	return nil
}

func readState(c *cli.Context, path string) ([]byte, error) {
	if path == "-" {
		r := c.App.Reader
		if r == nil {
			r = os.Stdin
		}
		data, err := io.ReadAll(r)
		if err != nil {
			return nil, fmt.Errorf("read standard input: %w", err)
		}
		return data, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	return data, nil
}

func stateName(path string) string {
	if path == "-" {
		return "standard input"
	}
	return path
}

func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}
