package pvm

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpvm/dpvm/task"
)

// The ports run on embedded virtual machines in
// integration/examples/pvm_test.go: they need the daemon, which examples
// never import.

// TestGoldenFromPVM checks that each golden file is the normalised output
// of the original program under PVM 3.4.6.
func TestGoldenFromPVM(t *testing.T) {
	for _, c := range Captures {
		capture := readFile(t, filepath.Join("testdata", "pvm3", c.File))
		if got, want := Normalise(capture, c.Console), readFile(t, filepath.Join("testdata", c.Golden)); got != want {
			t.Errorf("%s normalised:\n%s\nwant (%s):\n%s", c.File, got, c.Golden, want)
		}
	}
}

// TestNormalise: what differs between runs is replaced, what the programs
// compute is kept.
func TestNormalise(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"i'm t40002\nfrom t40003: hello, world from vm\n", "i'm T1\nfrom T2: hello, world from HOST\n"},
		{"i'm t1:1\nfrom t1:2: hello, world from h2\n", "i'm T1\nfrom T2: hello, world from HOST\n"},
		{"262160 -> 262161 -> 262160 \n", "T1 -> T2 -> T1 \n"},
		{"Message size 1000000\n 3       17\n12   5   6000\nRTT Avg uSec 14\n     100.000000   7.142857\n",
			"Message size 1000000\n 3 <n>\n12 <n> <n>\nRTT Avg uSec <n>\n    <n> <n>\n"},
		{"x\nI got 3\nI got 1\ny\nI got 2\n", "x\nI got 1\nI got 3\ny\nI got 2\n"},
		{" The 1-Norm is 5050  \n", " The 1-Norm is 5050  \n"},
	} {
		if got := Normalise(c.in, false); got != c.want {
			t.Errorf("Normalise(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	console := "pvm> spawn -> x\n[1]\npvm> [1:t4000a] EOF\n[1:t40010] token ring done\n[1] finished\n"
	if got := Normalise(console, true); got != "token ring done\n" {
		t.Errorf("console capture normalised to %q", got)
	}
}

// TestEveryProgramHasAGolden: each registered port has a capture of its
// original.
func TestEveryProgramHasAGolden(t *testing.T) {
	captured := map[string]bool{}
	for _, c := range Captures {
		captured[c.Program] = true
	}
	ports := 0
	for _, p := range task.Programs() {
		if !strings.HasPrefix(p.Name, "pvm.") {
			continue
		}
		ports++
		if !captured[p.Name] {
			t.Errorf("%s has no capture of PVM's original in Captures", p.Name)
		}
	}
	if ports != 5 {
		t.Errorf("%d programs named pvm.*, want the 5 ports", ports)
	}
}

// TestProgramFlagErrors: bad flag values are refused with an error.
func TestProgramFlagErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"pvm.spmd", []string{"-n", "0"}},
		{"pvm.spmd", []string{"-n", "33"}},
		{"pvm.gexample", []string{"-nproc", "0"}},
		{"pvm.gexample", []string{"-nproc", "33"}},
		{"pvm.gexample", []string{"-dimension", "0"}},
		{"pvm.timing", []string{"-reps", "0"}},
	} {
		p, ok := task.LookupProgram(c.name)
		if !ok {
			t.Fatalf("%s is not registered", c.name)
		}
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		build := p.Setup(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if _, err := build(fs.Args()); err == nil {
			t.Errorf("%s %v accepted", c.name, c.args)
		}
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
