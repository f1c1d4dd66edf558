package cli

import (
	"strings"
	"testing"

	"github.com/dpvm/dpvm/daemon"
)

// TestConfSpeed: conf shows a calibrated speed to three digits, not as
// the raw float.
func TestConfSpeed(t *testing.T) {
	var b strings.Builder
	hosts := []daemon.HostInfo{{Name: "n1", Addr: "10.0.0.1:7070", Speed: 0.584990766007926, Cores: 2}, {Name: "n2", Addr: "10.0.0.2:7070", Speed: 1, Cores: 2}}
	if err := printHosts(&b, hosts, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("conf:\n%s", b.String())
	}
	if f := strings.Fields(lines[1]); len(f) < 5 || f[4] != "0.585" {
		t.Errorf("n1's speed: %q", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) < 5 || f[4] != "1" {
		t.Errorf("n2's speed: %q", lines[2])
	}
}
