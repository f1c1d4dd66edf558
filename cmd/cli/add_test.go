package cli

import (
	"strings"
	"testing"
)

// TestConsoleAddErrors checks that the console's add refuses bad host
// lines and reports a host it cannot reach, one line each, and that the
// virtual machine is left as it was.
func TestConsoleAddErrors(t *testing.T) {
	vm, keyFile, _ := startVM(t, 1)
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	script := strings.Join([]string{
		"add",
		"add node9 master",
		"add node9 bogus=1",
		"add node9 port=70000",
		"add node9 --ssh false --wait 5s --remote-dir " + t.TempDir(),
		"add node9 --ssh '' ",
		"conf",
	}, "\n") + "\n"
	status, out, errOut := dpvmStdin(t, script, "console", "--master", vm.Master().Addr(), "--cluster-key", keyFile)
	want := []string{
		"add: no host named (see 'help add')",
		"add: a virtual machine has one master: this one",
		`add: unknown option "bogus"`,
		"add: port=70000: out of range 1-65535",
		"add: node9: copy the cluster key to ",
		`add: --ssh "": want a command`,
	}
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	if status != 1 || len(lines) != len(want) {
		t.Fatalf("status %d, stderr:\n%s\nwant %d lines", status, errOut, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) && !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %q, want %q", i+1, lines[i], w)
		}
	}
	if strings.Count(out, "\n") != 2 || strings.Contains(out, "node9") {
		t.Errorf("conf after the failed adds:\n%s", out)
	}
}
