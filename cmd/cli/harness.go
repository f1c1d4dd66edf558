package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/urfave/cli/v2"
)

// runHarness runs a measurement harness script with bash. Its output is
// progress, so all of it goes to stderr: standard output keeps only the
// command's table (or JSON). On cancel the script is interrupted, so that
// its trap can clean up.
func runHarness(ctx context.Context, args []string, stderr io.Writer) error {
	cmd := exec.CommandContext(ctx, "bash", args...)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	return cmd.Run()
}

// harnessFailed is the command's error for a harness that failed after its
// results were printed (runErr not nil).
func harnessFailed(name string, runErr error) error {
	var ee *exec.ExitError
	if errors.As(runErr, &ee) {
		return cli.Exit(fmt.Sprintf("%s: the harness reported failed runs (exit %d); the table holds the runs that worked", name, ee.ExitCode()), 1)
	}
	return cli.Exit(name+": "+runErr.Error(), 1)
}

// writeMachine prints the command line that repeats the run and the
// harness's description of the machine, as the head of a table.
func writeMachine(w io.Writer, command string, machine []string) {
	fmt.Fprintf(w, "%s\n\n", command)
	for _, m := range machine {
		fmt.Fprintf(w, "- %s\n", m)
	}
	fmt.Fprintln(w)
}
