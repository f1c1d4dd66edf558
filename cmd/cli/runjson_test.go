package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dpvm/dpvm/examples"
)

// TestRunJSON: 'dpvm run --json' prints one object with the output lines,
// the exit status and the root's structured result, on an embedded machine
// of one host and of two.
func TestRunJSON(t *testing.T) {
	for _, hosts := range []string{"1", "2"} {
		code, out, errOut := dpvm(t, "run", "--json", "--hosts", hosts, "jacobi", "-n", "12", "-workers", "3", "-iters", "40")
		var r struct {
			Program string
			Status  int
			Output  []string
			Result  struct {
				Iterations int     `json:"iterations"`
				Sum        float64 `json:"sum"`
			}
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 || !strings.HasPrefix(errOut, "jacobi: 12×12") {
			t.Fatalf("--hosts %s: status %d, %v\nstdout:\n%s\nstderr:\n%s", hosts, code, err, out, errOut)
		}
		iters, _, sum := examples.JacobiSerial(12, 40, 10, 1e-6)
		if r.Program != "jacobi" || r.Status != 0 || len(r.Output) != 1 || !strings.HasPrefix(r.Output[0], "jacobi: 12×12") ||
			r.Result.Iterations != iters || r.Result.Sum != sum {
			t.Errorf("--hosts %s: %+v, want %d iterations, sum %v", hosts, r, iters, sum)
		}
	}
	code, out, _ := dpvm(t, "run", "--json", "hello", "-n", "2")
	if code != 0 || !strings.Contains(out, `"output": [`) || strings.Contains(out, `"result"`) {
		t.Errorf("hello --json: status %d\n%s", code, out)
	}
}
