package daemon

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/dpvm/dpvm/task"
)

func TestPlacers(t *testing.T) {
	hosts := []HostInfo{
		{ID: 1, Name: "h1", Cores: 2, Speed: 1, Tasks: 4, Load: 4},
		{ID: 2, Name: "h2", Cores: 2, Speed: 2},
		{ID: 3, Name: "h3", Cores: 2, Speed: 0.5},
	}
	count := func(ids []task.HostID) map[task.HostID]int {
		m := map[task.HostID]int{}
		for _, id := range ids {
			m[id]++
		}
		return m
	}
	for _, name := range []string{"roundrobin", "sed", "si", "ri", "index", "local"} {
		p, err := NewPlacer(name, 1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.Place(hosts, 6)
		if err != nil || len(got) != 6 {
			t.Fatalf("%s: %v %v", name, got, err)
		}
		c := count(got)
		switch name {
		case "roundrobin":
			if c[1] != 2 || c[2] != 2 || c[3] != 2 {
				t.Errorf("roundrobin placed %v", c)
			}
		case "local":
			if c[1] != 6 {
				t.Errorf("local placed %v", c)
			}
		case "sed", "index":
			// The fast idle host gets the most; the busy master the least.
			if c[2] < c[1] || c[2] < c[3] {
				t.Errorf("%s placed %v: the fast idle host should get the most", name, c)
			}
		}
		// Same seed, same placement.
		p2, _ := NewPlacer(name, 1)
		again, _ := p2.Place(hosts, 6)
		if !slices.Equal(got, again) {
			t.Errorf("%s is not reproducible: %v then %v", name, got, again)
		}
	}
	if _, err := NewPlacer("nearest", 1); err == nil {
		t.Error("an unknown placement was accepted")
	}
	if _, err := (&RoundRobin{}).Place(nil, 1); err == nil {
		t.Error("placed on no hosts")
	}
}

// TestPlacementInVM spawns anywhere through the master with the SED
// placement: a slow host gets fewer tasks than a fast one.
func TestPlacementInVM(t *testing.T) {
	p, _ := NewPlacer("sed", 1)
	vm := startVM(t, 3, Config{Placer: p})
	runRoot(t, vm.Master(), func(c *task.Ctx, _ int) error {
		tids, err := c.Spawn(fn(t, func(*task.Ctx, int) error { return nil }), 4)
		if err != nil {
			return err
		}
		if len(tids) != 4 {
			return fmt.Errorf("spawned %v", tids)
		}
		return nil
	})
}

// TestSpawnJob maps a parallel job with SED on a running machine: between
// min and max tasks, on the hosts of the chosen class.
func TestSpawnJob(t *testing.T) {
	vm := startVM(t, 3, Config{})
	ctx := context.Background()
	cl := adminClient(t, ctx, vm)
	tids, err := cl.SpawnJob(ctx, "daemon.test.mover", nil, 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(tids) < 2 || len(tids) > 5 {
		t.Fatalf("job of %d tasks, want 2 to 5: %v", len(tids), tids)
	}
	if _, err := cl.SpawnJob(ctx, "daemon.test.mover", nil, 1000, 0); err == nil {
		t.Fatal("a job larger than any class was mapped")
	}
	for _, tid := range tids {
		if err := cl.Kill(ctx, tid); err != nil {
			t.Fatal(err)
		}
	}
}
