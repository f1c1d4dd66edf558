// Package simtest holds a deliberately broken program for the tests of
// the whole-VM simulation (daemon/sim) and of `dpvm sim vm`: one copy
// both use. Importing it registers the program.
package simtest

import (
	"flag"

	"github.com/dpvm/dpvm/task"
)

// Forgetful is the registered name of a program whose worker keeps its
// sum in an unexported field, which its checkpoint (msgpack of the
// exported fields) leaves out: a move of the worker loses what it had
// summed, and the job prints another sum than its fault-free run. Its
// flag -n (default 300) is how many numbers the worker sums, each step
// a safe point.
const Forgetful = "simtest-forgetful"

type forgetful struct {
	N      int
	Worker task.TID
}

type forgetfulWorker struct {
	N, I int
	sum  int // lost across a move: the bug
}

func init() {
	task.Register("simtest.forgetful", &forgetful{})
	task.Register("simtest.forgetful.worker", &forgetfulWorker{})
	task.RegisterProgram(task.Program{
		Name:    Forgetful,
		Summary: "a worker whose state forgets its sum across a move (the simulation's tests)",
		Setup: func(fs *flag.FlagSet) func([]string) (task.Task, error) {
			n := fs.Int("n", 300, "numbers to sum")
			return func([]string) (task.Task, error) { return &forgetful{N: *n}, nil }
		},
	})
}

// Run spawns the worker and prints the sum it sends back.
func (f *forgetful) Run(c *task.Ctx) error {
	if f.Worker == 0 {
		tids, err := c.Spawn(&forgetfulWorker{N: f.N}, 1)
		if err != nil {
			return err
		}
		f.Worker = tids[0]
	}
	var sum int
	if _, err := c.Recv(f.Worker, 1, &sum, task.Safe()); err != nil {
		return err
	}
	c.Printf("sum %d", sum)
	return nil
}

// Run sums 0 to N-1, a safe point at each step, and sends the sum to its
// parent.
func (w *forgetfulWorker) Run(c *task.Ctx) error {
	for ; w.I < w.N; w.I++ {
		w.sum += w.I
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	return c.Send(c.Parent(), 1, w.sum)
}
