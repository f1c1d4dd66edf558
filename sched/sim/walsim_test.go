package sim

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

func TestWALHitRate(t *testing.T) {
	j := &walJob{r: 3, data: 100}
	if h := hitRate(j, 200); h != 0.75 {
		t.Errorf("buffer holds the data: %g, want r/(r+1) = 0.75", h)
	}
	if h := hitRate(j, 50); h != 0.375 {
		t.Errorf("half the data buffered: %g, want 0.375", h)
	}
}

func TestWALExperiment(t *testing.T) {
	t.Parallel()
	run := func(p WALPolicy, pf float64) WALResult {
		c := DefaultWAL()
		c.Policy, c.PageFaultRate = p, pf
		c.Jobs, c.Warmup = 8000, 800
		r, err := RunWAL(c)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	nlb, wal := run(NLB, 240), run(WALP, 240)
	if !(wal.MeanSlowdown < nlb.MeanSlowdown/2) || wal.Migrations == 0 || nlb.Migrations != 0 {
		t.Errorf("memory-intensive load: NLB %+v, WAL %+v", nlb, wal)
	}
	// Page faults hurt: without balancing, slowdowns grow with the fault rate.
	if lo := run(NLB, 30); !(lo.MeanSlowdown < nlb.MeanSlowdown) {
		t.Errorf("NLB slowdown %g at 30 faults/s, %g at 240", lo.MeanSlowdown, nlb.MeanSlowdown)
	}
	// The controller moves the buffer share and the weight away from
	// their starting values; static policies keep them.
	fc := run(WALFC, 240)
	if fc.Buffer == 0.25 || fc.WIO == 0.5 || wal.Buffer != 0.25 || math.Abs(wal.WIO-0.5) > 1e-12 {
		t.Errorf("controller: wal-fc buffer %g W_IO %g; wal buffer %g W_IO %g", fc.Buffer, fc.WIO, wal.Buffer, wal.WIO)
	}
	if cpu, io := run(CPU, 60), run(IO, 60); cpu.WIO != 0 || io.WIO != 1 {
		t.Errorf("fixed weights: cpu %g io %g", cpu.WIO, io.WIO)
	}
	if again := run(WALFC, 240); !reflect.DeepEqual(again, fc) {
		t.Error("not deterministic")
	}
}

func TestWALValidate(t *testing.T) {
	mods := map[string]func(*WALConfig){
		"policy":  func(c *WALConfig) { c.Policy = "x" },
		"nodes":   func(c *WALConfig) { c.Nodes = 1 },
		"buffer":  func(c *WALConfig) { c.Buffer = 1 },
		"rate":    func(c *WALConfig) { c.ArrivalRate = 0 },
		"mem":     func(c *WALConfig) { c.MemLow, c.MemHigh = 5, 1 },
		"warmup":  func(c *WALConfig) { c.Warmup = c.Jobs },
		"cpu":     func(c *WALConfig) { c.CPU.Mean = -1 },
		"wio":     func(c *WALConfig) { c.WIO = 2 },
		"history": func(c *WALConfig) { c.Controller.Recent, c.Controller.History = 5, 2 },
		"pf":      func(c *WALConfig) { c.PageFaultRate = math.Inf(1) },
	}
	for name, mod := range mods {
		c := DefaultWAL()
		mod(&c)
		if _, err := RunWAL(c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
