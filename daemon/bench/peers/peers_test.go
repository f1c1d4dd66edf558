package peers

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func readSample(t *testing.T) []Line { return readLines(t, "sample.jsonl") }

// checkGolden compares got with testdata/name, rewriting the file first
// under -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	golden := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("table differs from %s (run with -update to rewrite):\n%s", golden, got)
	}
}

func TestParseLinesSample(t *testing.T) {
	lines := readSample(t)
	if len(lines) != 8 {
		t.Fatalf("got %d lines, want 8 (comments and blank lines skipped)", len(lines))
	}
	pd := lines[1]
	if pd.System != "pvm-daemon" || pd.Mode != ModeLocal || pd.Round != 1 {
		t.Errorf("line 2: system %q mode %q round %d", pd.System, pd.Mode, pd.Round)
	}
	if len(pd.Results) != 4 || pd.Results[3].Size != 1<<20 || pd.Results[3].OnewayUS != 11487.828 {
		t.Errorf("line 2 results: %+v", pd.Results)
	}
	if len(pd.Spawn) != 3 || pd.Spawn[2] != (SpawnResult{Tasks: 32, US: 479540.8, Reps: 1}) {
		t.Errorf("line 2 spawn: %+v", pd.Spawn)
	}
	if pd.GroupSize != 8 || pd.BarrierUS != 405.63 || pd.BcastUS != 449.06 || pd.ReduceUS != 306.84 {
		t.Errorf("line 2 collectives: %+v", pd)
	}
	d := lines[7]
	if d.System != "dpvm-local" || d.Round != 0 || d.RateMsgsPerS != 3.6e6 {
		t.Errorf("dpvm line: system %q round %d rate %v", d.System, d.Round, d.RateMsgsPerS)
	}
}

func TestParseLinesErrors(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"not json", `{"mode":`, "line 1"},
		{"no mode", `{"system":"x","results":[]}`, "mode"},
		{"bad mode", `{"mode":"far","results":[]}`, "mode"},
		{"zero size", `{"mode":"local","results":[{"size":0,"oneway_us":1}]}`, "size 0"},
		{"repeated size", `{"mode":"local","results":[{"size":8,"oneway_us":1},{"size":8,"oneway_us":2}]}`, "twice"},
		{"negative latency", `{"mode":"local","results":[{"size":8,"oneway_us":-1}]}`, "oneway_us"},
		{"negative rate", `{"mode":"local","results":[],"rate_msgs_per_s":-3}`, "rate_msgs_per_s"},
		{"spaces in system", `{"system":"a b","mode":"local","results":[]}`, "system"},
		{"pipe in system", `{"system":"a|b","mode":"local","results":[]}`, "system"},
		{"negative round", `{"round":-1,"system":"x","mode":"local","results":[]}`, "round"},
		{"spawn zero tasks", `{"system":"x","mode":"local","results":[],"spawn":[{"tasks":0,"us":1}]}`, "spawn"},
		{"spawn repeated", `{"system":"x","mode":"local","results":[],"spawn":[{"tasks":1,"us":1},{"tasks":1,"us":2}]}`, "spawn"},
		{"negative barrier", `{"system":"x","mode":"local","results":[],"barrier_us":-1}`, "barrier_us"},
		{"negative group", `{"system":"x","mode":"local","results":[],"group_size":-8}`, "group_size"},
		{"wrong type", `{"system":"x","mode":"local","results":[{"size":"8"}]}`, "line 1"},
		{"second line bad", "{\"mode\":\"local\",\"results\":[]}\n{\"mode\":1}", "line 2"},
		{"collectives without np", `{"system":"x","mode":"local","results":[],"coll":[{"op":"bcast","size":8,"us":1}]}`, "coll_np"},
		{"unknown collective", `{"system":"x","mode":"local","results":[],"coll_np":2,"coll":[{"op":"scan","size":8,"us":1}]}`, "scan"},
		{"collective repeated", `{"system":"x","mode":"local","results":[],"coll_np":2,"coll":[{"op":"bcast","size":8,"us":1},{"op":"bcast","size":8,"us":2}]}`, "bcast"},
		{"negative collective", `{"system":"x","mode":"local","results":[],"coll_np":2,"coll":[{"op":"bcast","size":8,"us":-1}]}`, "bcast"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseLines(strings.NewReader(c.in))
			if !errors.Is(err, ErrBadLine) {
				t.Fatalf("err = %v, want ErrBadLine", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %q, want it to mention %q", err, c.want)
			}
		})
	}
}

func TestParseLinesTooLong(t *testing.T) {
	in := `{"mode":"local","results":[],"pad":"` + strings.Repeat("x", maxLine) + `"}`
	_, err := ParseLines(strings.NewReader(in))
	if err == nil || errors.Is(err, ErrBadLine) {
		t.Fatalf("err = %v, want a read error for an over-long line", err)
	}
}

func TestSummarize(t *testing.T) {
	sums, err := Summarize(readSample(t))
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, s := range sums {
		order = append(order, s.System)
	}
	want := "dpvm-local pvm-daemon pvm-direct mpi-tcp raw-tcp"
	if got := strings.Join(order, " "); got != want {
		t.Fatalf("systems %q, want %q", got, want)
	}
	pd := sums[1]
	if pd.Rounds != 3 {
		t.Errorf("pvm-daemon rounds %d, want 3", pd.Rounds)
	}
	// Three rounds: 34.966, 30, 40 -> median 34.966.
	if s := pd.Stats["oneway_8"]; s != (Stat{Median: 34.966, Min: 30, Max: 40, N: 3}) {
		t.Errorf("pvm-daemon oneway_8 %+v", s)
	}
	// Two rounds: median is the mean of the two.
	if s := pd.Stats["oneway_1m"]; s.N != 2 || s.Median != (11487.828+9000)/2 {
		t.Errorf("pvm-daemon oneway_1m %+v", s)
	}
	if s := pd.Stats["mbps_1m"]; s.N != 2 || math.Abs(s.Min-float64(1<<20)/11487.828) > 1e-9 {
		t.Errorf("pvm-daemon mbps_1m %+v", s)
	}
	if s := pd.Stats["spawn_1"]; s.N != 2 || s.Median != (22.2422+20)/2 {
		t.Errorf("pvm-daemon spawn_1 %+v (ms)", s)
	}
	if s := pd.Stats["rate"]; s != (Stat{Median: 28.315, Min: 20, Max: 30, N: 3}) {
		t.Errorf("pvm-daemon rate %+v (k/s)", s)
	}
	if _, ok := sums[3].Stats["barrier"]; ok {
		t.Errorf("mpi-tcp has a barrier figure it never measured")
	}
}

func TestSummarizeModeConflict(t *testing.T) {
	lines := []Line{
		{System: "x", Mode: ModeLocal},
		{System: "x", Mode: ModeRemote},
	}
	if _, err := Summarize(lines); !errors.Is(err, ErrBadLine) {
		t.Fatalf("err = %v, want ErrBadLine", err)
	}
}

func TestSummarizeOrderOfVariantsAndUnknowns(t *testing.T) {
	lines := []Line{
		{System: "zeta", Mode: ModeLocal},
		{System: "pvm-direct-frag65536", Mode: ModeLocal},
		{System: "mpi-shm", Mode: ModeLocal},
	}
	sums, err := Summarize(lines)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{sums[0].System, sums[1].System, sums[2].System}
	if strings.Join(got, " ") != "pvm-direct-frag65536 mpi-shm zeta" {
		t.Errorf("order %v", got)
	}
}

func TestWriteTableGolden(t *testing.T) {
	sums, err := Summarize(readSample(t))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, sums); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "table.golden", b.String())
}

func TestWriteTableWithoutDpvmHasNoRatios(t *testing.T) {
	lines := readSample(t)
	sums, err := Summarize(lines[:len(lines)-1])
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, sums); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "advantage") {
		t.Errorf("ratio table printed without dpvm's lines:\n%s", b.String())
	}
	if !strings.Contains(b.String(), "| one-way 8 B (µs) | 35.0 (30.0–40.0) |") {
		t.Errorf("pvm-daemon 8 B cell missing:\n%s", b.String())
	}
}

func TestWriteTableEmpty(t *testing.T) {
	if err := WriteTable(&bytes.Buffer{}, nil); err == nil {
		t.Fatal("no error for an empty table")
	}
}

func TestRatio(t *testing.T) {
	lat := Metrics[0]
	bw := Metrics[4]
	if lat.Higher || !bw.Higher {
		t.Fatalf("metric order changed: %s %s", lat.Key, bw.Key)
	}
	if r := Ratio(lat, Stat{Median: 2}, Stat{Median: 20}); r != 10 {
		t.Errorf("latency ratio %v, want 10 (dpvm ten times faster)", r)
	}
	if r := Ratio(bw, Stat{Median: 300}, Stat{Median: 100}); r != 3 {
		t.Errorf("bandwidth ratio %v, want 3", r)
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[float64]string{
		0.4234: "0.423", 1.125: "1.12", 9.999: "10.00", 35.56: "35.6", 427.1: "427", 11487.8: "11488",
	} {
		if got := FormatValue(v); got != want {
			t.Errorf("FormatValue(%v) = %q, want %q", v, got, want)
		}
	}
}

func FuzzParseLine(f *testing.F) {
	f.Add([]byte(`{"mode":"local","results":[{"size":8,"oneway_us":1.1,"mbps":7}],"rate_msgs_per_s":3}`))
	f.Add([]byte(`{"system":"pvm-daemon","mode":"local","results":[],"spawn":[{"tasks":1,"us":5}],"barrier_us":1}`))
	f.Add([]byte(`{"mode":"remote","results":null}`))
	f.Add([]byte(`{"mode":"local","results":[{"size":8,"oneway_us":1e400}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := ParseLine(b)
		if err != nil {
			if !errors.Is(err, ErrBadLine) {
				t.Fatalf("error %v does not wrap ErrBadLine", err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("accepted line fails Validate: %v", err)
		}
		// What was accepted survives a round trip through JSON.
		out, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		l2, err := ParseLine(out)
		if err != nil {
			t.Fatalf("re-encoded line rejected: %v\n%s", err, out)
		}
		if _, err := Summarize([]Line{l, l2}); err != nil {
			t.Fatalf("summarize: %v", err)
		}
		var b2 bytes.Buffer
		sums, _ := Summarize([]Line{l})
		if err := WriteTable(&b2, sums); err != nil {
			t.Fatalf("table: %v", err)
		}
	})
}

// TestSizeKeyAndLabel pins the names of a collective's sizes in its
// metric's key and label, which the JSON lines and the table carry.
func TestSizeKeyAndLabel(t *testing.T) {
	for _, c := range []struct {
		size       int
		key, label string
	}{
		{8, "8", "8 B"},
		{1000, "1000", "1000 B"},
		{8 << 10, "8k", "8 KiB"},
		{3 << 10, "3k", "3 KiB"},
		{1 << 20, "1m", "1 MiB"},
		{1<<20 + 1<<10, "1025k", "1025 KiB"},
	} {
		if k, l := sizeKey(c.size), sizeLabel(c.size); k != c.key || l != c.label {
			t.Errorf("size %d: key %q label %q, want %q %q", c.size, k, l, c.key, c.label)
		}
	}
}
