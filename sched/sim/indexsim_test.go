package sim

import (
	"errors"
	"reflect"
	"testing"
)

func TestIndexExperiment(t *testing.T) {
	c := DefaultIndex()
	r, err := RunIndex(c)
	if err != nil {
		t.Fatal(err)
	}
	sum := func(xs []int) (s int) {
		for _, x := range xs {
			s += x
		}
		return
	}
	if sum(r.Static.TasksPerNode) != c.Tasks || sum(r.Dynamic.TasksPerNode) != c.Tasks {
		t.Fatalf("tasks lost: %v %v", r.Static.TasksPerNode, r.Dynamic.TasksPerNode)
	}
	for _, n := range r.Static.TasksPerNode {
		if n != c.Tasks/len(c.Nodes) {
			t.Fatalf("static distribution is not even: %v", r.Static.TasksPerNode)
		}
	}
	// The balanced run is much faster, and every 8-core node runs more
	// tasks than every 2- or 4-core node.
	if r.Speedup < 1.5 {
		t.Errorf("speedup %.2f", r.Speedup)
	}
	minFast, maxSlow := 1<<30, 0
	for i, n := range c.Nodes {
		k := r.Dynamic.TasksPerNode[i]
		if n.Cores == 8 {
			minFast = min(minFast, k)
		} else {
			maxSlow = max(maxSlow, k)
		}
	}
	if minFast <= maxSlow {
		t.Errorf("work not proportional to power: %v", r.Dynamic.TasksPerNode)
	}
	if r.Dynamic.Remote == 0 || r.Dynamic.Operations == 0 || r.Static.Remote != 0 {
		t.Errorf("counters: %+v / %+v", r.Dynamic, r.Static)
	}
	// The ideal makespan bounds the balanced run from below.
	capacity := 0.0
	for _, n := range c.Nodes {
		capacity += n.Power / 1205.68 * float64(n.Cores)
	}
	if ideal := float64(c.Tasks) * c.TaskMean * (1 - c.TaskSpread) / capacity; r.Dynamic.Makespan < ideal {
		t.Errorf("makespan %.1f below the bound %.1f", r.Dynamic.Makespan, ideal)
	}
	again, _ := RunIndex(c)
	if !reflect.DeepEqual(r, again) {
		t.Fatal("not deterministic")
	}
}

func TestIndexSwitchesOffWhenOverloaded(t *testing.T) {
	// Two identical single-core nodes, many tasks on one: once both are
	// loaded there is no recipient, so tasks wait at the origin instead of
	// being pushed around, and each node ends up with about half.
	c := DefaultIndex()
	c.Nodes = []Node{{"a", 1, 1}, {"b", 1, 1}}
	c.Origins = []string{"a"}
	c.Tasks, c.TaskSpread = 20, 0
	r, err := RunIndex(c)
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Dynamic.TasksPerNode[0] - r.Dynamic.TasksPerNode[1]; d < -2 || d > 2 {
		t.Errorf("tasks per node %v", r.Dynamic.TasksPerNode)
	}
	if r.Dynamic.Operations > c.Tasks {
		t.Errorf("%d balancing operations for %d tasks", r.Dynamic.Operations, c.Tasks)
	}
}

func TestIndexValidate(t *testing.T) {
	mods := map[string]func(*IndexConfig){
		"one node":   func(c *IndexConfig) { c.Nodes = c.Nodes[:1] },
		"dup":        func(c *IndexConfig) { c.Nodes = append(c.Nodes, c.Nodes[0]) },
		"power":      func(c *IndexConfig) { c.Nodes[1].Power = 0 },
		"origin":     func(c *IndexConfig) { c.Origins = []string{"nowhere"} },
		"tasks":      func(c *IndexConfig) { c.Tasks = 0 },
		"spread":     func(c *IndexConfig) { c.TaskSpread = 1 },
		"interval":   func(c *IndexConfig) { c.Interval = 0 },
		"thresholds": func(c *IndexConfig) { c.Policy.EmitterThreshold = 0.9 },
	}
	for name, mod := range mods {
		c := DefaultIndex()
		mod(&c)
		if _, err := RunIndex(c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
