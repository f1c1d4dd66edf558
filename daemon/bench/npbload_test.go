package bench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"dpvm/daemon"
	"dpvm/examples/npb"
)

// TestNPBLoad runs the Table 3 experiment small: class S, the user
// arriving at rank 0's first progress report with a load that slows its
// host's tasks 11×, δT 20 ms. Every run verifies, the idle run with the
// scheduler and the run with migration disabled move nothing, and the
// runs with Dynamic-SED move the busy host's worker (the user is there
// before the scheduler's first check after it, and the worker runs on for
// many checks), with a checkpoint size from the master's record.
func TestNPBLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	var seen []string
	r, err := NPBLoad(ctx, NPBLoadOptions{
		Kernels: []string{"is"}, Class: "S", Period: 20 * time.Millisecond, At: 1e-9, Load: 10,
		Progress: func(run NPBRun) { seen = append(seen, run.Name) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(seen, ","); got != "idle,idle+sed,busy,busy+sed-direct,busy+sed-indirect" {
		t.Errorf("runs %s", got)
	}
	if r.Class != "S" || r.Hosts != 4 || r.NP != 2 || len(r.Kernels) != 1 {
		t.Fatalf("result %+v", r)
	}
	k := r.Kernels[0]
	all := append([]NPBRun{*k.Idle, *k.IdleSched, k.Busy}, k.Sched...)
	for _, run := range all {
		if run.Verified != npb.Successful || run.Seconds <= 0 || run.KernelSeconds <= 0 {
			t.Errorf("%s: %+v", run.Name, run)
		}
		if run.Busy != (run.BusyHost != "") || run.Busy != (run.BusyAt > 0) {
			t.Errorf("%s: busy %v but host %q at %v", run.Name, run.Busy, run.BusyHost, run.BusyAt)
		}
	}
	if k.Idle.Migrations != 0 || k.IdleSched.Migrations != 0 || k.Busy.Migrations != 0 || k.Busy.Moves != nil {
		t.Errorf("moves without a busy host or without the scheduler: %+v %+v %+v", k.Idle, k.IdleSched, k.Busy)
	}
	if len(k.Sched) != 2 || len(k.Speedups) != 2 {
		t.Fatalf("sched runs %+v", k.Sched)
	}
	for i, s := range k.Sched {
		want := []daemon.Via{daemon.Direct, daemon.Indirect}[i]
		if s.Via != string(want) || s.Migrations < 1 || len(s.Moves) != s.Migrations || s.CheckpointBytes() <= 0 {
			t.Errorf("%s: via %s, %d migrations, moves %+v", s.Name, s.Via, s.Migrations, s.Moves)
		}
		for _, mv := range s.Moves {
			if mv.Via != string(want) || mv.Bytes <= 0 || mv.Seconds <= 0 {
				t.Errorf("%s: move %+v", s.Name, mv)
			}
		}
		if k.Speedups[i] != k.Busy.Seconds/s.Seconds {
			t.Errorf("speedup %v", k.Speedups[i])
		}
	}
	var b bytes.Buffer
	if err := WriteNPBLoad(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| IS |", "Dynamic-SED direct: time (s)", "Dynamic-SED indirect", "all runs |", "Overhead when nothing migrates"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	t.Logf("\n%s", b.String())
}

func TestNPBLoadBadOptions(t *testing.T) {
	for _, o := range []NPBLoadOptions{
		{Kernels: []string{"lu"}},
		{Class: "Z"},
		{Hosts: 1},
		{NP: -1},
		{Period: time.Microsecond},
		{At: 1},
		{At: -0.5},
		{Users: -1},
		{Load: -1},
		{Vias: []daemon.Via{"sideways"}},
	} {
		if _, err := NPBLoad(context.Background(), o); !errors.Is(err, ErrOptions) {
			t.Errorf("%+v: %v, want ErrOptions", o, err)
		}
	}
}
