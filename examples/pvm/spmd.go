package pvm

import (
	"flag"
	"fmt"
	"strings"

	"github.com/dpvm/dpvm/task"
)

// Port of PVM 3.4's examples/spmd.c.
//
// spmd.c is started as `spawn -4 spmd` from PVM's console and learns the
// tasks spawned with it from pvm_siblings, as the port does from
// c.Siblings. The root task SPMD plays the console's part, spawning the
// N tasks in one call and waiting for them to exit; the tasks start the
// ring once it watches them (a notify of a task already gone would say
// it was lost).

// SPMD is the root task of pvm.spmd: it spawns N SPMDTask tasks together
// and waits for them to end.
type SPMD struct {
	N        int
	Siblings []task.TID // the tasks spawned, once spawned
	Told     bool       // exit notices asked for, the tasks told to start
	Exited   int        // exit notices received
}

// SPMDTask is one task of the ring (spmd.c's main and dowork).
type SPMDTask struct {
	Started bool // the root's word to start heard
	Printed bool // instance 0: the ring printed
	Sent    bool // the token passed on
}

// Message tags of spmd.c (token) and of the root (start, exits).
const (
	spmdTokenTag = 4
	spmdStartTag = 100
	spmdExitTag  = 101
)

func init() {
	task.Register("pvm.spmd", &SPMD{})
	task.Register("pvm.spmd.task", &SPMDTask{})
	task.RegisterProgram(task.Program{
		Name:    "pvm.spmd",
		Summary: "PVM 3.4's spmd: a token around a ring of tasks spawned together",
		Setup: func(fs *flag.FlagSet) func([]string) (task.Task, error) {
			n := fs.Int("n", 4, "number of tasks spawned together (spmd.c's `spawn -N`)")
			return func([]string) (task.Task, error) {
				if *n < 1 || *n > 32 {
					return nil, fmt.Errorf("-n must be 1 to 32 (spmd.c's MAXNPROC), got %d", *n)
				}
				return &SPMD{N: *n}, nil
			}
		},
	})
}

// Run spawns the ring and waits for it.
func (s *SPMD) Run(c *task.Ctx) error {
	if s.Siblings == nil {
		tids, err := c.Spawn(&SPMDTask{}, s.N)
		if err != nil {
			for _, t := range tids {
				_ = c.Kill(t)
			}
			return err
		}
		s.Siblings = tids
	}
	if !s.Told {
		if err := c.Notify(task.TaskExit, spmdExitTag, s.Siblings...); err != nil {
			return err
		}
		if err := c.Mcast(s.Siblings, spmdStartTag, nil); err != nil {
			return err
		}
		s.Told = true
	}
	for s.Exited < len(s.Siblings) {
		var n task.Notice
		if _, err := c.Recv(task.AnyTask, spmdExitTag, &n, task.Safe()); err != nil {
			return err
		}
		if n.Err != "" {
			return fmt.Errorf("spmd task %v: %s", n.TID, n.Err)
		}
		s.Exited++
	}
	return nil
}

// Run learns its siblings, prints the ring if it is the first, and passes
// the token.
func (t *SPMDTask) Run(c *task.Ctx) error {
	if !t.Started {
		if _, err := c.Recv(c.Parent(), spmdStartTag, nil, task.Safe()); err != nil {
			return err
		}
		t.Started = true
	}
	sibs, me := c.Siblings() // pvm_siblings
	ntids := len(sibs)
	if me == 0 && !t.Printed {
		// spmd.c prints the TIDs as decimal numbers, seven to the first
		// line and six to each next one.
		var b strings.Builder
		fmt.Fprintf(&b, "Pass a token through the %3d tid ring:\n", ntids)
		for i, tid := range sibs {
			fmt.Fprintf(&b, "%6d -> ", uint64(tid))
			if i%6 == 0 && i > 0 {
				b.WriteString("\n")
			}
		}
		fmt.Fprintf(&b, "%6d \n", uint64(sibs[0]))
		c.Printf("%s", b.String())
		t.Printed = true
	}
	return t.dowork(c, sibs, me)
}

// dowork passes the token around the ring of sibs, in which the task is
// me (spmd.c's dowork).
func (t *SPMDTask) dowork(c *task.Ctx, sibs []task.TID, me int) error {
	nproc := len(sibs)
	src := sibs[(me+nproc-1)%nproc]
	dest := sibs[(me+1)%nproc]
	if me == 0 {
		if !t.Sent {
			if err := c.Send(dest, spmdTokenTag, uint64(dest)); err != nil {
				return err
			}
			t.Sent = true
		}
		if _, err := c.Recv(src, spmdTokenTag, nil, task.Safe()); err != nil {
			return err
		}
		c.Printf("token ring done")
		return nil
	}
	var token uint64
	if _, err := c.Recv(src, spmdTokenTag, &token, task.Safe()); err != nil {
		return err
	}
	return c.Send(dest, spmdTokenTag, token)
}
