package pvm

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/dpvm/dpvm/task"
)

// Port of PVM 3.4's examples/spmd.c.
//
// spmd.c is started as `spawn -4 spmd` from PVM's console and learns the
// tasks spawned with it from pvm_siblings. The port keeps spmd.c's
// ring: the root task SPMD plays the console's part, spawning the N tasks
// in one call, sending each the list of TIDs that call returned (what
// task.Team and JoinComm would give them) and waiting for them to exit.

// SPMD is the root task of pvm.spmd: it spawns N SPMDTask tasks together,
// hands them their sibling list and waits for them to end.
type SPMD struct {
	N        int
	Siblings []task.TID // the tasks spawned, once spawned
	Told     bool       // the sibling list sent, exit notices asked for
	Exited   int        // exit notices received
}

// SPMDTask is one task of the ring (spmd.c's main and dowork).
type SPMDTask struct {
	Siblings []task.TID // pvm_siblings' list, once received
	Me       int        // index in Siblings
	Printed  bool       // instance 0: the ring printed
	Sent     bool       // the token passed on
}

// Message tags of spmd.c (token) and of the root (siblings, exits).
const (
	spmdTokenTag    = 4
	spmdSiblingsTag = 100
	spmdExitTag     = 101
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

// Run spawns the ring, tells each task its siblings and waits for them.
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
		if err := c.Mcast(s.Siblings, spmdSiblingsTag, s.Siblings); err != nil {
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
	if t.Siblings == nil {
		var sibs []task.TID
		if _, err := c.Recv(c.Parent(), spmdSiblingsTag, &sibs, task.Safe()); err != nil {
			return err
		}
		me := slices.Index(sibs, c.MyTID())
		if me < 0 {
			return fmt.Errorf("spmd: %v not in its sibling list", c.MyTID())
		}
		t.Siblings, t.Me = sibs, me
	}
	ntids := len(t.Siblings)
	if t.Me == 0 && !t.Printed {
		// spmd.c prints the TIDs as decimal numbers, seven to the first
		// line and six to each next one.
		var b strings.Builder
		fmt.Fprintf(&b, "Pass a token through the %3d tid ring:\n", ntids)
		for i, tid := range t.Siblings {
			fmt.Fprintf(&b, "%6d -> ", uint64(tid))
			if i%6 == 0 && i > 0 {
				b.WriteString("\n")
			}
		}
		fmt.Fprintf(&b, "%6d \n", uint64(t.Siblings[0]))
		c.Printf("%s", b.String())
		t.Printed = true
	}
	return t.dowork(c)
}

// dowork passes the token around the ring (spmd.c's dowork).
func (t *SPMDTask) dowork(c *task.Ctx) error {
	nproc := len(t.Siblings)
	src := t.Siblings[(t.Me+nproc-1)%nproc]
	dest := t.Siblings[(t.Me+1)%nproc]
	if t.Me == 0 {
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
