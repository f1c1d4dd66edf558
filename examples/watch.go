package examples

import (
	"fmt"
	"slices"

	"github.com/dpvm/dpvm/task"
)

// Watch is the root task of the watch program, a demonstration of notify:
// it spawns workers across the hosts, asks to be told when any of them
// exits and when a host leaves, and waits until Expect of them are lost
// and a host deletion has been reported (kill a host daemon to see it);
// then it stops the others.
type Watch struct {
	Workers int `flag:"workers,number of workers (placed round-robin over the hosts)" min:"1"`
	Expect  int `flag:"expect,how many workers to see lost before stopping the others" min:"0"`
	Tids    []task.TID
	Lost    []task.TID
	Hosts   int // host deletions seen
}

// WatchWorker waits to be told to stop.
type WatchWorker struct{}

// Message tags of the watch program.
const (
	watchDone  = 6
	watchExit  = 8
	watchSetup = 4
)

func init() {
	task.Register("examples.watch", &Watch{})
	task.Register("examples.watch.worker", &WatchWorker{})
	task.RegisterProgram(task.Program{
		Name:    "watch",
		Summary: "spawn workers across hosts and report, through notify, the ones lost with their host",
		Proto:   &Watch{Workers: 3},
	})
}

// Validate checks that no more workers are expected lost than there are.
func (w *Watch) Validate() error {
	if w.Expect > w.Workers {
		return fmt.Errorf("need -expect <= -workers, got %d and %d", w.Expect, w.Workers)
	}
	return nil
}

// Run spawns and watches the workers.
func (w *Watch) Run(c *task.Ctx) error {
	if w.Tids == nil {
		tids, err := c.Spawn(&WatchWorker{}, w.Workers)
		if err != nil {
			return err
		}
		w.Tids = tids
		if err := c.Notify(task.TaskExit, watchExit, tids...); err != nil {
			return err
		}
		if err := c.Notify(task.HostDelete, watchSetup); err != nil {
			return err
		}
		c.Printf("watch: %d workers started: %v; waiting for %d to be lost", len(tids), tids, w.Expect)
	}
	for len(w.Lost) < w.Expect || (w.Expect > 0 && w.Hosts == 0) {
		var n task.Notice
		st, err := c.Recv(task.AnyTask, task.AnyTag, &n, task.Safe())
		if err != nil {
			return err
		}
		switch st.Tag {
		case watchSetup:
			c.Printf("watch: host %v (%s) deleted", n.Host, n.Name)
			w.Hosts++
		case watchExit:
			c.Printf("watch: worker %v exited (status %d: %s)", n.TID, n.Status, n.Err)
			if !slices.Contains(w.Lost, n.TID) {
				w.Lost = append(w.Lost, n.TID)
			}
		}
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	stopped := 0
	for _, t := range w.Tids {
		if slices.Contains(w.Lost, t) {
			continue
		}
		if err := c.Send(t, watchDone, nil); err != nil {
			return err
		}
		stopped++
	}
	c.Printf("watch: %d workers lost, %d stopped", len(w.Lost), stopped)
	return nil
}

// Run waits for the stop message.
func (w *WatchWorker) Run(c *task.Ctx) error {
	_, err := c.Recv(c.Parent(), watchDone, nil, task.Safe())
	return err
}
