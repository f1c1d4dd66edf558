package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/task"
)

// consoleJobs are the jobs a console started with run or restart. Each
// runs on a connection of its own to the master (a connection carries one
// job's output) in a goroutine that copies the job's output to the
// console as it comes and reports how the job ended. The console's
// goroutine starts them; their goroutines only remove themselves.
type consoleJobs struct {
	mu      sync.Mutex
	next    int
	running map[int]consoleJob // by the console's job number
	wg      sync.WaitGroup
	failed  atomic.Bool // a job failed: a script's console exits with 1
	warned  bool        // 'quit' warned that jobs are running (console goroutine only)
}

// A consoleJob is a job running for the console.
type consoleJob struct {
	what   string // "run hello"
	cancel context.CancelFunc
}

// add records a job and returns its number.
func (j *consoleJobs) add(what string, cancel context.CancelFunc) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.running == nil {
		j.running = map[int]consoleJob{}
	}
	j.next++
	j.running[j.next] = consoleJob{what: what, cancel: cancel}
	j.wg.Add(1)
	return j.next
}

// done forgets job n, which has ended.
func (j *consoleJobs) done(n int) {
	j.mu.Lock()
	delete(j.running, n)
	j.mu.Unlock()
	j.wg.Done()
}

// list describes the running jobs, by number.
func (j *consoleJobs) list() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var ns []int
	for n := range j.running {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	var out []string
	for _, n := range ns {
		out = append(out, fmt.Sprintf("[%d] %s", n, j.running[n].what))
	}
	return out
}

// wait waits for every job to end.
func (j *consoleJobs) wait() { j.wg.Wait() }

// stop kills the running jobs (closing their connections makes the master
// kill them) and waits for their goroutines.
func (j *consoleJobs) stop() {
	j.mu.Lock()
	for _, r := range j.running {
		r.cancel()
	}
	j.mu.Unlock()
	j.wg.Wait()
}

// leave answers quit and exit: on a terminal with jobs running, the first
// one only warns, since leaving kills them; otherwise the console leaves
// (a script's console waits for its jobs first).
func (con *console) leave() bool {
	if !con.interactive {
		return true
	}
	running := con.jobs.list()
	if len(running) == 0 || con.jobs.warned {
		return true
	}
	con.jobs.warned = true
	fmt.Fprintf(con.errOut, "jobs started here still run: %s; leaving the console kills them ('quit' again to leave)\n", strings.Join(running, ", "))
	return false
}

// startJob starts a job on a connection of its own: do runs it, copying
// its output to out. It returns once the job has started.
func (con *console) startJob(ctx context.Context, what string, do func(context.Context, *daemon.Client, io.Writer) (daemon.TaskInfo, error)) error {
	dctx, dcancel := context.WithTimeout(ctx, con.timeout)
	cl, err := daemon.Dial(dctx, con.addr, con.key)
	dcancel()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	// The job outlives the command that started it: not its context's
	// cancellation, only the console's leaving, ends it.
	jctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n := con.jobs.add(what, cancel)
	fmt.Fprintf(con.errOut, "[%d] %s: started; its output follows as it comes\n", n, what)
	cl.OnJobNote(func(note daemon.JobNote) { fmt.Fprintf(con.errOut, "[%d] %s: %s\n", n, what, note) })
	go func() {
		defer con.jobs.done(n)
		defer cancel()
		defer cl.Close()
		info, err := do(jctx, cl, con.out)
		if err == nil {
			err = daemon.ExitError(info)
		}
		switch {
		case err == nil:
			fmt.Fprintf(con.errOut, "[%d] %s: done (job j%d)\n", n, what, info.Job)
		case jctx.Err() != nil:
			con.jobs.failed.Store(true)
			fmt.Fprintf(con.errOut, "[%d] %s: killed: the console left\n", n, what)
		default:
			con.jobs.failed.Store(true)
			fmt.Fprintf(con.errOut, "[%d] %s: %s\n", n, what, strings.ReplaceAll(err.Error(), "\n", "; "))
		}
	}()
	return nil
}

// runCommand is the console's run: a program's root task as a job whose
// output shows in the console, while the console goes on.
func (con *console) runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run a registered program as a job; its output shows in the console as it comes",
		ArgsUsage: "PROGRAM [program flags and arguments]",
		Description: "Everything after PROGRAM belongs to the program ('run hello --help' shows its\n" +
			"flags). The console goes on while the job runs; the job ends with the console.",
		Flags: []cli.Flag{checkpointEveryFlag(), keepFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return cli.Exit("run: no program named; known programs: "+programNames(), exitUsage)
			}
			name := c.Args().First()
			prog, ok := task.LookupProgram(name)
			if !ok {
				return cli.Exit(fmt.Sprintf("run: unknown program %q; known programs: %s", name, programNames()), exitUsage)
			}
			args := c.Args().Tail()
			if len(args) > 0 && args[0] == "--" {
				args = args[1:]
			}
			root, err := setupProgram(prog, args, con.out)
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			if err != nil {
				return cli.Exit(fmt.Sprintf("run %s: %v (see 'run %s --help')", name, err, name), exitUsage)
			}
			opts, err := jobOptions(c)
			if err != nil {
				return cli.Exit("run: "+err.Error(), exitUsage)
			}
			typ, state, err := task.EncodeState(root)
			if err != nil {
				return fmt.Errorf("run %s: %w", name, err)
			}
			return con.startJob(c.Context, "run "+name, func(ctx context.Context, cl *daemon.Client, out io.Writer) (daemon.TaskInfo, error) {
				return cl.RunJob(ctx, typ, state, opts, out)
			})
		},
	}
}

// restartCommand is the console's restart: a job restarted from its
// newest complete checkpoint, its output shown in the console.
func (con *console) restartCommand() *cli.Command {
	return &cli.Command{
		Name:      "restart",
		Usage:     "restart a job from its newest complete checkpoint; its output shows in the console",
		ArgsUsage: "DIR",
		Description: "DIR is a job's checkpoint directory as the master sees it (SHARED/job-NAME).\n" +
			"The console goes on while the job runs; the job ends with the console.",
		Flags: []cli.Flag{checkpointEveryFlag(), keepFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit(fmt.Sprintf("restart: give one directory, got %d arguments", c.NArg()), exitUsage)
			}
			opts, err := jobOptions(c)
			if err != nil {
				return cli.Exit("restart: "+err.Error(), exitUsage)
			}
			dir := c.Args().First()
			return con.startJob(c.Context, "restart "+dir, func(ctx context.Context, cl *daemon.Client, out io.Writer) (daemon.TaskInfo, error) {
				return cl.Restart(ctx, dir, opts, out)
			})
		},
	}
}
