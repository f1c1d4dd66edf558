package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/dpvm/dpvm/daemon/bench/npbofficial"
)

// TestNPBOfficialClassS runs the whole harness, `dpvm bench npb-official`,
// on class S with one round, from a directory outside the repository (the
// binary carries its script): it builds the official kernels from the
// source in DPVM_NPB_SRC (dpvm does not ship it; .ci/run sets it when the
// source is there) and checks that every kernel ran and verified on both
// sides, with its peak memory measured.
func TestNPBOfficialClassS(t *testing.T) {
	src := os.Getenv("DPVM_NPB_SRC")
	if src == "" {
		t.Skip("DPVM_NPB_SRC is not set: no official NPB 3.4 source to compare with")
	}
	if testing.Short() {
		t.Skip("-short: builds the official NPB kernels")
	}
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(dpvmBin, "bench", "npb-official", "--src", src, "--class", "S", "--rounds", "1",
		"--out", filepath.Join(dir, "out"), "--json")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var rep struct {
		Kernels []npbofficial.Row `json:"kernels"`
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
