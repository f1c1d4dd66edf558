// Command flood is dpvm with two more programs: flood, where a source
// task sends messages forever (N of them) to a sink task that never
// receives, and spawnloop, whose root spawns tasks that never end, in
// batches, until a spawn fails, and then waits. The adversarial tests run them to check
// that the daemons' memory stays under their budget (the source blocks,
// it is not buffered without end) and that a job's spawns meet its quota.
package main

import (
	"flag"

	"github.com/dpvm/dpvm/cmd/cli"
	"github.com/dpvm/dpvm/task"
)

// Root places the sink on SinkHost and the source on SourceHost.
type Root struct {
	SinkHost, SourceHost string
	Size, N              int
}

// Source sends N messages of Size bytes to To, saying how far it got.
type Source struct {
	To      task.TID
	Size, N int
}

// Sink never receives.
type Sink struct{}

const (
	tagData  = 1
	tagNever = 2
)

func init() {
	task.Register("flood.root", &Root{})
	task.Register("flood.source", &Source{})
	task.Register("flood.sink", &Sink{})
	task.Register("flood.spawnloop", &SpawnLoop{})
	task.RegisterProgram(task.Program{
		Name:    "spawnloop",
		Summary: "spawn tasks that never end, in batches, until a spawn fails",
		Setup: func(fs *flag.FlagSet) func([]string) (task.Task, error) {
			batch := fs.Int("batch", 1024, "tasks a spawn asks for")
			return func([]string) (task.Task, error) { return &SpawnLoop{Batch: *batch}, nil }
		},
	})
	task.RegisterProgram(task.Program{
		Name:    "flood",
		Summary: "a task sends to one that never receives",
		Setup: func(fs *flag.FlagSet) func([]string) (task.Task, error) {
			sink := fs.String("sink", "h2", "the sink's host")
			source := fs.String("source", "h1", "the source's host")
			size := fs.Int("size", 1<<20, "bytes per message")
			n := fs.Int("n", 256, "messages")
			return func([]string) (task.Task, error) {
				return &Root{SinkHost: *sink, SourceHost: *source, Size: *size, N: *n}, nil
			}
		},
	})
}

// Run starts the sink and the source and waits for the source's word.
func (r *Root) Run(c *task.Ctx) error {
	sink, err := c.Spawn(&Sink{}, 1, task.OnHost(r.SinkHost))
	if err != nil {
		return err
	}
	src, err := c.Spawn(&Source{To: sink[0], Size: r.Size, N: r.N}, 1, task.OnHost(r.SourceHost))
	if err != nil {
		return err
	}
	_, err = c.Recv(src[0], tagData, nil)
	return err
}

// Run sends, printing its progress every 8 messages.
func (s *Source) Run(c *task.Ctx) error {
	buf := make([]byte, s.Size)
	for i := range s.N {
		buf[0] = byte(i)
		if err := c.Send(s.To, tagData, buf); err != nil {
			return err
		}
		if (i+1)%8 == 0 || s.Size >= 8<<20 {
			c.Printf("flood: sent %d", i+1)
		}
	}
	c.Printf("flood: sent all %d", s.N)
	return c.Send(c.Parent(), tagData, nil)
}

// Run waits for a message no one sends.
func (s *Sink) Run(c *task.Ctx) error {
	_, err := c.Recv(task.AnyTask, tagNever, nil)
	return err
}

// SpawnLoop spawns Sinks, Batch at a time, until a spawn fails; it says
// how many it spawned and why the last spawn failed, and waits (the job
// ends when its command goes).
type SpawnLoop struct{ Batch int }

// Run spawns in a loop.
func (s *SpawnLoop) Run(c *task.Ctx) error {
	n := 0
	for {
		tids, err := c.Spawn(&Sink{}, s.Batch)
		n += len(tids)
		if err != nil {
			c.Printf("spawnloop: %d tasks spawned, then: %v", n, err)
			_, err := c.Recv(task.AnyTask, tagNever, nil)
			return err
		}
	}
}

func main() { cli.Main() }
