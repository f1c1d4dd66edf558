package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"dpvm/task"
)

// RunOptions configures an embedded virtual machine.
type RunOptions struct {
	// Hosts is the number of daemons (default 1).
	Hosts int
	// Output receives the tasks' printed output (default: discarded).
	Output io.Writer
	// Logger receives the daemons' logs (default: discarded).
	Logger *slog.Logger
	// HaltTimeout bounds the wait for the remaining tasks' goroutines once
	// the root task has exited (default 5s).
	HaltTimeout time.Duration
}

// ErrUnsupported is returned for options this build cannot honour yet.
var ErrUnsupported = errors.New("not supported")

// Run starts an embedded virtual machine, runs root as the program's root
// task to completion, kills whatever tasks remain and stops the machine. It
// returns nil when the root task exited with status 0; otherwise an error
// that errors.As turns into a *task.ExitError carrying the status.
func Run(ctx context.Context, root task.Task, opts RunOptions) error {
	if opts.Hosts == 0 {
		opts.Hosts = 1
	}
	if opts.Hosts != 1 {
		return fmt.Errorf("run on %d hosts: embedded multi-host machines: %w", opts.Hosts, ErrUnsupported)
	}
	if opts.HaltTimeout <= 0 {
		opts.HaltTimeout = 5 * time.Second
	}
	d := New(Config{Output: opts.Output, Logger: opts.Logger})
	defer func() {
		hctx, cancel := context.WithTimeout(context.Background(), opts.HaltTimeout)
		defer cancel()
		if err := d.Halt(hctx); err != nil {
			d.log.Warn("halt", "error", err)
		}
	}()
	tid, err := d.SpawnTask(root)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	info, err := d.Wait(ctx, tid)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	return exitError(info)
}

// exitError turns a root task's final state into Run's result.
func exitError(info TaskInfo) error {
	if info.State == Exited && info.Status == 0 {
		return nil
	}
	err := &task.ExitError{Status: info.Status}
	if info.Status <= 0 {
		err.Status = 1
	}
	msg := info.Err
	if msg == "" {
		msg = info.State.String()
	}
	return fmt.Errorf("task %v (%s) %s: %w", info.TID, info.Type, msg, err)
}
