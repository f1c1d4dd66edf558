package bench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/examples/npb"
)

// TestNPBLoad runs the Table 3 experiment small: class S, the user
// arriving at rank 0's first progress report with a load that slows its
// host's tasks 11× (1001× in the runs with the scheduler, SchedLoad, so that the
// busy host's worker cannot finish before the scheduler has moved it,
// however slow the machine: the scheduler has seconds where it needs a few
// checks of 20 ms), δT 20 ms, two idle pairs. Every run verifies, the idle
// runs come in ABBA order with their CPU times, the idle runs with the
// scheduler and the run with migration disabled move nothing, and the runs
// with Dynamic-SED move the busy host's worker, with a checkpoint size
// from the master's record.
func TestNPBLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	var seen []string
	r, err := NPBLoad(ctx, NPBLoadOptions{
		Kernels: []string{"is"}, Class: "S", Period: 20 * time.Millisecond, At: 1e-9, Load: 10, SchedLoad: 1000, IdleRounds: 2,
		Probe: 100 * time.Millisecond, ProbeRounds: 1,
		Progress: func(run NPBRun) { seen = append(seen, run.Name) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(seen, ","); got != "warm-up,idle,idle+sed,idle+sed,idle,busy,busy+sed-direct,busy+sed-indirect" {
		t.Errorf("runs %s", got)
	}
	if r.Class != "S" || r.SchedLoad != 1000 || r.Hosts != 4 || r.NP != 2 || r.IdleRounds != 2 || r.Target != 0.02 || len(r.Kernels) != 1 {
		t.Fatalf("result %+v", r)
	}
	k := r.Kernels[0]
	if len(k.Runs) != 7 {
		t.Fatalf("%d runs, want 7", len(k.Runs))
	}
	for _, run := range k.Runs {
		if run.Verified != npb.Successful || run.Seconds <= 0 || run.KernelSeconds <= 0 || run.CPUSeconds < 0 {
			t.Errorf("%s: %+v", run.Name, run)
		}
		if run.Busy != (run.BusyHost != "") || run.Busy != (run.BusyAt > 0) {
			t.Errorf("%s: busy %v but host %q at %v", run.Name, run.Busy, run.BusyHost, run.BusyAt)
		}
	}
	for _, run := range k.Runs[:5] {
		if run.Migrations != 0 || run.Moves != nil {
			t.Errorf("moves without a busy host or without the scheduler: %+v", run)
		}
	}
	if k.Idle.MaxMigrations != 0 || k.IdleSched.MaxMigrations != 0 || k.Busy.MaxMigrations != 0 || !k.Idle.Verified || !k.Busy.Verified {
		t.Errorf("summaries: %+v %+v %+v", k.Idle, k.IdleSched, k.Busy)
	}
	if sc := r.SchedCost; sc == nil || sc.Pairs != 1 || sc.Seconds != 0.1 || sc.OffCPU < 0 || sc.Checks < 0 {
		t.Errorf("scheduler cost %+v", sc)
	}
	if _, err := cpuSeconds(); err == nil && (k.SchedShare == nil || *k.SchedShare != *schedShare(r.SchedCost, k.Idle)) {
		t.Errorf("scheduler's share %v", k.SchedShare)
	}
	ov := k.IdleOverhead
	if ov == nil || ov.Pairs != 2 || ov.Target != 0.02 || ov.Met != (ov.Wall.Median <= 0.02) || k.Overhead != ov.Wall.Median ||
		ov.Wall.Min > ov.Wall.Median || ov.Wall.Median > ov.Wall.Max {
		t.Errorf("idle overhead %+v, overhead %v", ov, k.Overhead)
	}
	if len(k.Sched) != 2 || len(k.Speedups) != 2 {
		t.Fatalf("sched runs %+v", k.Sched)
	}
	for i, st := range k.Sched {
		s := k.Runs[5+i]
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
	for _, want := range []string{"| IS |", "Dynamic-SED direct: time (s)", "Dynamic-SED indirect", "all runs |", "Overhead when nothing migrates", "2 pair(s)", "Target: Dynamic-SED costs at most 2%", "brings load 1000 instead", "The scheduler's own cost, measured directly"} {
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
		{SchedLoad: -1},
		{SchedLoad: 2000},
		{Vias: []daemon.Via{"sideways"}},
		{Rounds: -2},
		{IdleRounds: -1},
		{IdleRounds: 101},
		{NoIdle: true, OnlyIdle: true},
		{Target: -0.1},
		{Probe: time.Microsecond},
		{ProbeRounds: -1},
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
		// Idle pairs in ABBA order: wall overheads +1%, +10%, −1%; CPU
		// overheads 0, +0.5%, +1%.
		{Name: "idle", Seconds: 2, CPUSeconds: 4, Verified: ok}, {Name: "idle+sed", Seconds: 2.02, CPUSeconds: 4, Verified: ok},
		{Name: "idle+sed", Seconds: 4.4, CPUSeconds: 4.02, Verified: ok}, {Name: "idle", Seconds: 4, CPUSeconds: 4, Verified: ok},
		{Name: "idle", Seconds: 3, CPUSeconds: 2, Verified: ok}, {Name: "idle+sed", Seconds: 2.97, CPUSeconds: 2.02, Verified: ok},
		{Name: "busy", Seconds: 9, Verified: ok}, {Name: "busy", Seconds: 6, Verified: ok}, {Name: "busy", Seconds: 7, Verified: npb.Unsuccessful},
		{Name: "busy+sed-direct", Via: "direct", Seconds: 3, Migrations: 1, Moves: []NPBMove{{Bytes: 10}}, Verified: ok},
		{Name: "busy+sed-direct", Via: "direct", Seconds: 3.5, Migrations: 2, Moves: []NPBMove{{Bytes: 30}, {Bytes: 20}}, Verified: ok},
		{Name: "busy+sed-direct", Via: "direct", Seconds: 4, Migrations: 1, Moves: []NPBMove{{Bytes: 10}}, Verified: ok},
	}
	k := summarizeKernel("ep", runs, true, true, []daemon.Via{daemon.Direct}, 0.02)
	if k.Idle.Seconds != 3 || k.Idle.Min != 2 || k.Idle.Max != 4 || k.Idle.Rounds != 3 || !k.Idle.Verified ||
		k.Idle.CPUSeconds != 4 || k.Idle.CPUMin != 2 || k.Idle.CPUMax != 4 {
		t.Errorf("idle %+v", k.Idle)
	}
	near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
	ov := k.IdleOverhead
	if ov == nil || ov.Pairs != 3 || !near(ov.Wall.Median, 0.01) || !near(ov.Wall.Min, -0.01) || !near(ov.Wall.Max, 0.1) ||
		!near(ov.Wall.Q1, 0) || !near(ov.Wall.Q3, 0.055) || !ov.Met || !ov.Straddles {
		t.Fatalf("idle overhead %+v", ov)
	}
	if ov.CPU == nil || !near(ov.CPU.Median, 0.005) || !near(ov.CPU.Max, 0.01) || !ov.CPUMet {
		t.Errorf("cpu overhead %+v", ov.CPU)
	}
	if !near(k.Overhead, 0.01) {
		t.Errorf("overhead %v, want the median per-pair ratio 0.01", k.Overhead)
	}
	if k.Busy.Seconds != 7 || k.Busy.Verified {
		t.Errorf("busy %+v: median 7, not all verified", k.Busy)
	}
	s := k.Sched[0]
	if s.Seconds != 3.5 || s.MinMigrations != 1 || s.MaxMigrations != 2 || s.CheckpointBytes != 30 || s.Via != "direct" || k.Speedups[0] != 2 {
		t.Errorf("sched %+v, speedup %v", s, k.Speedups)
	}
	var b bytes.Buffer
	if err := WriteNPBLoad(&b, &NPBLoadResult{Class: "A", Hosts: 4, NP: 2, At: 0.2, Rounds: 3, IdleRounds: 3, Target: 0.02, Kernels: []NPBKernelResult{k}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| EP | 7.00 (6.00–9.00) | 3.50 (3.00–4.00) | 1–2 | 30 B | 2.00 | NOT ALL |",
		"| EP | 3.00 (2.00–4.00) | 2.97 (2.02–4.40) | 4.00 (2.00–4.00) | 4.00 (2.02–4.02) | 0 | +1.0% (IQR +0.0%…+5.5%; range -1.0%…+10.0%) | +0.5% (IQR +0.2%…+0.7%; range +0.0%…+1.0%) | – | met (IQR straddles 2%) | all runs |",
		"Target: Dynamic-SED costs at most 2% when nothing migrates, judged on the median per-pair wall-time ratio: met for EP (+1.0%). The interquartile range of the ratios straddles 2% for EP",
		"In CPU time the median is within 2% for every kernel measured."} {
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

// BenchmarkNPBIdle is one run of a kernel on the idle machine (4 daemons,
// 2 workers, emulated load, δT DefaultNPBPeriod) with the scheduler off and with
// Dynamic-SED on, per kernel and class: the pair whose ratio is the
// overhead when nothing migrates. Profile one side against the other with
// -cpuprofile, e.g.
//
//	go test -run '^$' -bench 'NPBIdle/mg/W' -benchtime 3x -cpuprofile cpu.out ./daemon/bench
//
// It reports the process's CPU seconds (user+sys) per run beside the wall
// time.
func BenchmarkNPBIdle(b *testing.B) {
	for _, k := range npb.Kernels {
		for _, class := range []string{"S", "W", "A"} {
			for _, on := range []bool{false, true} {
				name := k + "/" + class + "/off"
				if on {
					name = k + "/" + class + "/sed"
				}
				b.Run(name, func(b *testing.B) {
					o, err := NPBLoadOptions{Kernels: []string{k}, Class: class}.withDefaults()
					if err != nil {
						b.Fatal(err)
					}
					shared := b.TempDir()
					var cpu float64
					for b.Loop() {
						r, err := npbRun(b.Context(), o, shared, k, "idle", false, on, daemon.Direct)
						if err != nil {
							b.Fatal(err)
						}
						if r.Verified != npb.Successful {
							b.Fatalf("%s class %s did not verify", k, class)
						}
						cpu += r.CPUSeconds
					}
					b.ReportMetric(cpu/float64(b.N), "cpu-s/op")
				})
			}
		}
	}
}

func TestParseCPUSeconds(t *testing.T) {
	// utime 250 and stime 50 ticks: 3 s. The command name holds spaces
	// and a parenthesis.
	line := "4242 (we(ird) name) R 1 4242 4242 0 -1 4194304 95 0 0 0 250 50 0 0 20 0 9 0 1758039 3133440 381\n"
	got, err := parseCPUSeconds(line)
	if err != nil || got != 3 {
		t.Errorf("%v, %v; want 3 s", got, err)
	}
	for _, bad := range []string{"", "4242 no parens", "1 (x) R 1 2 3", "1 (x) R 1 1 1 0 -1 0 0 0 0 0 x 5"} {
		if _, err := parseCPUSeconds(bad); !errors.Is(err, ErrBadStat) {
			t.Errorf("%q: %v, want ErrBadStat", bad, err)
		}
	}
	if cpu, err := cpuSeconds(); err == nil && cpu < 0 {
		t.Errorf("this process's CPU time %v", cpu)
	}
}

func FuzzParseCPUSeconds(f *testing.F) {
	f.Add("4242 (dpvm) S 1 4242 4242 0 -1 4194304 95 0 0 0 250 50 0 0 20 0 9 0 1758039 3133440 381")
	f.Add("1 ()) R 1 1 1 0 -1 0 0 0 0 0 18446744073709551615 1")
	f.Add(")")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseCPUSeconds(s)
		if err == nil && (v < 0 || v != v) {
			t.Errorf("%q: %v", s, v)
		}
		if err != nil && !errors.Is(err, ErrBadStat) {
			t.Errorf("%q: %v, want ErrBadStat", s, err)
		}
	})
}

func TestQuantile(t *testing.T) {
	s := []float64{1, 2, 3, 4}
	for _, c := range []struct{ q, want float64 }{{0, 1}, {0.25, 1.75}, {0.5, 2.5}, {0.75, 3.25}, {1, 4}} {
		if got := quantile(s, c.q); got != c.want {
			t.Errorf("q %v: %v, want %v", c.q, got, c.want)
		}
	}
	if got := quantile([]float64{7}, 0.75); got != 7 {
		t.Errorf("one value: %v", got)
	}
}

// TestIdlePairs: runs pair up in the order made, whichever side comes
// first; an unpaired run is left out; CPU figures are given only when
// every pair has them; the verdict follows the median.
func TestIdlePairs(t *testing.T) {
	runs := []NPBRun{
		{Name: "idle", Seconds: 10}, {Name: "idle+sed", Seconds: 10.5, CPUSeconds: 9},
		{Name: "busy", Seconds: 99},
		{Name: "idle+sed", Seconds: 11}, {Name: "idle", Seconds: 10},
		{Name: "idle", Seconds: 50}, // no partner
	}
	ov := idlePairs(runs, 0.02)
	if ov == nil || ov.Pairs != 2 || ov.CPU != nil || ov.Met || ov.Straddles {
		t.Fatalf("%+v: two pairs, no CPU figures, median +7.5%% misses 2%%", ov)
	}
	if d := ov.Wall.Median - 0.075; d > 1e-9 || d < -1e-9 {
		t.Errorf("median %v", ov.Wall.Median)
	}
	if idlePairs(runs[:1], 0.02) != nil || idlePairs(nil, 0.02) != nil {
		t.Error("a summary without a pair")
	}
	var b bytes.Buffer
	r := &NPBLoadResult{Class: "S", Hosts: 4, NP: 2, OnlyIdle: true, IdleRounds: 2, Target: 0.02, Kernels: []NPBKernelResult{
		summarizeKernel("mg", runs, true, false, nil, 0.02)}}
	if err := WriteNPBLoad(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"| MG |", "| missed |", "MISSED for MG (+7.5%).", "CPU times are unknown on this platform."} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "no migration") {
		t.Errorf("only idle runs, yet a table of busy runs:\n%s", out)
	}
}

// TestSchedShare: the scheduler's CPU per second over the kernel's CPU per
// wall second without it; nothing without a probe or CPU times.
func TestSchedShare(t *testing.T) {
	cost := &NPBSchedCost{PerSecond: NPBSpread{Median: 0.01}}
	if got := schedShare(cost, &NPBStat{Seconds: 2, CPUSeconds: 4}); got == nil || *got != 0.005 {
		t.Errorf("share %v, want 0.005 (1%% of a core over a kernel using two)", got)
	}
	if schedShare(nil, &NPBStat{Seconds: 2, CPUSeconds: 4}) != nil || schedShare(cost, &NPBStat{Seconds: 2}) != nil || schedShare(cost, nil) != nil {
		t.Error("a share without a probe or CPU times")
	}
}
