package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func simCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(append([]string{"dpvm", "sim"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestSimLoadShareJSON(t *testing.T) {
	code, out, errOut := simCLI(t, "loadshare", "--policy", "nls,si", "--util", "0.3,0.9", "--batches", "3",
		"--batch-length", "100", "--warmup", "10", "--json")
	if code != 0 {
		t.Fatalf("status %d: %s", code, errOut)
	}
	var doc struct {
		Results []struct {
			Policy       string  `json:"policy"`
			Sched        string  `json:"sched"`
			Util         float64 `json:"util"`
			MeanResponse float64 `json:"mean_response"`
			CI95         float64 `json:"ci95"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(doc.Results) != 4 {
		t.Fatalf("%d results, want 4:\n%s", len(doc.Results), out)
	}
	want := []struct {
		p string
		u float64
	}{{"nls", 0.3}, {"nls", 0.9}, {"si", 0.3}, {"si", 0.9}}
	for i, r := range doc.Results {
		if r.Policy != want[i].p || r.Util != want[i].u || r.Sched != "fcfs" || !(r.MeanResponse >= 1) || !(r.CI95 > 0) {
			t.Errorf("result %d: %+v", i, r)
		}
	}
	if strings.Contains(out, "batches") {
		t.Error("JSON should not carry per-batch means")
	}
}

func TestSimLoadShareTableCSVAndPlot(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "fig.svg")
	// Flags after the subcommand name in any order; a range of utilisations.
	code, out, errOut := simCLI(t, "loadshare", "--policy", "si,ri", "--sched", "rr", "--util", "0.5:0.9:0.4",
		"--batches", "2", "--batch-length", "50", "--warmup", "0", "--plot", plot)
	if code != 0 {
		t.Fatalf("status %d: %s", code, errOut)
	}
	if !strings.Contains(out, "mean response") || strings.Count(out, "\n") < 5 || !strings.Contains(out, "better than si") {
		t.Fatalf("table:\n%s", out)
	}
	svg, err := os.ReadFile(plot)
	if err != nil || !bytes.HasPrefix(svg, []byte("<svg")) || !bytes.Contains(svg, []byte(">SI<")) || !bytes.Contains(svg, []byte(">RI<")) {
		t.Fatalf("plot: %v\n%.300s", err, svg)
	}
	code, out, _ = simCLI(t, "loadshare", "--policy", "ri-reinit", "--util", "0.5", "--ca", "0:2:1",
		"--batches", "2", "--batch-length", "50", "--csv")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[0], "policy,sched,util,ca,cs,mean_response,ci95") {
		t.Fatalf("csv status %d:\n%s", code, out)
	}
}

func TestSimLoadShareErrors(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"loadshare", "--policy", "magic"}, 2, "unknown policy"},
		{[]string{"loadshare", "--sched", "lifo"}, 2, "unknown node scheduling"},
		{[]string{"loadshare", "--util", "1.5"}, 2, "utilisation"},
		{[]string{"loadshare", "--util", "0.9:0.1:0.1"}, 2, "range"},
		{[]string{"loadshare", "--ca", "-1", "--util", "0.5"}, 2, "CV"},
		{[]string{"loadshare", "--json", "--csv"}, 2, "exclude"},
		{[]string{"loadshare", "extra"}, 2, "unexpected argument"},
		{[]string{"loadshare", "--nodes", "1"}, 2, "nodes"},
		{[]string{"loadshare", "--util", "0.5", "--batches", "2", "--plot", "/nonexistent/dir/x.svg"}, 1, "plot"},
	}
	for _, c := range cases {
		code, _, errOut := simCLI(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: status %d, stderr %q; want %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
}

func TestSimIndex(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "ix.svg")
	code, out, errOut := simCLI(t, "index", "--seeds", "3", "--plot", plot)
	if code != 0 {
		t.Fatalf("status %d: %s", code, errOut)
	}
	for _, want := range []string{"c2-35", "speedup", "over 3 seeds: mean speedup"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if svg, err := os.ReadFile(plot); err != nil || !bytes.Contains(svg, []byte(">c0-0<")) {
		t.Errorf("plot: %v", err)
	}
	code, out, _ = simCLI(t, "index", "--nodes", "a:1:1,b:2:2", "--origin", "b", "--tasks", "10", "--json")
	var doc struct {
		Result struct {
			Speedup float64 `json:"speedup"`
			Dynamic struct {
				TasksPerNode []int `json:"tasks_per_node"`
			} `json:"dynamic"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || len(doc.Result.Dynamic.TasksPerNode) != 2 || !(doc.Result.Speedup > 0) {
		t.Fatalf("json status %d err %v:\n%s", code, err, out)
	}
	for _, bad := range [][]string{
		{"index", "--nodes", "a:1"},
		{"index", "--origin", "nowhere"},
		{"index", "--seeds", "0"},
		{"index", "--emitter", "0.9"},
	} {
		// A bad configuration is a usage error.
		if code, _, errOut := simCLI(t, bad...); code != 2 || !strings.HasPrefix(errOut, "dpvm: sim index: ") {
			t.Errorf("%v: status %d, %q", bad, code, errOut)
		}
	}
}

func TestSimWAL(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "wal.svg")
	code, out, errOut := simCLI(t, "wal", "--pf", "60,240", "--jobs", "2000", "--warmup", "200", "--plot", plot)
	if code != 0 {
		t.Fatalf("status %d: %s", code, errOut)
	}
	for _, want := range []string{"nlb", "wal-fc", "pf 240: wal-fc reduces the slowdown of wal by"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if svg, err := os.ReadFile(plot); err != nil || !bytes.Contains(svg, []byte(">WAL-FC<")) {
		t.Errorf("plot: %v", err)
	}
	code, out, _ = simCLI(t, "wal", "--policy", "io,io-fc", "--pf", "120", "--jobs", "1000", "--warmup", "100", "--seeds", "2", "--json")
	var doc struct {
		Results []struct {
			Policy       string  `json:"policy"`
			MeanSlowdown float64 `json:"mean_slowdown"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || len(doc.Results) != 2 || doc.Results[1].Policy != "io-fc" || !(doc.Results[0].MeanSlowdown >= 1) {
		t.Fatalf("json status %d err %v:\n%s", code, err, out)
	}
	for _, bad := range [][]string{{"wal", "--policy", "x"}, {"wal", "--pf", "a"}, {"wal", "--seeds", "0"}, {"wal", "--buffer", "1"}} {
		if code, _, errOut := simCLI(t, bad...); code != 2 || !strings.HasPrefix(errOut, "dpvm: sim wal: ") {
			t.Errorf("%v: status %d, %q", bad, code, errOut)
		}
	}
}

func TestSimSED(t *testing.T) {
	dir := t.TempDir()
	tracePath, plot := filepath.Join(dir, "pool.trace"), filepath.Join(dir, "sed.svg")
	code, out, errOut := simCLI(t, "sed", "--synthetic", "--hosts", "8", "--days", "2", "--hours", "12",
		"--write-trace", tracePath, "--plot", plot)
	if code != 0 {
		t.Fatalf("status %d: %s", code, errOut)
	}
	for _, want := range []string{"night experiment: 8 hosts, start thu 00:00, 12 hours", "day experiment", "A_greedy", "A_70", "A_50", "MDC"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if svg, err := os.ReadFile(plot); err != nil || !bytes.Contains(svg, []byte("A_50 (day)")) {
		t.Errorf("plot: %v", err)
	}
	// The written trace reads back and gives the same figures.
	code, out2, errOut := simCLI(t, "sed", "--trace", tracePath, "--hours", "12")
	if code != 0 || out2 != out {
		t.Fatalf("replayed trace: status %d %s\n%s\nvs\n%s", code, errOut, out2, out)
	}
	code, js, _ := simCLI(t, "sed", "--trace", tracePath, "--experiment", "08:30", "--hours", "6", "--json")
	var doc struct {
		Experiments []struct {
			Start string `json:"start"`
			Apps  []struct {
				Size       int `json:"size"`
				MaxPerHour int `json:"max_per_hour"`
			} `json:"apps"`
		} `json:"experiments"`
	}
	if err := json.Unmarshal([]byte(js), &doc); code != 0 || err != nil || len(doc.Experiments) != 1 || doc.Experiments[0].Start != "thu 08:30" || len(doc.Experiments[0].Apps) != 3 {
		t.Fatalf("json status %d err %v:\n%s", code, err, js)
	}
	bad := filepath.Join(dir, "bad.trace")
	os.WriteFile(bad, []byte("dpvm-trace 1\nstep 60\nhost a 1 0\n0 a x 0 0\n"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sed", "--trace", bad}, 1, "line 4"},
		{[]string{"sed", "--trace", filepath.Join(dir, "none")}, 1, "no such file"},
		{[]string{"sed", "--trace", bad, "--synthetic"}, 2, "exclude"},
		{[]string{"sed", "--experiment", "noon"}, 2, "HH:MM"},
		{[]string{"sed", "--hours", "0"}, 2, "hours"},
		{[]string{"sed", "--hosts", "0"}, 2, "hosts"},
	} {
		code, _, errOut := simCLI(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: status %d, %q", c.args, code, errOut)
		}
	}
}
