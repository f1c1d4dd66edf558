package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"
)

// Exit statuses. Every command follows this table (cmd/cli/README.md); a
// program run with run, restart or npb --master may end the command with
// its root task's own status instead.
const (
	exitOK          = 0   // success
	exitFailed      = 1   // the program or operation failed
	exitUsage       = 2   // usage error: bad flags or arguments
	exitInterrupted = 130 // interrupted (SIGINT, SIGTERM)
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
	return run(os.Stdin, args, stdout, stderr)
}

// run is Run reading standard input from stdin.
func run(stdin io.Reader, args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	app.Reader = stdin
	args = reorderArgs(app, args)
	err := app.Run(args)
	if err == nil {
		return exitOK
	}
	code := exitFailed
	msg := err.Error()
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		code = ec.ExitCode()
	}
	switch {
	case code == 3 && strings.HasPrefix(msg, "No help topic for "):
		// urfave/cli's own status for 'help UNKNOWN'.
		code = exitUsage
		msg = fmt.Sprintf("help: unknown command %s (see 'dpvm --help')", strings.TrimPrefix(msg, "No help topic for "))
	case isRequiredFlagError(err):
		code = exitUsage
		msg += " (see 'dpvm " + commandPath(app, args) + " --help')"
	}
	if msg != "" {
		fmt.Fprintf(stderr, "dpvm: %s\n", msg)
	}
	return code
}

// isRequiredFlagError reports whether err is urfave/cli's error for a
// missing required flag (its type is unexported), a usage error.
func isRequiredFlagError(err error) bool {
	return strings.HasPrefix(err.Error(), "Required flag")
}

// commandPath is the command args address, as "sched plan".
func commandPath(app *cli.App, args []string) string {
	var path []string
	cmds := app.Commands
	for _, a := range args[1:] {
		if c := findCommand(cmds, a); c != nil {
			path = append(path, c.Name)
			cmds = c.Subcommands
		}
	}
	return strings.Join(path, " ")
}

// newApp builds the command tree. Each command lives in its own file and is
// returned by a constructor named after it.
func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:                 "dpvm",
		Usage:                "run message-passing parallel programs whose tasks migrate between hosts",
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: false, // dpvm completion prints static scripts
		HideHelpCommand:      false,
		HideVersion:          true,                         // --version is ours: it prints the build
		ExitErrHandler:       func(*cli.Context, error) {}, // Run reports errors
		Flags:                []cli.Flag{logLevelFlag(), logFormatFlag(), versionFlag()},
		Before:               checkLogFlags,
		Commands: []*cli.Command{
			runCommand(),
			daemonCommand(),
			upCommand(),
			downCommand(),
			addCommand(),
			keygenCommand(),
			certCommand(),
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
			versionCommand(),
			completionCommand(),
			manCommand(),
		},
	}
	app.OnUsageError = usageErrorFor("dpvm")
	app.Action = func(c *cli.Context) error {
		if c.Bool("version") {
			return printVersion(c.App.Writer, false)
		}
		return parentAction("dpvm", app.Commands)(c)
	}
	prepareCommands(app.Commands, "dpvm")
	return app
}

// walkCommands calls f on every command of the tree below cmds, parents
// before their subcommands, with the command's full name ("dpvm sched
// plan"); prefix is the name of cmds' parent.
func walkCommands(cmds []*cli.Command, prefix string, f func(path string, c *cli.Command)) {
	for _, c := range cmds {
		if c.Name == "help" {
			continue
		}
		path := prefix + " " + c.Name
		f(path, c)
		walkCommands(c.Subcommands, path, f)
	}
}

// prepareCommands gives every command of the tree the same conduct: flag
// errors are one line naming the command and exit with status 2; a parent
// without its own action shows its help when called alone and rejects an
// unknown subcommand; a command that takes no arguments rejects them.
func prepareCommands(cmds []*cli.Command, prefix string) {
	walkCommands(cmds, prefix, func(path string, c *cli.Command) {
		if c.OnUsageError == nil {
			c.OnUsageError = usageErrorFor(path)
		}
		switch {
		case len(c.Subcommands) > 0 && c.Action == nil:
			c.Action = parentAction(path, c.Subcommands)
		case len(c.Subcommands) == 0 && c.Action != nil && strings.TrimSpace(c.ArgsUsage) == "":
			c.Action = noArguments(path, c.Action)
		}
	})
}

// usageErrorFor turns a flag-parsing failure of the command path into a
// one-line error naming it, instead of urfave/cli's default of an error
// followed by the full help text.
func usageErrorFor(path string) cli.OnUsageErrorFunc {
	return func(_ *cli.Context, err error, _ bool) error {
		return cli.Exit(fmt.Sprintf("%v (see '%s --help')", err, path), exitUsage)
	}
}

// usageErrorf is a usage error of the command path: exit status 2.
func usageErrorf(path, format string, args ...any) error {
	return cli.Exit(fmt.Sprintf("%s: %s (see 'dpvm %s --help')", path, fmt.Sprintf(format, args...), path), exitUsage)
}

// parentAction is the action of a command that only holds subcommands:
// alone it shows its help; followed by anything else it is a usage error.
func parentAction(path string, subs []*cli.Command) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.NArg() == 0 {
			if c.Command == nil || c.Command.Name == "" {
				return cli.ShowAppHelp(c)
			}
			return cli.ShowSubcommandHelp(c)
		}
		var names []string
		for _, s := range subs {
			if s.Name != "help" && !s.Hidden {
				names = append(names, s.Name)
			}
		}
		what := "unknown command"
		if path != "dpvm" {
			what = strings.TrimPrefix(path, "dpvm ") + ": " + what
		}
		return cli.Exit(fmt.Sprintf("%s %q; commands: %s (see '%s --help')",
			what, c.Args().First(), strings.Join(names, ", "), path), exitUsage)
	}
}

// noArguments wraps the action of a command that takes no positional
// arguments so that a stray one is a usage error rather than ignored.
func noArguments(path string, act cli.ActionFunc) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.NArg() > 0 {
			return cli.Exit(fmt.Sprintf("%s: unexpected argument %q (see '%s --help')",
				strings.TrimPrefix(path, "dpvm "), c.Args().First(), path), exitUsage)
		}
		return act(c)
	}
}
