package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConsoleAddErrors checks that the console's add refuses bad host
// lines and reports a host it cannot reach, one line each, and that the
// virtual machine is left as it was.
func TestConsoleAddErrors(t *testing.T) {
	vm, keyFile, _ := startVM(t, 1)
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	creds := t.TempDir()
	if err := vm.Cluster.WriteDir(creds); err != nil {
		t.Fatal(err)
	}
	script := strings.Join([]string{
		"add",
		"add node9 master",
		"add node9 bogus=1",
		"add node9 port=70000",
		"add node9 --ssh false --wait 5s",
		"add node9 --ssh false --wait 5s --credentials " + creds + " --remote-dir " + t.TempDir(),
		"add node9 --ssh '' ",
		"conf",
	}, "\n") + "\n"
	status, out, errOut := dpvmStdin(t, script, "console", "--master", vm.Master().Addr(), "--credential", keyFile)
	want := []string{
		"add: no host named: give HOST",
		"add: a virtual machine has one master: this one",
		`add: unknown option "bogus"`,
		"add: port=70000: out of range 1-65535",
		"add: no credentials: give --credentials DIR",
		"add: node9: copy its credential to ",
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
	// The header, the master, and how failures are detected.
	if strings.Count(out, "\n") != 3 || strings.Contains(out, "node9") || !strings.Contains(out, "failure detection: ") {
		t.Errorf("conf after the failed adds:\n%s", out)
	}
}

// TestUpDownErrors checks dpvm up's and down's refusals: each one line
// with its status, nothing started, nothing recorded.
func TestUpDownErrors(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))
	t.Setenv("DPVM_CLUSTER_KEY", "")
	key := filepath.Join(dir, "creds")
	if code, _, errOut := dpvmStdin(t, "", "keygen", "--out", key); code != 0 {
		t.Fatal(errOut)
	}
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte("n1\nn2 cores=2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("n1\nn2 cores=x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"up"}, 2, "dpvm: up: give one HOSTFILE, got 0 arguments"},
		{[]string{"up", filepath.Join(dir, "none")}, 2, "dpvm: up: open "},
		{[]string{"up", bad, "--credentials", key}, 2, "dpvm: up: " + bad + `:2: cores=x: strconv.Atoi: parsing "x"`},
		{[]string{"up", hosts}, 2, "dpvm: up: no credentials: give --credentials DIR"},
		{[]string{"up", hosts, "--cluster-key", key}, 2, "dpvm cert upgrade"},
		{[]string{"up", hosts, "--remote-credentials", "creds"}, 2, "dpvm: up: give --credentials DIR: up's own client needs DIR/admin.pem"},
		{[]string{"up", hosts, "--remote-credentials", "creds", "--credentials", key, "--ssh", "false"}, 1, "dpvm: up: n1: start the daemon: "},
		{[]string{"up", hosts, "--credentials", key, "--daemon-port", "0"}, 2, "dpvm: up: --daemon-port 0: out of range"},
		{[]string{"up", hosts, "--credentials", key, "--ssh", "false", "--remote-dir", dir}, 1, "dpvm: up: n1: copy its credential to "},
		{[]string{"down"}, 1, "dpvm: down: no virtual machine started by 'dpvm up' is recorded in "},
		{[]string{"down", hosts, "extra"}, 2, "dpvm: down: give at most one HOSTFILE, got 2 arguments"},
	} {
		code, out, errOut := dpvmStdin(t, "", c.args...)
		if code != c.code || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: status %d, stdout %q, stderr %q; want %d and %q", c.args, code, out, errOut, c.code, c.want)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "state", "dpvm", "*")); len(files) != 0 {
		t.Errorf("failed ups recorded %v", files)
	}
	// A hostfile recorded as up is not started again.
	file, err := findStateFile("", hosts)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeUpState(file, upState{Hostfile: hosts, Master: "n1:7070"}); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := dpvmStdin(t, "", "up", hosts, "--credentials", key)
	if code != 1 || !strings.Contains(errOut, "is recorded as up") {
		t.Errorf("up of a recorded hostfile: %d %q", code, errOut)
	}
}
