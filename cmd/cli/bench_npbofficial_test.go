package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpvm/dpvm/daemon/bench/npbofficial"
)

// fakeNPBHarness stands in for daemon/bench/npbofficial/run.sh: it checks
// its arguments and writes recorded results.
const fakeNPBHarness = `#!/usr/bin/env bash
set -eu
out= bin= src= class= kernels=
while [ $# -gt 0 ]; do
	case "$1" in
	--out) out=$2; shift 2 ;;
	--dpvm-bin) bin=$2; shift 2 ;;
	--src) src=$2; shift 2 ;;
	--class) class=$2; shift 2 ;;
	--kernels) kernels=$2; shift 2 ;;
	*) shift ;;
	esac
done
[ -n "$bin" ] && [ -d "$src" ] && [ "$class" = S ] && [ "$kernels" = ep,is ] || { echo "fake: bad arguments" >&2; exit 3; }
mkdir -p "$out"
cat >"$out/results.jsonl" <<'END'
{"round":1,"kernel":"ep","class":"S","system":"official","np":1,"time_s":0.16,"mops":200,"verified":true,"maxrss_kib":[4096]}
{"round":1,"kernel":"ep","class":"S","system":"dpvm","np":1,"time_s":0.2,"mops":150,"verified":true,"maxrss_kib":[16384]}
{"round":1,"kernel":"is","class":"S","system":"official","np":2,"time_s":0.01,"mops":800,"verified":true,"maxrss_kib":[10240,10240]}
{"round":1,"kernel":"is","class":"S","system":"dpvm","np":2,"time_s":0.01,"mops":200,"verified":false,"maxrss_kib":[20480]}
END
printf 'date: 2026-01-02 03:04 UTC\n' >"$out/machine.txt"
echo "fake: done"
exit ${FAKE_EXIT:-0}
`

func TestBenchNPBOfficialWithFakeHarness(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "run.sh")
	if err := os.WriteFile(script, []byte(fakeNPBHarness), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "res")
	// Flags after and before the others, kernels in capitals.
	code, stdout, stderr := dpvm(t, "bench", "npb-official", "--script", script, "--src", dir, "--out", out,
		"--class", "s", "--rounds", "1", "--kernels", "EP,is", "--dpvm-bin", "/bin/true")
	if code != 0 {
		t.Fatalf("status %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"dpvm bench npb-official --src " + dir + " --class S --rounds 1 --kernels ep,is",
		"- date: 2026-01-02 03:04 UTC",
		"| EP | S | 0.75 | — | — | — | 150 vs 200 | — vs — | 0 |",
		"| IS | S | — | — | — | — | — vs — | — vs — | 1 |",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "fake: done") || strings.Contains(stdout, "fake: done") {
		t.Errorf("the harness's output belongs on stderr:\nstdout %s\nstderr %s", stdout, stderr)
	}

	t.Setenv("FAKE_EXIT", "1")
	code, stdout, stderr = dpvm(t, "bench", "npb-official", "--json", "--script", script, "--src", dir, "--out", out,
		"--class", "S", "--kernels", "ep,is", "--dpvm-bin", "/bin/true")
	if code != 1 || !strings.Contains(stderr, "reported failed runs") {
		t.Fatalf("a failing harness: status %d, stderr %s", code, stderr)
	}
	var rep npbOfficialReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	if len(rep.Kernels) != 2 || rep.Kernels[0].Pairs[0].Ratio.Median != 0.75 || rep.Failed == "" {
		t.Errorf("report %+v", rep)
	}
}

func TestBenchNPBOfficialErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--src DIR is required"},
		{[]string{"--src", filepath.Join(dir, "none")}, "not a directory"},
		{[]string{"--src", dir, "--class", "Q"}, "unknown NPB class"},
		{[]string{"--src", dir, "--rounds", "0"}, "outside 1..50"},
		{[]string{"--src", dir, "--kernels", "ep,bt"}, "unknown NPB kernel"},
		{[]string{"--src", dir, "--threads", "4"}, "--threads needs --omp"},
		{[]string{"--src", dir, "--omp", "--threads", "0"}, `--threads: "0" is not a thread count`},
		{[]string{"--src", dir, "--omp", "--threads", "4,x"}, `--threads: "x" is not a thread count`},
	} {
		code, _, stderr := dpvm(t, append([]string{"bench", "npb-official"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: status %d, stderr %q, want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	code, _, stderr := dpvm(t, "bench", "npb-official", "--src", dir, "--script", filepath.Join(dir, "none.sh"))
	if code != 1 || !strings.Contains(stderr, "not a file") {
		t.Errorf("missing script: status %d, stderr %q", code, stderr)
	}
}

// TestBenchNPBOfficialCarriesItsHarness: outside the repository, with no
// --script, the harness the binary carries is written into --out/harness
// and run; here it stops at once, as --src holds no NPB source.
func TestBenchNPBOfficialCarriesItsHarness(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	code, _, stderr := dpvm(t, "bench", "npb-official", "--src", dir, "--no-install", "--rounds", "1", "--out", "res")
	script := filepath.Join(dir, "res", "harness", npbofficial.ScriptName)
	if code != 1 || !strings.Contains(stderr, "bash "+script+" ") {
		t.Errorf("status %d; did not run the harness it carries (%s): %s", code, script, stderr)
	}
	if st, err := os.Stat(script); err != nil || st.Mode().Perm()&0o100 == 0 {
		t.Errorf("harness script: %v %v", st, err)
	}
}

// fakeNPBHarnessOMP stands in for run.sh --omp: it checks that the thread
// counts arrive and writes an OpenMP pair per count.
const fakeNPBHarnessOMP = `#!/usr/bin/env bash
set -eu
out= omp=0 threads=
while [ $# -gt 0 ]; do
	case "$1" in
	--out) out=$2; shift 2 ;;
	--omp) omp=1; shift ;;
	--threads) threads=$2; shift 2 ;;
	*) shift ;;
	esac
done
[ "$omp" = 1 ] && [ "$threads" = 1,4 ] || { echo "fake: bad arguments" >&2; exit 3; }
mkdir -p "$out"
cat >"$out/results.jsonl" <<'END'
{"round":1,"kernel":"mg","class":"S","system":"official","suite":"omp","np":1,"time_s":0.1,"mops":100,"verified":true,"maxrss_kib":[1024]}
{"round":1,"kernel":"mg","class":"S","system":"dpvm","suite":"omp","np":1,"time_s":0.1,"mops":90,"verified":true,"maxrss_kib":[2048]}
{"round":1,"kernel":"mg","class":"S","system":"official","suite":"omp","np":4,"time_s":0.1,"mops":300,"verified":true,"maxrss_kib":[1024]}
{"round":1,"kernel":"mg","class":"S","system":"dpvm","suite":"omp","np":4,"time_s":0.1,"mops":360,"verified":true,"maxrss_kib":[3072]}
END
printf 'machine: 4 cores, Fake CPU, 8.0 GiB\n' >"$out/machine.txt"
`

// TestBenchNPBOfficialOMP runs the command with --omp and thread counts
// against a fake harness: the counts reach the harness, and the summary
// names the machine and has a line per thread count.
func TestBenchNPBOfficialOMP(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "run.sh")
	if err := os.WriteFile(script, []byte(fakeNPBHarnessOMP), 0o755); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := dpvm(t, "bench", "npb-official", "--script", script, "--src", dir, "--out", filepath.Join(dir, "res"),
		"--class", "S", "--kernels", "mg", "--omp", "--threads", "1, 4", "--dpvm-bin", "/bin/true")
	if code != 0 {
		t.Fatalf("status %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"--kernels mg --omp --threads 1,4",
		"- machine: 4 cores, Fake CPU, 8.0 GiB",
		"| MG | S | 1 | 0.90 | 2 vs 1 | 2.00 | 90 vs 100 | 0 |",
		"| MG | S | 4 | 1.20 | 3 vs 1 | 3.00 | 360 vs 300 | 0 |",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
}
