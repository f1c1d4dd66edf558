package task

import (
	"context"
	"io"
)

// Runner runs a program's root task as a job — in an embedded virtual
// machine or on a running one, as the runtime that provides the Runner
// decides — copying the output of the job's tasks to out as it arrives,
// and returns when the job has ended (its root task and its other tasks;
// see JobEnder): nil for a clean exit, an *ExitError for a non-zero status
// of the root or a task of the job that failed or was killed at its end,
// another error when the job could not run or was lost. It lets a program drive runs of its own tasks (as
// examples/npb does) through this package alone.
type Runner interface {
	RunTask(ctx context.Context, root Task, out io.Writer) error
}

// RunnerFunc turns a function into a Runner.
type RunnerFunc func(ctx context.Context, root Task, out io.Writer) error

// RunTask calls f.
func (f RunnerFunc) RunTask(ctx context.Context, root Task, out io.Writer) error {
	return f(ctx, root, out)
}
