package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

// Main runs the dpvm command line on the process's arguments and exits with
// its status. A user's own binary calls it from main, beside the imports of
// its task packages, and gets every dpvm command with its programs
// registered.
func Main() {
	if os.Getenv("GOGC") == "" {
		// Messages and checkpoints are large, short-lived buffers: with the
		// default GOGC of 100 the collector runs so often that moving 1 MiB
		// between two tasks costs ~6× more (measured with dpvm bench
		// pingpong --local). Trade some memory for it; GOGC overrides.
		debug.SetGCPercent(400)
	}
	os.Exit(Run(os.Args, os.Stdout, os.Stderr))
}

// Run executes the dpvm command line args (args[0] is the program's name)
// and returns the process exit status.
func Run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	args = reorderArgs(app, args)
	if err := app.Run(args); err != nil {
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			if msg := err.Error(); msg != "" {
				fmt.Fprintf(stderr, "dpvm: %s\n", msg)
			}
			return ec.ExitCode()
		}
		fmt.Fprintf(stderr, "dpvm: %v\n", err)
		return 1
	}
	return 0
}

// newApp builds the command tree. Each command lives in its own file and is
// returned by a constructor named after it.
func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:                 "dpvm",
		Usage:                "run message-passing parallel programs whose tasks migrate between hosts",
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: false,
		HideHelpCommand:      false,
		ExitErrHandler:       func(*cli.Context, error) {}, // Run reports errors
		OnUsageError:         usageError,
		Flags:                []cli.Flag{logLevelFlag},
		Commands: []*cli.Command{
			runCommand(),
			daemonCommand(),
			keygenCommand(),
			confCommand(),
			psCommand(),
			spawnCommand(),
			killCommand(),
			migrateCommand(),
			checkpointCommand(),
			restartCommand(),
			deleteCommand(),
			haltCommand(),
			consoleCommand(),
			schedCommand(),
			loadCommand(),
			simCommand(),
			npbCommand(),
			benchCommand(),
			slurmCommand(),
		},
	}
	setUsageErrors(app.Commands)
	return app
}

// usageError turns a flag-parsing failure into a one-line error instead of
// urfave/cli's default of an error followed by the full help text.
func usageError(c *cli.Context, err error, _ bool) error {
	name := c.App.Name
	if c.Command != nil && c.Command.Name != "" {
		name = c.Command.FullName()
		if name != c.App.Name {
			name = c.App.Name + " " + name
		}
	}
	return cli.Exit(fmt.Sprintf("%v (see '%s --help')", err, name), 2)
}

func setUsageErrors(cmds []*cli.Command) {
	for _, c := range cmds {
		if c.OnUsageError == nil {
			c.OnUsageError = usageError
		}
		setUsageErrors(c.Subcommands)
	}
}
