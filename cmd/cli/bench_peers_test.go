package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpvm/dpvm/daemon/bench/peers"
)

// TestBenchPeersLine: --line prints one line the harness's parser accepts,
// with the spawn and collective rows on one daemon and the collectives of
// two tasks.
func TestBenchPeersLine(t *testing.T) {
	code, out, errOut := dpvm(t, "bench", "peers", "--line", "local", "--scale", "0.01")
	if code != 0 {
		t.Fatalf("status %d: %s", code, errOut)
	}
	l, err := peers.ParseLine([]byte(strings.TrimSpace(out)))
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if l.System != "dpvm-local" || len(l.Results) != 4 || len(l.Spawn) != 3 || l.BarrierUS <= 0 || l.BcastUS <= 0 || l.ReduceUS <= 0 {
		t.Errorf("line %+v", l)
	}
	// The collectives of two tasks, each checked as it ran: every row.
	if l.CollNP != 2 || len(l.Coll) != len(peers.CollOps)*len(peers.CollSizes) {
		t.Errorf("collectives of %d: %+v", l.CollNP, l.Coll)
	}
	if code, _, errOut := dpvm(t, "bench", "peers", "--line", "far"); code != 2 || !strings.Contains(errOut, "far") {
		t.Errorf("--line far: status %d, stderr %q", code, errOut)
	}
}

// fakeHarness is a stand-in for run.sh: it checks that it is asked to
// measure this binary too and writes recorded results.
const fakeHarness = `#!/usr/bin/env bash
set -eu
out= bin= notable=0
while [ $# -gt 0 ]; do
	case "$1" in
	--out) out=$2; shift 2 ;;
	--dpvm-bin) bin=$2; shift 2 ;;
	--no-table) notable=1; shift ;;
	*) shift ;;
	esac
done
[ -n "$bin" ] && [ "$notable" = 1 ] || { echo "fake: want --dpvm-bin and --no-table" >&2; exit 3; }
mkdir -p "$out"
cat >"$out/results.jsonl" <<'END'
{"round":1,"system":"pvm-daemon","mode":"local","results":[{"size":8,"oneway_us":38,"mbps":0.2},{"size":1048576,"oneway_us":7000,"mbps":150}],"rate_msgs_per_s":41000,"barrier_us":386}
{"round":1,"system":"dpvm-local","mode":"local","results":[{"size":8,"oneway_us":1,"mbps":8},{"size":1048576,"oneway_us":200,"mbps":5243}],"rate_msgs_per_s":3000000,"barrier_us":5}
END
printf 'date: 2026-01-02T03:04:05Z\nhost: test\n' >"$out/machine.txt"
echo "fake: done"
exit ${FAKE_EXIT:-0}
`

func TestBenchPeersWithFakeHarness(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "run.sh")
	if err := os.WriteFile(script, []byte(fakeHarness), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "res")
	plot := filepath.Join(dir, "peers.svg")
	code, stdout, stderr := dpvm(t, "bench", "peers", "--script", script, "--out", out, "--rounds", "2", "--plot", plot)
	if code != 0 {
		t.Fatalf("status %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"dpvm bench peers --rounds 2 --plot " + plot,
		"- date: 2026-01-02T03:04:05Z",
		"| one-way 8 B (µs) | 1.00 | 38.0 | 38.0× |",
		"| barrier, 8 tasks (µs) | 5.00 | 386 | 77.2× |",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "fake: done") || strings.Contains(stdout, "fake: done") {
		t.Errorf("the harness's output belongs on stderr:\nstdout %s\nstderr %s", stdout, stderr)
	}
	for _, p := range []string{plot, filepath.Join(dir, "peers-bandwidth.svg")} {
		if b, err := os.ReadFile(p); err != nil || !strings.HasPrefix(string(b), "<svg") {
			t.Errorf("plot %s: %v", p, err)
		}
	}
	code, stdout, stderr = dpvm(t, "bench", "peers", "--script", script, "--out", out, "--json")
	if code != 0 {
		t.Fatalf("--json: status %d\n%s", code, stderr)
	}
	var rep struct {
		Command string
		Machine []string
		Systems []struct{ System string }
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || len(rep.Systems) != 2 || rep.Systems[0].System != "dpvm-local" || len(rep.Machine) != 2 {
		t.Errorf("--json: %v\n%s", err, stdout)
	}
	// A harness with failed runs: the table of what worked, and status 1.
	t.Setenv("FAKE_EXIT", "1")
	code, stdout, stderr = dpvm(t, "bench", "peers", "--script", script, "--out", out)
	if code != 1 || !strings.Contains(stdout, "38.0×") || !strings.Contains(stderr, "failed runs") {
		t.Errorf("failed harness: status %d\n%s\n%s", code, stdout, stderr)
	}
}

func TestBenchPeersErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--script", filepath.Join(dir, "missing.sh")}, 1, "not a file"},
		{[]string{"--rounds", "0"}, 2, "--rounds"},
		{[]string{"--scale", "20"}, 2, "--scale"},
	} {
		code, _, errOut := dpvm(t, append([]string{"bench", "peers"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.msg) {
			t.Errorf("%v: status %d, stderr %q; want %d mentioning %q", c.args, code, errOut, c.code, c.msg)
		}
	}
}

// TestBenchPeersCarriesItsHarness: outside the repository, with no
// --script, the harness the binary carries is written into --out/harness
// and run from there (here told not to install anything, on one quick
// system: whether the machine has a C compiler decides how far it gets).
func TestBenchPeersCarriesItsHarness(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	_, _, errOut := dpvm(t, "bench", "peers", "--no-install", "--only", "raw-tcp", "--rounds", "1", "--scale", "0.01", "--out", "res")
	script := filepath.Join(dir, "res", "harness", peers.ScriptName)
	if !strings.Contains(errOut, "bash "+script+" ") {
		t.Errorf("did not run the harness it carries (%s): %s", script, errOut)
	}
	for _, f := range []string{script, filepath.Join(dir, "res", "harness", "csrc", "raw_bench.c")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("harness file: %v", err)
		}
	}
}
