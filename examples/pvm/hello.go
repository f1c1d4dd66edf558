package pvm

import (
	"flag"

	"github.com/dpvm/dpvm/task"
)

// Port of PVM 3.4's examples/hello.c and examples/hello_other.c.

// Hello is the root task of pvm.hello (hello.c): it spawns one
// HelloOther and prints the greeting it receives.
type Hello struct {
	Started bool     // "i'm …" printed
	Other   task.TID // the spawned HelloOther, once spawned
}

// HelloOther greets its parent with its host's name (hello_other.c).
type HelloOther struct {
	Sent bool
}

// helloTag is the tag hello_other.c sends with.
const helloTag = 1

func init() {
	task.Register("pvm.hello", &Hello{})
	task.Register("pvm.hello_other", &HelloOther{})
	task.RegisterProgram(task.Program{
		Name:    "pvm.hello",
		Summary: "PVM 3.4's hello: a task spawns another, which greets it",
		Setup: func(*flag.FlagSet) func([]string) (task.Task, error) {
			return func([]string) (task.Task, error) { return &Hello{}, nil }
		},
	})
}

// Run prints the task's TID, spawns hello_other and prints its greeting.
func (h *Hello) Run(c *task.Ctx) error {
	if !h.Started {
		c.Printf("i'm %v", c.MyTID())
		h.Started = true
	}
	if h.Other.IsZero() {
		tids, err := c.Spawn(&HelloOther{}, 1)
		if err != nil || len(tids) != 1 {
			c.Printf("can't start hello_other")
			return err
		}
		h.Other = tids[0]
	}
	var buf string
	st, err := c.Recv(task.AnyTask, task.AnyTag, &buf, task.Safe())
	if err != nil {
		return err
	}
	c.Printf("from %v: %s", st.From, buf)
	return nil
}

// Run sends "hello, world from <host>" to the parent.
func (h *HelloOther) Run(c *task.Ctx) error {
	if h.Sent {
		return nil
	}
	if err := c.Send(c.Parent(), helloTag, "hello, world from "+c.HostName()); err != nil {
		return err
	}
	h.Sent = true
	return nil
}
