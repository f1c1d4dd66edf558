package npbofficial

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

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
