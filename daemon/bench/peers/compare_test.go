package peers

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func readLines(t *testing.T, name string) []Line {
	t.Helper()
	ls, err := ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// TestParseLineDpvmForms: raw quic-go's line (mode quic) becomes the
// remote system quic-go; the spawn and barrier fields of `dpvm bench
// pingpong --json` become spawn and barrier rows.
func TestParseLineDpvmForms(t *testing.T) {
	q, err := ParseLine([]byte(`{"mode":"quic","results":[{"size":8,"oneway_us":20,"mbps":0.4}],"rate_msgs_per_s":3e6,"rounds":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if q.System != SystemQUIC || q.Mode != ModeRemote {
		t.Errorf("quic line: system %q mode %q", q.System, q.Mode)
	}
	p, err := ParseLine([]byte(`{"mode":"remote","results":[],"spawn32_ms":4.5,"barrier8_us":98}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.System != "dpvm-remote" || len(p.Spawn) != 1 || p.Spawn[0] != (SpawnResult{Tasks: 32, US: 4500}) || p.BarrierUS != 98 || p.GroupSize != 8 {
		t.Errorf("pingpong line: %+v", p)
	}
	for _, bad := range []string{
		`{"mode":"remote","results":[],"spawn32_ms":-1}`,
		`{"mode":"remote","results":[],"barrier8_us":-2}`,
	} {
		if _, err := ParseLine([]byte(bad)); !errors.Is(err, ErrBadLine) {
			t.Errorf("%s: err %v, want ErrBadLine", bad, err)
		}
	}
}

func TestWriteSideBySideGolden(t *testing.T) {
	sums, err := Summarize(readLines(t, "sidebyside.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteSideBySide(&b, sums); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "sidebyside.golden", b.String())
	// Spot checks independent of the golden file: dpvm-local's median 8 B
	// one-way is 1.1 µs, pvm-daemon's 39 µs; the ratio is 35.5×.
	if !strings.Contains(b.String(), "| one-way 8 B (µs) | 1.10 (1.00–1.20) | 39.0 (38.0–40.0) | 35.5× |") {
		t.Errorf("8 B row wrong:\n%s", b.String())
	}
	// The collectives of two tasks: dpvm's median allreduce of 8 B is
	// 1.1 µs, Open MPI's 0.8 µs; the ratio is 0.727×.
	if !strings.Contains(b.String(), "| allreduce sum 8 B, 2 tasks (µs) | 1.10 (1.00–1.20) | – | – | 0.800 | 0.727× |") {
		t.Errorf("allreduce row wrong:\n%s", b.String())
	}
	// Between daemons, raw quic-go is faster than dpvm: the ratio is below 1.
	if !strings.Contains(b.String(), "| one-way 8 B (µs) | 30.0 | 25.0 | 0.833× | 9.00 | 0.300× |") {
		t.Errorf("remote 8 B row wrong:\n%s", b.String())
	}
}

func TestWriteSideBySideNeedsBothSides(t *testing.T) {
	all := readLines(t, "sidebyside.jsonl")
	var peersOnly, dpvmOnly []Line
	for _, l := range all {
		if strings.HasPrefix(l.System, "dpvm-") {
			dpvmOnly = append(dpvmOnly, l)
		} else {
			peersOnly = append(peersOnly, l)
		}
	}
	for _, ls := range [][]Line{peersOnly, dpvmOnly} {
		sums, err := Summarize(ls)
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteSideBySide(&bytes.Buffer{}, sums); err == nil {
			t.Errorf("a table of %d systems without both sides was written", len(sums))
		}
	}
}

func TestCharts(t *testing.T) {
	sums, err := Summarize(readLines(t, "sidebyside.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lat, bw := Charts(sums, "test")
	var names []string
	for _, s := range lat.Series {
		names = append(names, s.Name)
		if len(s.X) != 4 || s.X[0] != 3 || s.X[3] != 20 {
			t.Errorf("%s: x %v, want log2 sizes 3..20", s.Name, s.X)
		}
	}
	if got := strings.Join(names, ","); got != "dpvm-local,dpvm-remote,pvm-daemon,mpi-shm,mpi-tcp,quic-go" {
		t.Errorf("series %s", got)
	}
	// dpvm-local at 1 MiB: median one-way 210 µs, so 1048576/210 MB/s.
	if got := bw.Series[0].Y[3]; got != float64(1<<20)/210 {
		t.Errorf("dpvm-local 1 MiB bandwidth %v", got)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "peers.svg")
	if err := WritePlots(path, sums, "test"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, filepath.Join(dir, "peers-bandwidth.svg")} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("<svg")) || !bytes.Contains(b, []byte("pvm-daemon")) {
			t.Errorf("%s is not the chart: %.200s", p, b)
		}
	}
	if err := WritePlots(path, nil, "none"); err == nil {
		t.Error("a plot without data was written")
	}
}

// TestWriteHarness: the harness the binary carries is the script and C
// sources of this directory, written out with the script executable, and
// the script parses.
func TestWriteHarness(t *testing.T) {
	dir := t.TempDir()
	script, err := WriteHarness(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(script); err != nil || st.Mode().Perm()&0o100 == 0 {
		t.Fatalf("%s: %v %v, want an executable script", script, st, err)
	}
	srcs, _ := filepath.Glob("csrc/*")
	if len(srcs) == 0 {
		t.Fatal("no C sources in csrc")
	}
	for _, f := range append(srcs, ScriptName) {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(dir, f)); err != nil || string(got) != string(want) {
			t.Errorf("%s written out differs from the source: %v", f, err)
		}
	}
	if bash, err := exec.LookPath("bash"); err == nil {
		if out, err := exec.Command(bash, "-n", script).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", script, err, out)
		}
	}
}
