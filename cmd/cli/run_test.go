package cli

import (
	"bytes"
	"strings"
	"testing"
)

// dpvm runs the command line args and returns its exit status and output.
func dpvm(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(append([]string{"dpvm"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRunHello(t *testing.T) {
	code, out, errOut := dpvm(t, "run", "hello", "-n", "3")
	if code != 0 || !strings.HasPrefix(out, "t1:1: 3 children said hello:\n") || errOut != "" {
		t.Fatalf("status %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

func TestRunEveryExample(t *testing.T) {
	for _, args := range [][]string{
		{"pingpong", "-n", "50"},
		{"ring", "-n", "3", "-laps", "2"},
		{"pi", "-samples", "10000"},
	} {
		code, out, errOut := dpvm(t, append([]string{"run"}, args...)...)
		if code != 0 || !strings.HasPrefix(out, args[0]+":") {
			t.Errorf("%v: status %d\nstdout:\n%s\nstderr:\n%s", args, code, out, errOut)
		}
	}
}

func TestRunErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "nope"}, `dpvm: run: unknown program "nope"; known programs: `},
		{[]string{"run"}, "dpvm: run: no program named"},
		{[]string{"run", "hello", "-x"}, "dpvm: run hello: flag provided but not defined: -x (see 'dpvm run hello --help')"},
		{[]string{"run", "hello", "-n", "0"}, "dpvm: run hello: -n must be at least 1, got 0"},
		{[]string{"run", "--bogus", "hello"}, "dpvm: flag provided but not defined: -bogus (see 'dpvm run --help')"},
		{[]string{"nosuchcommand"}, "dpvm: "},
	}
	for _, c := range cases {
		code, out, errOut := dpvm(t, c.args...)
		if code == 0 {
			t.Errorf("%v: status 0", c.args)
		}
		if !strings.HasPrefix(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: stderr %q, want one line starting %q (stdout %q)", c.args, errOut, c.want, out)
		}
	}
}

func TestRunHelp(t *testing.T) {
	code, out, _ := dpvm(t, "run", "hello", "--help")
	if code != 0 || !strings.Contains(out, "Usage: dpvm run [run flags] hello [flags]") || !strings.Contains(out, "number of children") {
		t.Errorf("program help: status %d\n%s", code, out)
	}
	code, out, _ = dpvm(t, "run", "--help")
	if code != 0 || !strings.Contains(out, "--hosts") {
		t.Errorf("run help: status %d\n%s", code, out)
	}
	code, out, _ = dpvm(t, "run", "--list")
	for _, p := range []string{"hello", "pingpong", "ring", "pi"} {
		if code != 0 || !strings.Contains(out, p+" ") {
			t.Errorf("--list lacks %s:\n%s", p, out)
		}
	}
}

// TestRunHosts runs a program on an embedded virtual machine of three
// daemons talking QUIC over loopback, and refuses a machine of no hosts.
func TestRunHosts(t *testing.T) {
	code, out, errOut := dpvm(t, "run", "--hosts", "3", "hello", "-n", "3")
	for _, want := range []string{"hello from t1:2 on h1", "hello from t2:1 on h2", "hello from t3:1 on h3"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("status %d, missing %q\nstdout:\n%s\nstderr:\n%s", code, want, out, errOut)
		}
	}
	code, _, errOut = dpvm(t, "run", "--hosts", "0", "hello")
	if code == 0 || !strings.Contains(errOut, "need at least one") {
		t.Errorf("--hosts 0: status %d, stderr %q", code, errOut)
	}
}
