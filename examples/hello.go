package examples

import (
	"fmt"
	"slices"

	"github.com/dpvm/dpvm/task"
)

// Hello is the root task of the hello program: it spawns N children and
// prints their greetings in TID order.
type Hello struct {
	N        int `flag:"n,number of children" min:"1"`
	Children []task.TID
	Greeting []string // by child index
	Got      int
}

// HelloChild greets its parent.
type HelloChild struct {
	Sent bool
}

// Message tags of the hello program.
const (
	helloGreeting = 1
)

func init() {
	task.Register("examples.hello", &Hello{})
	task.Register("examples.hello.child", &HelloChild{})
	task.RegisterProgram(task.Program{
		Name:    "hello",
		Summary: "a parent spawns N children and collects their greetings",
		Proto:   &Hello{N: 4},
	})
}

// Run spawns the children (once), then receives a greeting from each.
func (h *Hello) Run(c *task.Ctx) error {
	if h.Children == nil {
		tids, err := c.Spawn(&HelloChild{}, h.N)
		if err != nil {
			return err
		}
		h.Children = tids
		h.Greeting = make([]string, h.N)
	}
	for h.Got < h.N {
		var g string
		st, err := c.Recv(task.AnyTask, helloGreeting, &g, task.Safe())
		if err != nil {
			return err
		}
		i := slices.Index(h.Children, st.From)
		if i < 0 || h.Greeting[i] != "" {
			return fmt.Errorf("unexpected greeting from %v", st.From)
		}
		h.Greeting[i] = g
		h.Got++
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	c.Printf("%v: %d children said hello:", c.MyTID(), h.N)
	for _, g := range h.Greeting {
		c.Printf("  %s", g)
	}
	return nil
}

// Run sends one greeting to the parent.
func (h *HelloChild) Run(c *task.Ctx) error {
	if h.Sent {
		return nil
	}
	if err := c.Send(c.Parent(), helloGreeting, fmt.Sprintf("hello from %v on %s", c.MyTID(), c.HostName())); err != nil {
		return err
	}
	h.Sent = true
	return nil
}
