package pvm

import (
	"errors"
	"flag"
	"fmt"

	"github.com/dpvm/dpvm/task"
)

// Port of PVM 3.4's examples/gexample.c.
//
// gexample.c reads the matrix dimension and the number of tasks from its
// standard input when started from a shell, and uses 100 and 10 when
// started from the console; dpvm tasks have no standard input, so the
// port takes them as flags with those defaults. pvm_freezegroup becomes
// GroupComm with nproc members (both wait until nproc tasks have joined),
// whose communicator carries pvm_reduce's reductions, and instance 0
// waits for the others to exit before it returns (its job would wait for
// them too, as PVM's tasks outlive their parent).
// The SPMD start (`spawn -N gexample`, the group of siblings) is left
// out: instance 0 is the task that spawns the others.

// GExample is a task of pvm.gexample: instance 0 of the group "matrix"
// (the root) spawns the others, which are GExample tasks too.
type GExample struct {
	NProc     int        // tasks in the group (instance 0: what it was asked for)
	Dimension int        // order of the matrix
	Joined    bool       // in the group "matrix"
	Inst      int        // instance number in the group
	Children  []task.TID // instance 0: the tasks it spawned
	Told      bool       // instance 0: nproc and dimension multicast
	Reduced   bool       // reductions done and results printed
	Computed  bool       // reductions, results and barrier done
	M         task.Comm  // the group "matrix" as a communicator, in instance order
	Exited    int        // instance 0: children's exits received
}

// Tags and the group of gexample.c (its reductions' tags are the
// communicator's); gexampleExitTag is the port's.
const (
	gexampleGroup   = "matrix"
	gexampleInitTag = 1000
	gexampleExitTag = 1100
)

func init() {
	task.Register("pvm.gexample", &GExample{})
	task.RegisterProgram(task.Program{
		Name:    "pvm.gexample",
		Summary: "PVM 3.4's gexample: group reductions over a Toeplitz matrix",
		Setup: func(fs *flag.FlagSet) func([]string) (task.Task, error) {
			dim := fs.Int("dimension", 100, "order of the matrix (gexample.c's first input)")
			nproc := fs.Int("nproc", 10, "number of tasks, 1-32 (gexample.c's second input)")
			return func([]string) (task.Task, error) {
				if *dim <= 0 {
					return nil, fmt.Errorf("-dimension must be positive, got %d", *dim)
				}
				if *nproc <= 0 || *nproc > 32 {
					return nil, fmt.Errorf("-nproc must be 1 to 32, got %d", *nproc)
				}
				return &GExample{NProc: *nproc, Dimension: *dim}, nil
			}
		},
	})
}

// gexampleInit is what instance 0 packs for the others.
type gexampleInit struct {
	NProc     int
	Dimension int
}

// Run joins the group, sets it up (instance 0) or learns its size, then
// computes its block of rows and takes part in the reductions.
func (g *GExample) Run(c *task.Ctx) error {
	if !g.Joined {
		inst, err := c.Join(gexampleGroup)
		if err != nil {
			c.Printf("Could not join group")
			return err
		}
		g.Inst, g.Joined = inst, true
		if inst == 0 {
			c.Printf(" This program demonstrates some group and reduction  \n" +
				" operations in PVM.  The output displays the \n" +
				" the product of the first column of a Toeplitz matrix\n" +
				" and the matrix 1-norm. The matrix data is distributed \n" +
				" among several processors.  The Toeplitz matrix is \n" +
				" symmetric with the first row being the row \n" +
				" vector [1 2 ... n].\n")
		}
	}
	if g.Inst == 0 && !g.Told {
		if g.NProc > 1 && g.Children == nil {
			tids, err := c.Spawn(&GExample{}, g.NProc-1)
			g.Children = tids
			if err != nil && len(tids) == 0 {
				return err
			}
			g.NProc = min(g.NProc, len(tids)+1)
		}
		if len(g.Children) > 0 {
			if err := c.Notify(task.TaskExit, gexampleExitTag, g.Children...); err != nil {
				return err
			}
			if err := c.Mcast(g.Children, gexampleInitTag, gexampleInit{g.NProc, g.Dimension}); err != nil {
				return err
			}
		}
		g.Told = true
		c.Printf("\n       --> Using %d processors <-- \n\n", g.NProc)
	}
	if g.Inst != 0 && g.NProc == 0 {
		var in gexampleInit
		if _, err := c.Recv(task.AnyTask, gexampleInitTag, &in, task.Safe()); err != nil {
			return err
		}
		g.NProc, g.Dimension = in.NProc, in.Dimension
	}
	if !g.Computed {
		if err := g.compute(c); err != nil {
			return err
		}
		g.Computed = true
	}
	for g.Inst == 0 && g.Exited < len(g.Children) {
		if _, err := c.Recv(task.AnyTask, gexampleExitTag, nil, task.Safe()); err != nil {
			return err
		}
		g.Exited++
	}
	return nil
}

// compute is gexample.c from pvm_freezegroup to pvm_lvgroup. Its safe
// points are GroupComm's wait, the reductions' waits and the last
// barrier's: Run re-entered in the first two computes the same blocks
// again, and the reductions carry on (see task.Comm); re-entered in the
// barrier (Reduced set) it arrives at the barrier again.
func (g *GExample) compute(c *task.Ctx) error {
	if !g.Reduced {
		if err := g.reduce(c); err != nil {
			return err
		}
		g.Reduced = true
	}
	// Make sure the processes are finished.
	if err := c.Barrier(gexampleGroup, -1, task.Safe()); err != nil {
		if !errors.Is(err, task.ErrKilled) && !errors.Is(err, task.ErrSuspended) {
			c.Printf("Barrier failed with result code %v", err)
		}
		return err
	}
	return c.Leave(gexampleGroup)
}

// reduce makes the group's communicator, computes the task's block of rows
// and reduces the column sums and products to instance 0, which prints
// them.
func (g *GExample) reduce(c *task.Ctx) error {
	// pvm_freezegroup(MATRIXGROUP, nproc): wait until nproc tasks have
	// joined; their communicator serves pvm_reduce.
	if err := c.GroupComm(gexampleGroup, g.NProc, &g.M); err != nil {
		return err
	}
	// Map matrix rows to processors.
	dimension := g.Dimension
	blksize := dimension / g.NProc
	nextra := dimension % g.NProc
	var mysrow int
	if g.Inst < nextra {
		mysrow = (blksize + 1) * g.Inst
		blksize++
	} else {
		mysrow = (blksize+1)*nextra + blksize*(g.Inst-nextra)
	}
	if mysrow >= dimension { // too many processors!
		blksize = 0
	}
	// The rows of a symmetric Toeplitz matrix whose first row is 1 … n.
	subblock := make([]int32, blksize*dimension)
	for i := range blksize {
		for j := range dimension {
			subblock[i*dimension+j] = int32(1 + gexampleAbs(mysrow+i-j))
		}
	}
	// Locally compute the sum and the product of each column.
	colsum := make([]int32, dimension)
	colprod := make([]float64, dimension)
	for j := range colprod {
		colprod[j] = 1.0
	}
	for i := range blksize {
		for j := range dimension {
			itemp := subblock[j+i*dimension]
			colsum[j] += int32(gexampleAbs(int(itemp)))
			colprod[j] *= float64(gexampleAbs(int(itemp)))
		}
	}
	if err := task.Reduce(c, &g.M, task.Sum, colsum, 0); err != nil {
		c.Printf("pvm_reduce had an error: %v", err)
		return err
	}
	if err := task.Reduce(c, &g.M, calcprod, colprod, 0); err != nil {
		return err
	}
	if g.Inst == 0 {
		var maxmax int32
		for _, s := range colsum {
			maxmax = max(s, maxmax)
		}
		c.Printf(" The 1-Norm is %d  ", maxmax)
		c.Printf(" ( Should be the sum of the integers from 1 to %d )", dimension)
		c.Printf(" The product of column 1 is %.6g  ", colprod[0])
		c.Printf(" ( Should be %d factorial)", dimension)
	}
	return nil
}

// calcprod is gexample.c's user-defined reduction: x[i] *= y[i].
func calcprod(x, y []float64) {
	for i := range x {
		x[i] *= y[i]
	}
}

func gexampleAbs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
