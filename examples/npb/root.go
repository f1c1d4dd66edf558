package npb

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/dpvm/dpvm/task"
)

// Root is the root task of an NPB run: it spawns NP workers of Kernel as a
// communicator of their own, relays rank 0's progress and prints the
// report.
type Root struct {
	Kernel string
	Class  string
	NP     int
	// Iterations, when above 0, replaces the class's iteration count
	// (see RunOptions.Iterations).
	Iterations int
	// Lines makes the root print machine-readable progress and report
	// lines (for Run) instead of the NPB-style text report.
	Lines   bool
	Workers []task.TID
}

func init() {
	task.Register("npb.root", &Root{})
	task.Register("npb.ep.worker", &EPWorker{})
	task.Register("npb.cg.worker", &CGWorker{})
	task.Register("npb.mg.worker", &MGWorker{})
	task.Register("npb.ft.worker", &FTWorker{})
	task.Register("npb.is.worker", &ISWorker{})
	summaries := map[string]string{
		"ep": "NPB EP: embarrassingly parallel Gaussian deviates",
		"cg": "NPB CG: conjugate gradient, smallest eigenvalue of a sparse matrix",
		"mg": "NPB MG: multigrid V-cycles on a 3-D Poisson problem",
		"ft": "NPB FT: 3-D FFT solution of a diffusion equation",
		"is": "NPB IS: integer sort by bucketed counting",
	}
	for _, k := range Kernels {
		task.RegisterProgram(task.Program{
			Name:    "npb-" + k,
			Summary: summaries[k],
			Setup: func(fs *flag.FlagSet) func([]string) (task.Task, error) {
				class := fs.String("class", "S", "problem class: S, W, A, B, C or D")
				np := fs.Int("np", 1, "number of worker tasks")
				return func(args []string) (task.Task, error) {
					if len(args) > 0 {
						return nil, fmt.Errorf("unexpected arguments %q", args)
					}
					return NewRoot(k, *class, *np)
				}
			},
		})
	}
}

// NewRoot returns the root task of a run of kernel for class on np tasks,
// checking the parameters.
func NewRoot(kernel, class string, np int) (*Root, error) {
	k, err := NormKernel(kernel)
	if err != nil {
		return nil, err
	}
	cl, err := NormClass(class)
	if err != nil {
		return nil, err
	}
	if _, err := newWorker(k, cl, np); err != nil {
		return nil, err
	}
	return &Root{Kernel: k, Class: cl, NP: np}, nil
}

// Run spawns the workers (once) and waits for rank 0's result, failing if a
// worker fails first.
func (r *Root) Run(c *task.Ctx) error {
	if r.Workers == nil {
		proto, err := newWorker(r.Kernel, r.Class, r.NP)
		if err != nil {
			return err
		}
		if err := checkIterations(r.Kernel, r.Iterations); err != nil {
			return err
		}
		proto.place().Iters = r.Iterations
		tids, err := c.Spawn(proto, r.NP, task.Team()) // ranks 0..NP-1; the root is not one
		if err == nil {
			err = c.Notify(task.TaskExit, tagExit, tids...)
		}
		if err != nil {
			return fmt.Errorf("npb %s: %w", r.Kernel, err)
		}
		r.Workers = tids
	}
	for {
		m, err := c.Recv(task.AnyTask, task.AnyTag, nil, task.Safe()) // a safe point while it waits
		if err != nil {
			return err
		}
		switch m.Tag {
		case tagProgress:
			var p Progress
			if err := m.Decode(&p); err == nil && r.Lines {
				b, _ := json.Marshal(p)
				c.Printf("%s%s", progressPrefix, b)
			}
		case tagResult:
			var rep Report
			if err := m.Decode(&rep); err != nil {
				return fmt.Errorf("npb %s: result: %w", r.Kernel, err)
			}
			if r.Lines {
				b, err := json.Marshal(&rep)
				if err != nil {
					return fmt.Errorf("npb %s: %w", r.Kernel, err)
				}
				c.Printf("%s%s", reportPrefix, b)
			} else {
				var sb strings.Builder
				_ = rep.WriteText(&sb)
				c.Printf("%s", sb.String())
			}
			if !rep.Passed() {
				return task.Exit(1)
			}
			return nil
		case tagExit:
			var n task.Notice
			if err := m.Decode(&n); err != nil {
				return fmt.Errorf("npb %s: exit notice: %w", r.Kernel, err)
			}
			if n.Status != 0 || n.Err != "" {
				for _, t := range r.Workers {
					if t != n.TID {
						_ = c.Kill(t)
					}
				}
				return fmt.Errorf("npb %s: worker %v failed (status %d): %s", r.Kernel, n.TID, n.Status, n.Err)
			}
		}
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
}

// RunOptions configures Run.
type RunOptions struct {
	// Hosts is reported as the number of hosts the run had, and is the
	// number of hosts of a Local run's memory estimate (0: not known,
	// counted as more than one; see MemoryNeed).
	Hosts int
	// Progress, when set, receives rank 0's progress.
	Progress func(Progress)
	// Output receives the job's other output lines (default: discarded).
	Output io.Writer
	// Local says every task of the run lives in this process (an embedded
	// virtual machine): Run then refuses, with ErrNoMemory, a run whose
	// MemoryNeed exceeds the memory available.
	Local bool
	// MemAvailable reports the memory available to a Local run, in bytes;
	// nil reads MemAvailable from /proc/meminfo. When it fails, the run
	// goes ahead unchecked.
	MemAvailable func() (int64, error)
	// NoMemoryCheck skips the memory check.
	NoMemoryCheck bool
	// Iterations, when above 0, replaces the class's iteration count of
	// CG, MG or FT (the official suite reads MG's and FT's from an input
	// file). The reference values hold for the class's own count only,
	// so such a run is not verified (NotPerformed).
	Iterations int
}

// ErrBadIterations: an iteration count that the kernel does not take or
// that is out of range.
var ErrBadIterations = errors.New("unsupported iteration count")

// maxIterations bounds RunOptions.Iterations.
const maxIterations = 100000

// TakesIterations reports whether kernel takes an iteration count
// (RunOptions.Iterations).
func TakesIterations(kernel string) bool {
	return kernel == "cg" || kernel == "mg" || kernel == "ft"
}

// checkIterations checks an iteration count for kernel (0: the class's).
func checkIterations(kernel string, n int) error {
	switch {
	case n == 0:
		return nil
	case !TakesIterations(kernel):
		return fmt.Errorf("%s: only CG, MG and FT take an iteration count: %w", strings.ToUpper(kernel), ErrBadIterations)
	case n < 0 || n > maxIterations:
		return fmt.Errorf("%s: %d iterations, want 1 to %d: %w", strings.ToUpper(kernel), n, maxIterations, ErrBadIterations)
	}
	return nil
}

// ErrNoReport: the run ended without a report.
var ErrNoReport = errors.New("npb: the run ended without a report")

// Run runs kernel for class on np worker tasks as a job through r (an
// embedded virtual machine, or a running one's client) and returns the
// report, verified (Verify) against this program's reference values. A
// run that completes but does not verify returns its report (Verified
// Unsuccessful or NotPerformed, with the reason) and no error; one whose
// root passed but whose job had a worker fail or be killed at its end
// returns the report and an error (task.ErrJobTasks) naming it.
func Run(ctx context.Context, r task.Runner, kernel, class string, np int, opts RunOptions) (*Report, error) {
	root, err := NewRoot(kernel, class, np)
	if err != nil {
		return nil, err
	}
	if err := checkIterations(root.Kernel, opts.Iterations); err != nil {
		return nil, err
	}
	root.Iterations = opts.Iterations
	if opts.Local && !opts.NoMemoryCheck {
		if err := checkMemory(root.Kernel, root.Class, np, opts.Hosts, opts.MemAvailable); err != nil {
			return nil, err
		}
	}
	root.Lines = true
	sink := &lineSink{progress: opts.Progress, other: opts.Output}
	runErr := r.RunTask(ctx, root, sink)
	if sink.err != nil {
		return nil, sink.err
	}
	if sink.report == nil {
		if runErr == nil {
			runErr = ErrNoReport
		}
		return nil, fmt.Errorf("npb %s class %s np %d: %w", root.Kernel, root.Class, np, runErr)
	}
	var ee *task.ExitError
	if runErr != nil && !errors.As(runErr, &ee) {
		return nil, runErr
	}
	sink.report.Hosts = max(opts.Hosts, 1)
	// A root that passed the report returned cleanly: a failed task of
	// its job (a worker that failed, or was killed at the job's end,
	// after the report) fails the run all the same, naming it.
	rootPassed := sink.report.Passed()
	// The verdict is this program's: the workers may run another build
	// (on a running virtual machine) with other reference values.
	Verify(sink.report)
	if rootPassed && errors.Is(runErr, task.ErrJobTasks) {
		return sink.report, fmt.Errorf("npb %s class %s np %d: %w", root.Kernel, root.Class, np, runErr)
	}
	return sink.report, nil
}
