package sched

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// decide runs what `dpvm sched plan|step` runs on a snapshot file's bytes
// and returns the JSON line and the human tables.
func decide(t *testing.T, kind string, data []byte) (jsonOut, text []byte) {
	t.Helper()
	s, err := ParseSnapshot(data)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	var tb bytes.Buffer
	switch kind {
	case "plan":
		m, err := Plan(s, s.Job)
		if err != nil {
			t.Fatal(err)
		}
		v = m
		err = WritePlan(&tb, s, s.Job, m)
		if err != nil {
			t.Fatal(err)
		}
	case "step":
		r, err := Step(s)
		if err != nil {
			t.Fatal(err)
		}
		v = r
		if err := WriteStep(&tb, s, r); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("golden input named %q: want plan-* or step-*", kind)
	}
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return append(j, '\n'), tb.Bytes()
}

// TestGolden runs every testdata/golden/{plan,step}-*.json snapshot and
// compares the decision with NAME.out.json (the --json output) and
// NAME.out.txt (the tables). `go test ./sched -run Golden -update` rewrites
// them; review the diff.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "golden", "*-*.json"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, in := range inputs {
		if strings.HasSuffix(in, ".out.json") {
			continue
		}
		n++
		name := strings.TrimSuffix(filepath.Base(in), ".json")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			j, text := decide(t, strings.SplitN(name, "-", 2)[0], data)
			base := strings.TrimSuffix(in, ".json")
			for _, g := range []struct {
				path string
				got  []byte
			}{{base + ".out.json", j}, {base + ".out.txt", text}} {
				if *update {
					if err := os.WriteFile(g.path, g.got, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(g.path)
				if err != nil {
					t.Fatalf("%v (run with -update to create it)", err)
				}
				if !bytes.Equal(g.got, want) {
					t.Errorf("%s differs:\n--- got\n%s--- want\n%s", g.path, g.got, want)
				}
			}
		})
	}
	if n < 6 {
		t.Fatalf("found %d golden inputs", n)
	}
}
