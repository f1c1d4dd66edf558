package daemon

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dpvm/dpvm/sched"
	"github.com/dpvm/dpvm/task"
)

func TestStateBytes(t *testing.T) {
	type node struct {
		Next *node
		Name string
	}
	type state struct {
		A    []float64
		B    [][]int32
		M    map[string][]byte
		S    string
		L    *node
		Arr  [4]int64
		None []int // nil: counts nothing
	}
	loop := &node{Name: "abcd"}
	loop.Next = loop // a cycle counts once
	st := &state{
		A: make([]float64, 1000, 1024),
		B: [][]int32{make([]int32, 100), make([]int32, 300)},
		M: map[string][]byte{"k": make([]byte, 500)},
		S: "hello",
		L: loop,
	}
	got := stateBytes(st)
	// The parts it must count at least: the backing arrays and strings.
	min := int64(1024*8 + 2*24 + (100+300)*4 + 500 + 5 + 4)
	if got < min || got > min+1024 {
		t.Fatalf("stateBytes = %d, want between %d and %d", got, min, min+1024)
	}
	if stateBytes(nil) != 0 {
		t.Fatal("nil state has a size")
	}
	// Large composites are sampled, not walked: the estimate of equal
	// elements is exact.
	big := make([][]byte, 10000)
	for i := range big {
		big[i] = make([]byte, 16)
	}
	if got, want := stateBytes(&struct{ B [][]byte }{big}), int64(8+24+10000*24+10000*16); got != want {
		t.Fatalf("sampled estimate %d, want %d", got, want)
	}
}

// ballast holds memory and waits to be told to stop.
type ballast struct{ Data []float64 }

func init() { task.Register("daemon.test.ballast", &ballast{}) }

func (b *ballast) Run(c *task.Ctx) error {
	if err := c.Send(c.Parent(), 1, len(b.Data)); err != nil {
		return err
	}
	_, err := c.Recv(c.Parent(), 2, nil, task.Safe())
	return err
}

// TestSpawnRecordsClassAndMemory: the master records the delay class each
// task starts in (its host's delay with the tasks placed before it) and
// the load monitor reports each task's memory.
func TestSpawnRecordsClassAndMemory(t *testing.T) {
	vm := startVM(t, 2, Config{})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		tids, err := c.Spawn(&ballast{Data: make([]float64, 1<<20)}, 2, task.OnHost("h2"))
		if err != nil {
			return err
		}
		for range tids {
			if _, err := c.Recv(task.AnyTask, 1, nil); err != nil {
				return err
			}
		}
		m.sched.mu.Lock()
		classes := []int{m.sched.class[tids[0]], m.sched.class[tids[1]]}
		m.sched.mu.Unlock()
		// h2 ran nothing when the spawn was placed (static load: its own
		// tasks only); each task expects α(1 + the tasks placed before
		// it): delays 1 and 2, classes 1 and 2.
		if classes[0] != 1 || classes[1] != 2 {
			return fmt.Errorf("classes %v, want [1 2]", classes)
		}
		ts, err := m.AllTasks(ctx, false)
		if err != nil {
			return err
		}
		for _, ti := range ts {
			if ti.TID == tids[0] && ti.MemBytes < 8<<20 {
				return fmt.Errorf("task of 8 MiB of state reports %d bytes", ti.MemBytes)
			}
		}
		return c.Mcast(tids, 2, nil)
	})
}

func TestStartedOnClasses(t *testing.T) {
	d := New(Config{})
	tids := []task.TID{task.NewTID(2, 1), task.NewTID(2, 2), task.NewTID(2, 3), task.NewTID(2, 4)}
	d.startedOn(HostInfo{Name: "h2", Alpha: 1, Load: 1}, tids)
	// Delays 2, 3, 4, 5 against the default classes (1–1.5, –2.5, –3.5,
	// –4.5): classes 2, 3, 4 and none (0).
	for i, want := range []int{2, 3, 4, 0} {
		if got := d.sched.class[tids[i]]; got != want {
			t.Errorf("task %d: class %d, want %d", i, got, want)
		}
	}
	// A task nobody placed gets its host's class when first seen, without
	// counting itself; a slow host (α = 2) with one other task: delay 4.
	snap := &sched.Snapshot{Classes: sched.DefaultClasses(),
		Hosts: []sched.Host{{Name: "h3", Alpha: 2, Load: 2}}}
	if c := d.classOf(TaskInfo{TID: task.NewTID(3, 1), Host: "h3"}, snap); c != 4 {
		t.Errorf("first seen on h3: class %d, want 4", c)
	}
	d.forgetClass(tids[0])
	if _, ok := d.sched.class[tids[0]]; ok {
		t.Error("an ended task's class is remembered")
	}
}
