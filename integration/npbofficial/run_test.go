package npbofficial

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHarnessClassS runs the whole harness, `dpvm bench npb-official`, on
// class S with one round: it builds the official kernels from the source in
// DPVM_NPB_SRC (dpvm does not ship it; .ci/run sets it when the source is
// there) and checks that every kernel ran and verified on both sides, with
// its peak memory measured.
func TestHarnessClassS(t *testing.T) {
	src := os.Getenv("DPVM_NPB_SRC")
	if src == "" {
		t.Skip("DPVM_NPB_SRC is not set: no official NPB 3.4 source to compare with")
	}
	if testing.Short() {
		t.Skip("-short: builds the official NPB kernels")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "dpvm")
	build := exec.Command("go", "build", "-o", bin, "github.com/dpvm/dpvm/cmd/dpvm")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	script, err := filepath.Abs("run.sh")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "bench", "npb-official", "--src", src, "--class", "S", "--rounds", "1",
		"--out", filepath.Join(dir, "out"), "--script", script, "--json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var rep struct {
		Kernels []Row `json:"kernels"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, stdout.String())
	}
	if len(rep.Kernels) != 5 {
		t.Fatalf("%d kernels, want 5:\n%s", len(rep.Kernels), stdout.String())
	}
	for _, r := range rep.Kernels {
		if len(r.Pairs) != 2 {
			t.Errorf("%s: %d task counts, want 2", r.Kernel, len(r.Pairs))
		}
		for _, p := range r.Pairs {
			if p.Rounds != 1 || p.Failed != 0 || !(p.Ratio.Median > 0) || !(p.DpvmMiB.Median > 0) || p.OfficialMiB.N != 1 {
				t.Errorf("%s np %d: %+v", r.Kernel, p.NP, p)
			}
		}
	}
}

// TestHarnessRejectsThreads runs the harness with bad --omp and --threads
// arguments: it refuses them before it looks for the official source.
func TestHarnessRejectsThreads(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--threads", "2"}, "--threads needs --omp"},
		{[]string{"--omp", "--threads", "0"}, "--threads: 0 is not a thread count"},
		{[]string{"--omp", "--threads", "2,x"}, "--threads: x is not a thread count"},
		{[]string{"--omp", "--threads", "2048"}, "--threads: 2048 is above 1024"},
		{[]string{"--omp"}, "no NPB3.4-MPI beside"}, // the thread counts pass; the source is missing
	} {
		cmd := exec.Command("bash", append([]string{"run.sh", "--src", dir, "--dpvm-bin", "/bin/true", "--out", filepath.Join(dir, "out")}, c.args...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), c.want) {
			t.Errorf("%v: %v, output %q, want status 1 and %q", c.args, err, out, c.want)
		}
	}
}
