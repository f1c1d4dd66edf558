package examples

import (
	"flag"
	"fmt"

	"github.com/dpvm/dpvm/task"
)

// tagNumber is the tag of the numbers the master deals to its workers.
const tagNumber = 9

// Squares is the root task of the squares program: it deals the numbers
// 0..N-1 to Workers workers and sums their squares with an all-reduce.
type Squares struct {
	N, Workers int
	C          task.Comm // the master (rank 0) and its workers (1..Workers)
	Dealt      int       // messages sent to the workers so far
}

// SquaresWorker squares the numbers it is sent until it gets a negative one.
type SquaresWorker struct {
	C    task.Comm
	Acc  int64
	Done bool
}

func init() {
	task.Register("examples.squares", &Squares{})
	task.Register("examples.squares.worker", &SquaresWorker{})
	task.RegisterProgram(task.Program{
		Name:    "squares",
		Summary: "sum of squares with a master, workers and an all-reduce",
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

// Run is the master. After a move or a rollback Run starts again from the
// top, so the fields say what is done already.
func (m *Squares) Run(c *task.Ctx) error {
	if m.C.Size() == 0 { // spawn the workers as ranks 1..Workers
		if _, err := c.Spawn(&SquaresWorker{}, m.Workers, task.WithComm(&m.C)); err != nil {
			return err
		}
	}
	for m.Dealt < m.N+m.Workers { // the numbers round-robin, then -1 to each
		i := m.Dealt
		if i >= m.N {
			i = -1 // no more work
		}
		if err := c.Send(m.C.TID(1+m.Dealt%m.Workers), tagNumber, i); err != nil {
			return err
		}
		m.Dealt++ // counted before the safe point, so never sent twice
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	sum := []int64{0} // the workers' sums added up, delivered to everyone
	if err := task.AllReduce(c, &m.C, task.Sum[int64], sum); err != nil {
		return err
	}
	c.Printf("sum of %d squares = %d", m.N, sum[0])
	return c.SetResult(sum[0])
}

// Run is a worker: all its progress is in its fields, and it waits in a
// Recv with task.Safe and in AllReduce, which are safe points, so it can be
// checkpointed or moved whenever it waits.
func (w *SquaresWorker) Run(c *task.Ctx) error {
	if err := c.JoinComm(&w.C); err != nil { // returns at once after a move
		return err
	}
	for !w.Done {
		var i int
		if _, err := c.Recv(c.Parent(), tagNumber, &i, task.Safe()); err != nil {
			return err
		}
		if i < 0 {
			w.Done = true
		} else {
			w.Acc += int64(i) * int64(i)
		}
	}
	return task.AllReduce(c, &w.C, task.Sum[int64], []int64{w.Acc})
}
