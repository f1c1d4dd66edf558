package examples

import (
	"flag"
	"fmt"

	"github.com/dpvm/dpvm/task"
)

// Squares is the root task of the squares program: it deals the numbers
// 0..N-1 to Workers workers and sums their squares with a group reduce.
type Squares struct {
	N, Workers int
	Sum        int64
}

// SquaresWorker squares the numbers it is sent until it gets a negative one.
type SquaresWorker struct {
	Size int // members of the group: the workers and the master
	Acc  int64
	Done bool
}

const squaresGroup = "examples.squares"

func init() {
	task.Register("examples.squares", &Squares{})
	task.Register("examples.squares.worker", &SquaresWorker{})
	task.RegisterProgram(task.Program{
		Name:    "squares",
		Summary: "sum of squares with a master, workers and a reduce",
		Setup: func(fs *flag.FlagSet) func([]string) (task.Task, error) {
			n := fs.Int("n", 1000, "how many squares")
			w := fs.Int("workers", 4, "how many workers")
			return func([]string) (task.Task, error) {
				if *n < 0 || *w < 1 {
					return nil, fmt.Errorf("need -n >= 0 and -workers >= 1")
				}
				return &Squares{N: *n, Workers: *w}, nil
			}
		},
	})
}

// Run is the master. (It has no safe point: it is never moved mid-run.)
func (m *Squares) Run(c *task.Ctx) error {
	if _, err := c.Join(squaresGroup); err != nil { // instance 0
		return err
	}
	workers, err := c.Spawn(&SquaresWorker{Size: m.Workers + 1}, m.Workers)
	if err != nil {
		return err
	}
	for i := range m.N { // deal the numbers round-robin
		if err := c.Send(workers[i%len(workers)], tagWork, i); err != nil {
			return err
		}
	}
	if err := c.Mcast(workers, tagWork, -1); err != nil { // no more work
		return err
	}
	// Everyone has joined once everyone is at the barrier; then reduce.
	if err := c.Barrier(squaresGroup, m.Workers+1); err != nil {
		return err
	}
	sum := []int64{0}
	if err := task.Reduce(c, task.Sum[int64], sum, squaresGroup, tagSum, 0); err != nil {
		return err
	}
	m.Sum = sum[0]
	c.Printf("sum of %d squares = %d", m.N, m.Sum)
	return c.Barrier(squaresGroup, m.Workers+1) // keep the group whole until done
}

// Run is a worker: all its progress is in its fields, so it can be
// checkpointed at its safe point and resumed elsewhere.
func (w *SquaresWorker) Run(c *task.Ctx) error {
	if _, err := c.GroupInst(squaresGroup, c.MyTID()); err != nil {
		if _, err := c.Join(squaresGroup); err != nil {
			return err
		}
	}
	for !w.Done {
		var i int
		if _, err := c.Recv(c.Parent(), tagWork, &i); err != nil {
			return err
		}
		if i < 0 {
			w.Done = true
			break
		}
		w.Acc += int64(i) * int64(i)
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	if err := c.Barrier(squaresGroup, w.Size); err != nil {
		return err
	}
	if err := task.Reduce(c, task.Sum[int64], []int64{w.Acc}, squaresGroup, tagSum, 0); err != nil {
		return err
	}
	return c.Barrier(squaresGroup, w.Size)
}
