package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/dpvm/dpvm/daemon/load"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/task"
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
	// Job asks for periodic checkpoints of the program's job (several
	// hosts only; into SharedDir).
	Job JobOptions
	// SharedDir is the shared directory for indirect migration; with
	// several hosts and none given, a temporary directory serves (and is
	// removed afterwards).
	SharedDir string
	// Result, when not nil, is a pointer the root task's result (what it
	// recorded with Ctx.SetResult) is decoded into.
	Result any
	// OnJobNote, when not nil, hears what befalls the program's job
	// (several hosts): a rollback after a host was lost, and to which
	// checkpoint, or the job's loss. It must not block.
	OnJobNote func(JobNote)
}

// ErrUnsupported is returned for options this build cannot honour yet.
var ErrUnsupported = errors.New("not supported")

// Run starts an embedded virtual machine, runs root as the root task of a
// job to its end and stops the machine. The job ends when its root has and
// its other tasks too: they are waited for, or killed when the root failed
// or asks for it (task.JobEnder). Run returns nil when the root task
// exited with status 0 and no other task of the job failed or was killed;
// otherwise an error that errors.As turns into a *task.ExitError carrying
// the root's status (1 when only other tasks failed), naming the failed
// tasks (errors.Is ErrJobTasks).
func Run(ctx context.Context, root task.Task, opts RunOptions) error {
	if opts.Hosts == 0 {
		opts.Hosts = 1
	}
	if opts.Hosts < 1 {
		return fmt.Errorf("run on %d hosts: need at least one", opts.Hosts)
	}
	if opts.HaltTimeout <= 0 {
		opts.HaltTimeout = 5 * time.Second
	}
	var d *Daemon
	if opts.Hosts == 1 {
		d = New(Config{Output: opts.Output, Logger: opts.Logger})
		defer func() {
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.HaltTimeout) // ctx may have ended
			defer cancel()
			if err := d.Halt(hctx); err != nil {
				d.log.Warn("halt", "error", err)
			}
		}()
	} else {
		if opts.SharedDir == "" {
			dir, err := os.MkdirTemp("", "dpvm-shared-")
			if err != nil {
				return fmt.Errorf("run: %w", err)
			}
			defer os.RemoveAll(dir)
			opts.SharedDir = dir
		}
		vm, err := StartLocalVM(ctx, opts.Hosts, Config{Output: opts.Output, Logger: opts.Logger, SharedDir: opts.SharedDir})
		if err != nil {
			return fmt.Errorf("run: %w", err)
		}
		defer vm.Halt(opts.HaltTimeout)
		d = vm.Master()
	}
	// The machine stops only once the job is over: a checkpoint round
	// still running would see its hosts leave as lost, and the job's
	// other tasks are waited for (or killed, as the root asks) first.
	if opts.Hosts == 1 {
		opts.Job = JobOptions{} // checkpoints need several hosts
	}
	info, err := d.runEmbeddedJob(ctx, root, opts.Job, opts.OnJobNote)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	if opts.Result != nil && len(info.Result.Data) > 0 {
		if err := info.Result.Decode(opts.Result); err != nil {
			return fmt.Errorf("run: result: %w", err)
		}
	}
	return exitError(info)
}

// exitError turns a job's end, its root task's final state, into Run's
// result: nil for a clean exit of the root with no other task of the job
// failed or killed.
func exitError(info TaskInfo) error {
	rootOK := info.State == Exited && info.Status == 0
	if rootOK && len(info.JobFailures) == 0 {
		return nil
	}
	err := &task.ExitError{Status: info.Status}
	if info.Status <= 0 || rootOK {
		err.Status = 1
	}
	if rootOK {
		return fmt.Errorf("task %v (%s) exited, but %w: %s: %w", info.TID, info.Type, ErrJobTasks, failedList(info.JobFailures), err)
	}
	msg := info.Err
	if msg == "" {
		msg = info.State.String()
	}
	if len(info.JobFailures) > 0 {
		return fmt.Errorf("task %v (%s) %s: %w; %w: %s", info.TID, info.Type, msg, err, ErrJobTasks, failedList(info.JobFailures))
	}
	return fmt.Errorf("task %v (%s) %s: %w", info.TID, info.Type, msg, err)
}

// LocalVM is a virtual machine of several daemons in one process, talking
// real QUIC over loopback, as `dpvm run --hosts N` starts it.
type LocalVM struct {
	Daemons []*Daemon // Daemons[0] is the master
	// Cluster is the ephemeral CA, secret and credentials made for the
	// machine: Cluster.Admin is a client's credential, Cluster.Host issues
	// one for another daemon to join.
	Cluster *pki.Cluster
}

// StartLocalVM starts a master and hosts-1 daemons joining it on
// 127.0.0.1, under a fresh CA made in memory; the daemons are named h1
// (the master), h2, … cfg supplies the settings common to all (output,
// logger, heartbeats); its network fields are set here. A cfg.Secret is
// kept (a machine reading the checkpoints of an earlier one); otherwise
// the secret is fresh too.
// With cfg.Metrics, the master gets it and each other daemon a fresh one
// (Metrics.Fresh).
func StartLocalVM(ctx context.Context, hosts int, cfg Config) (*LocalVM, error) {
	cl, err := pki.NewCluster(time.Now(), MasterID.String(), "admin")
	if err != nil {
		return nil, err
	}
	if cfg.Secret != nil {
		cl.Secret = cfg.Secret
	}
	vm := &LocalVM{Cluster: cl}
	for i := range hosts {
		c := cfg
		c.Listen, c.Secret = "127.0.0.1:0", cl.Secret
		c.Master, c.Join, c.Name = i == 0, "", ""
		c.Credential = cl.Master
		if i > 0 {
			c.Join = vm.Daemons[0].Addr()
			if c.Credential, err = cl.Host(task.HostID(i + 1).String()); err != nil {
				vm.Halt(5 * time.Second)
				return nil, err
			}
			c.Metrics = cfg.Metrics.Fresh() // each daemon its own; the master keeps cfg's
		}
		d, err := Start(ctx, c)
		if err != nil {
			vm.Halt(5 * time.Second)
			return nil, fmt.Errorf("start host %d of %d: %w", i+1, hosts, err)
		}
		vm.Daemons = append(vm.Daemons, d)
	}
	return vm, nil
}

// Master is the master daemon.
func (vm *LocalVM) Master() *Daemon { return vm.Daemons[0] }

// Halt stops every daemon, hosts first, waiting at most timeout for each.
// The master knows the machine is halting: the hosts leaving it are no
// loss.
func (vm *LocalVM) Halt(timeout time.Duration) {
	if len(vm.Daemons) > 0 {
		vm.Master().stopping(task.ErrHalted)
	}
	for i := len(vm.Daemons) - 1; i >= 0; i-- {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(vm.Daemons[i].ctx), timeout)
		_ = vm.Daemons[i].Halt(ctx)
		cancel()
	}
}

// InjectLoad sets an emulated overlay on host h's load figures (as `dpvm
// load inject` does).
func (vm *LocalVM) InjectLoad(ctx context.Context, h string, o load.Overlay) error {
	return vm.Master().injectAt(ctx, h, o, false)
}

// LocalRunner runs programs' root tasks in embedded virtual machines made
// with opts, each run its own (the output goes where RunTask says; opts'
// Output is not used).
func LocalRunner(opts RunOptions) task.Runner {
	return task.RunnerFunc(func(ctx context.Context, root task.Task, out io.Writer) error {
		o := opts
		o.Output = out
		return Run(ctx, root, o)
	})
}
