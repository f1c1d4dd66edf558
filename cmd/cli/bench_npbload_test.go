package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchNPBLoad runs the command small (IS class S, one checkpoint
// mode, no idle runs) and reads its JSON.
func TestBenchNPBLoad(t *testing.T) {
	code, out, errOut := dpvm(t, "bench", "npb-load", "--kernel", "is", "--class", "S", "--period", "20ms",
		"--at", "0.000001", "--load", "10", "--sched-load", "1000", "--via", "direct", "--no-idle", "--json")
	if code != 0 {
		t.Fatalf("status %d\n%s\n%s", code, out, errOut)
	}
	var r struct {
		Class     string
		SchedLoad float64 `json:"sched_load"`
		Kernels   []struct {
			Kernel string
			Busy   struct{ Verified bool }
			Sched  []struct {
				Via           string
				Verified      bool
				MinMigrations int `json:"min_migrations"`
			}
			Speedups []float64
		}
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.Class != "S" || r.SchedLoad != 1000 || len(r.Kernels) != 1 || r.Kernels[0].Kernel != "is" || len(r.Kernels[0].Sched) != 1 ||
		r.Kernels[0].Sched[0].Via != "direct" || r.Kernels[0].Sched[0].MinMigrations < 1 ||
		!r.Kernels[0].Busy.Verified || !r.Kernels[0].Sched[0].Verified || len(r.Kernels[0].Speedups) != 1 {
		t.Errorf("result %s", out)
	}
	if !strings.Contains(errOut, "bench npb-load: is busy+sed-direct:") {
		t.Errorf("no progress on stderr: %s", errOut)
	}
}

func TestBenchNPBLoadUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--kernel", "lu"},
		{"--via", "sideways"},
		{"--kernel", ","},
		{"--at", "1.5"},
		{"--hosts", "1"},
		{"--rounds", "0"},
		{"--idle-rounds", "0"},
		{"--no-idle", "--only-idle"},
		{"--probe-rounds", "0"},
		{"--probe", "-1s"},
		{"--sched-load", "-3"},
	} {
		code, _, errOut := dpvm(t, append([]string{"bench", "npb-load"}, args...)...)
		if code != 2 || errOut == "" {
			t.Errorf("%v: status %d, stderr %q; want 2", args, code, errOut)
		}
	}
}

// TestBenchNPBLoadOnlyIdle runs only the idle pairs (IS class S, two
// pairs) and reads the overhead from the JSON and the table.
func TestBenchNPBLoadOnlyIdle(t *testing.T) {
	code, out, errOut := dpvm(t, "bench", "npb-load", "--kernel", "is", "--class", "S", "--period", "20ms",
		"--only-idle", "--idle-rounds", "2", "--probe", "100ms", "--probe-rounds", "1", "--json")
	if code != 0 {
		t.Fatalf("status %d\n%s\n%s", code, out, errOut)
	}
	var r struct {
		IdleRounds int     `json:"idle_rounds"`
		Target     float64 `json:"target"`
		OnlyIdle   bool    `json:"only_idle"`
		SchedCost  *struct {
			Pairs int
		} `json:"sched_cost"`
		Kernels []struct {
			Runs         []struct{ Name string }
			Overhead     float64
			IdleOverhead *struct {
				Pairs int
				Wall  struct{ Median float64 }
				Met   bool
			} `json:"idle_overhead"`
		}
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.IdleRounds != 2 || r.Target != 0.02 || !r.OnlyIdle || r.SchedCost == nil || r.SchedCost.Pairs != 1 || len(r.Kernels) != 1 || len(r.Kernels[0].Runs) != 4 {
		t.Fatalf("result %s", out)
	}
	k := r.Kernels[0]
	if ov := k.IdleOverhead; ov == nil || ov.Pairs != 2 || ov.Wall.Median != k.Overhead || ov.Met != (k.Overhead <= 0.02) {
		t.Errorf("overhead %+v in %s", ov, out)
	}
	for _, run := range k.Runs {
		if run.Name != "idle" && run.Name != "idle+sed" {
			t.Errorf("run %q with --only-idle", run.Name)
		}
	}
	code, out, errOut = dpvm(t, "bench", "npb-load", "--kernel", "is", "--class", "S", "--period", "20ms", "--only-idle", "--idle-rounds", "1", "--no-probe")
	if code != 0 || !strings.Contains(out, "Target: Dynamic-SED costs at most 2% when nothing migrates") || strings.Contains(out, "no migration") ||
		strings.Contains(out, "measured directly") {
		t.Errorf("status %d\n%s\n%s", code, out, errOut)
	}
}
