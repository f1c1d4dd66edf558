package cli

import (
	"strings"
	"testing"
)

// TestBenchScaleDetector: --detector takes master or swim, and anything
// else is a usage error before any daemon starts.
func TestBenchScaleDetector(t *testing.T) {
	code, _, errOut := dpvm(t, "bench", "scale", "--hosts", "2", "--tasks", "1", "--detector", "gossip")
	want := `dpvm: bench: bad option: --detector "gossip": want master or swim`
	if code != 2 || !strings.HasPrefix(errOut, want) || strings.Count(errOut, "\n") != 1 {
		t.Errorf("status %d, stderr %q, want one line starting %q", code, errOut, want)
	}
	code, out, _ := dpvm(t, "bench", "scale", "--help")
	if code != 0 || !strings.Contains(out, "--detector value") {
		t.Errorf("--help: status %d, lacks --detector:\n%s", code, out)
	}
}
