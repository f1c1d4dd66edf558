package cli

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchMigrate runs `dpvm bench migrate args...` and returns the status,
// stdout and stderr.
func benchMigrate(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(append([]string{"dpvm", "bench", "migrate"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestBenchMigrateJSON(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := benchMigrate(t, "--sizes", "0,0.25", "--reps", "1", "--warmup", "0", "--dir", dir, "--json", "-q")
	if code != 0 || errOut != "" {
		t.Fatalf("status %d, stderr %q", code, errOut)
	}
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("want one JSON line, got:\n%s", out)
	}
	var r struct {
		Results []struct {
			SizeMiB         *float64 `json:"size_mib"`
			Via             *string  `json:"via"`
			Seconds         *float64 `json:"seconds"`
			FreezeMS        *float64 `json:"freeze_ms"`
			CheckpointBytes *int64   `json:"checkpoint_bytes"`
			Verified        bool     `json:"verified"`
		} `json:"results"`
		Baselines []struct {
			Kind    string  `json:"kind"`
			Seconds float64 `json:"seconds"`
		} `json:"baselines"`
		Targets []struct {
			What string `json:"what"`
		} `json:"targets"`
		Dir string `json:"dir"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	want := []struct {
		size float64
		via  string
	}{{0, "direct"}, {0, "indirect"}, {0.25, "direct"}, {0.25, "indirect"}}
	if len(r.Results) != len(want) {
		t.Fatalf("%d results, want %d:\n%s", len(r.Results), len(want), out)
	}
	for i, w := range want {
		x := r.Results[i]
		if x.SizeMiB == nil || *x.SizeMiB != w.size || x.Via == nil || *x.Via != w.via || x.Seconds == nil || *x.Seconds <= 0 ||
			x.FreezeMS == nil || *x.FreezeMS <= 0 || x.CheckpointBytes == nil || *x.CheckpointBytes <= int64(w.size*(1<<20)) || !x.Verified {
			t.Errorf("result %d (want %v MiB %s) incomplete or wrong:\n%s", i, w.size, w.via, out)
		}
	}
	if len(r.Baselines) != 4 || len(r.Targets) == 0 || r.Dir != dir {
		t.Errorf("baselines %d, targets %d, dir %q:\n%s", len(r.Baselines), len(r.Targets), r.Dir, out)
	}
}

func TestBenchMigrateCSVAndPlot(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "fig1.svg")
	code, out, errOut := benchMigrate(t, "--sizes", "0.125", "--via", "indirect", "--reps", "1", "--baselines=false",
		"--csv", "--plot", plot)
	if code != 0 {
		t.Fatalf("status %d, stderr %q", code, errOut)
	}
	if !strings.Contains(errOut, "0.125 MiB done after ") {
		t.Errorf("no progress line on stderr: %q", errOut)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(recs) != 2 || len(recs[0]) != 12 || recs[0][0] != "size_mib" || recs[0][1] != "via" ||
		recs[1][0] != "0.125" || recs[1][1] != "indirect" || recs[1][7] != "true" || recs[1][8] != "" {
		t.Errorf("csv:\n%s", out)
	}
	svg, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("indirect (shared dir)")) {
		t.Errorf("plot:\n%s", svg)
	}
}

func TestBenchMigrateText(t *testing.T) {
	code, out, errOut := benchMigrate(t, "--sizes", "0", "--reps", "1", "-q")
	if code != 0 || errOut != "" {
		t.Fatalf("status %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"dpvm bench migrate on ", "state  direct s  indirect s  indirect/direct", "  0 MiB  ",
		"against the baselines", "direct freeze, empty state", "run took "} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchMigrateErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
		code int
	}{
		{[]string{"--sizes", "-1"}, "dpvm: bench: bad option: size -1 MiB is outside 0..4096 MiB", 2},
		{[]string{"--sizes", "1,x"}, `dpvm: bench: bad option: size "x" is not a number of MiB`, 2},
		{[]string{"--sizes", "1,1"}, "dpvm: bench: bad option: state size 1 MiB is given twice", 2},
		{[]string{"--via", "tcp"}, `dpvm: bench: bad option: migration mode "tcp": want direct or indirect`, 2},
		{[]string{"--reps", "0"}, "dpvm: bench: bad option: --reps 0: need at least one", 2},
		{[]string{"--warmup", "-1"}, "dpvm: bench: bad option: --warmup -1 is negative", 2},
		{[]string{"--seed", "0"}, "dpvm: bench: bad option: --seed 0", 2},
		{[]string{"--json", "--csv"}, "dpvm: bench: bad option: --json and --csv together", 2},
		{[]string{"--sizes", "0", "--dir", file}, "dpvm: bench: bad option: shared directory " + file + " is not a directory", 2},
		{[]string{"--sizes", "0", "--dir", filepath.Join(file, "x")}, "dpvm: bench migrate: shared directory: ", 1},
		{[]string{"--criu", filepath.Join(file, "x")}, "dpvm: bench: bad option: --criu: open ", 2},
		{[]string{"--criu", file}, "dpvm: --criu " + file + ": bench: bad option: CRIU results: no result lines", 2},
	}
	for _, c := range cases {
		code, _, errOut := benchMigrate(t, append(c.args, "-q")...)
		if code != c.code || !strings.HasPrefix(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: status %d, stderr %q, want %d and one line starting %q", c.args, code, errOut, c.code, c.want)
		}
	}
}

// TestBenchMigrateCRIU: measured CRIU figures given with --criu are printed
// beside the moves and judge the CRIU target.
func TestBenchMigrateCRIU(t *testing.T) {
	file := filepath.Join(t.TempDir(), "criu.jsonl")
	line := `{"tool":"criu","version":"4.1.1","size_mib":0.25,"dump_s":0.2,"restore_s":0.3,"seconds":0.5,"image_bytes":1000000,"reps":3,"verified":true}` + "\n"
	if err := os.WriteFile(file, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := benchMigrate(t, "--sizes", "0.25", "--via", "indirect", "--reps", "1", "--warmup", "0", "--criu", file, "-q")
	if code != 0 || errOut != "" {
		t.Fatalf("status %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"CRIU's same-host dump+restore", "0.25 MiB", "0.200", "0.300", "0.500", "1000000 B"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = benchMigrate(t, "--sizes", "0.25", "--via", "indirect", "--reps", "1", "--warmup", "0", "--criu", file, "--json", "-q")
	if code != 0 || errOut != "" || !strings.Contains(out, `"criu":[{"size_mib":0.25,"dump_s":0.2`) {
		t.Errorf("status %d, stderr %q, JSON without the CRIU figures:\n%s", code, errOut, out)
	}
}
