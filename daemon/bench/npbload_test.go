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
	if got := strings.Join(seen, ","); got != "warm-up,idle,idle+sed,busy,busy+sed-direct,busy+sed-indirect" {
		t.Errorf("runs %s", got)
	}
	if r.Class != "S" || r.Hosts != 4 || r.NP != 2 || len(r.Kernels) != 1 {
		t.Fatalf("result %+v", r)
	}
	k := r.Kernels[0]
	if len(k.Runs) != 5 {
		t.Fatalf("%d runs, want 5", len(k.Runs))
	}
	for _, run := range k.Runs {
		if run.Verified != npb.Successful || run.Seconds <= 0 || run.KernelSeconds <= 0 {
			t.Errorf("%s: %+v", run.Name, run)
		}
		if run.Busy != (run.BusyHost != "") || run.Busy != (run.BusyAt > 0) {
			t.Errorf("%s: busy %v but host %q at %v", run.Name, run.Busy, run.BusyHost, run.BusyAt)
		}
	}
	for _, run := range k.Runs[:3] {
		if run.Migrations != 0 || run.Moves != nil {
			t.Errorf("moves without a busy host or without the scheduler: %+v", run)
		}
	}
	if k.Idle.MaxMigrations != 0 || k.IdleSched.MaxMigrations != 0 || k.Busy.MaxMigrations != 0 || !k.Idle.Verified || !k.Busy.Verified {
		t.Errorf("summaries: %+v %+v %+v", k.Idle, k.IdleSched, k.Busy)
	}
	if len(k.Sched) != 2 || len(k.Speedups) != 2 {
		t.Fatalf("sched runs %+v", k.Sched)
	}
	for i, st := range k.Sched {
		s := k.Runs[3+i]
		want := []daemon.Via{daemon.Direct, daemon.Indirect}[i]
		if s.Via != string(want) || s.Migrations < 1 || len(s.Moves) != s.Migrations || s.CheckpointBytes() <= 0 {
			t.Errorf("%s: via %s, %d migrations, moves %+v", s.Name, s.Via, s.Migrations, s.Moves)
		}
		if st.Via != s.Via || st.Seconds != s.Seconds || st.MinMigrations != s.Migrations || st.CheckpointBytes != s.CheckpointBytes() || !st.Verified {
			t.Errorf("summary %+v of %+v", st, s)
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
		{Rounds: -2},
	} {
		if _, err := NPBLoad(context.Background(), o); !errors.Is(err, ErrOptions) {
			t.Errorf("%+v: %v, want ErrOptions", o, err)
		}
	}
}

// TestSummarizeKernel: medians, ranges, migrations and checkpoint sizes
// over rounds, speedups and the overhead, from recorded runs.
func TestSummarizeKernel(t *testing.T) {
	ok := npb.Successful
	runs := []NPBRun{
		{Name: "idle", Seconds: 2, Verified: ok}, {Name: "idle", Seconds: 4, Verified: ok}, {Name: "idle", Seconds: 3, Verified: ok},
		{Name: "idle+sed", Seconds: 3.3, Verified: ok}, {Name: "idle+sed", Seconds: 3.3, Verified: ok}, {Name: "idle+sed", Seconds: 3.3, Verified: ok},
		{Name: "busy", Seconds: 9, Verified: ok}, {Name: "busy", Seconds: 6, Verified: ok}, {Name: "busy", Seconds: 7, Verified: npb.Unsuccessful},
		{Name: "busy+sed-direct", Via: "direct", Seconds: 3, Migrations: 1, Moves: []NPBMove{{Bytes: 10}}, Verified: ok},
		{Name: "busy+sed-direct", Via: "direct", Seconds: 3.5, Migrations: 2, Moves: []NPBMove{{Bytes: 30}, {Bytes: 20}}, Verified: ok},
		{Name: "busy+sed-direct", Via: "direct", Seconds: 4, Migrations: 1, Moves: []NPBMove{{Bytes: 10}}, Verified: ok},
	}
	k := summarizeKernel("ep", runs, true, []daemon.Via{daemon.Direct})
	if k.Idle.Seconds != 3 || k.Idle.Min != 2 || k.Idle.Max != 4 || k.Idle.Rounds != 3 || !k.Idle.Verified {
		t.Errorf("idle %+v", k.Idle)
	}
	if d := k.Overhead - 0.1; d > 1e-12 || d < -1e-12 {
		t.Errorf("overhead %v, want 0.1", k.Overhead)
	}
	if k.Busy.Seconds != 7 || k.Busy.Verified {
		t.Errorf("busy %+v: median 7, not all verified", k.Busy)
	}
	s := k.Sched[0]
	if s.Seconds != 3.5 || s.MinMigrations != 1 || s.MaxMigrations != 2 || s.CheckpointBytes != 30 || s.Via != "direct" || k.Speedups[0] != 2 {
		t.Errorf("sched %+v, speedup %v", s, k.Speedups)
	}
	var b bytes.Buffer
	if err := WriteNPBLoad(&b, &NPBLoadResult{Class: "A", Hosts: 4, NP: 2, At: 0.2, Rounds: 3, Kernels: []NPBKernelResult{k}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| EP | 7.00 (6.00–9.00) | 3.50 (3.00–4.00) | 1–2 | 30 B | 2.00 | NOT ALL |", "| EP | 3.00 (2.00–4.00) | 3.30 | 0 | +10.0% |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	if none := npbStat(runs, "busy+sed-indirect"); none.Rounds != 0 || none.Verified {
		t.Errorf("a kind never run: %+v", none)
	}
}

func TestRunOrder(t *testing.T) {
	in := []string{"a", "b", "c", "d"}
	for r, want := range []string{"abcd", "badc", "cdab", "dcba", "abcd"} {
		if got := strings.Join(runOrder(in, r), ""); got != want {
			t.Errorf("round %d: %s, want %s", r, got, want)
		}
	}
}
