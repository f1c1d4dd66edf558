package cli

import (
	"bytes"
	"context"
	"github.com/dpvm/dpvm/daemon"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/examples/npb"
)

func TestNPBCommandText(t *testing.T) {
	var out, errb bytes.Buffer
	if st := Run([]string{"dpvm", "npb", "is", "--class", "S", "--np", "2"}, &out, &errb); st != 0 {
		t.Fatalf("status %d, stderr %q", st, errb.String())
	}
	for _, want := range []string{"IS Benchmark Completed", "Class           =            S", "Tasks           =            2", "Hosts           =            1", "Mop/s total", "Partial checks  =           50", "Verification    =   SUCCESSFUL"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if errb.Len() != 0 {
		t.Errorf("stderr %q, want nothing (not a terminal)", errb.String())
	}
}

func TestNPBCommandJSON(t *testing.T) {
	var out, errb bytes.Buffer
	// Flags after the kernel name, as users type them.
	if st := Run([]string{"dpvm", "npb", "mg", "--json", "--np", "2"}, &out, &errb); st != 0 {
		t.Fatalf("status %d, stderr %q", st, errb.String())
	}
	if strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("want one JSON line, got %q", out.String())
	}
	rep, err := npb.ParseReport(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Kernel != "mg" || rep.Class != "S" || rep.NP != 2 || rep.Hosts != 1 || rep.Verified != npb.Successful || rep.Values.Rnm2 == nil || rep.Mops <= 0 {
		t.Fatalf("report %+v", rep)
	}
}

func TestNPBCommandErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"dpvm", "npb", "mg", "--np", "3"}, "power of two"},
		{[]string{"dpvm", "npb", "ep", "--class", "Z"}, "unknown NPB class"},
		{[]string{"dpvm", "npb", "ep", "--hosts", "0"}, "at least one host"},
		{[]string{"dpvm", "npb", "ep", "extra"}, `npb ep: unexpected argument "extra"`},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		if st := Run(c.args, &out, &errb); st != 2 {
			t.Errorf("%v: status %d, want 2", c.args, st)
		}
		if !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: stderr %q lacks %q", c.args, errb.String(), c.want)
		}
	}
}

// TestNPBOnRunningVM runs a kernel on a running virtual machine through its
// master (--master), its workers spread over the hosts.
func TestNPBOnRunningVM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	vm, err := daemon.StartLocalVM(ctx, 3, daemon.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Halt(10 * time.Second)
	key := filepath.Join(t.TempDir(), "vm.key")
	if err := vm.Key.WriteFile(key); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if st := Run([]string{"dpvm", "npb", "is", "--class", "S", "--np", "4", "--json", "--master", vm.Master().Addr(), "--cluster-key", key}, &out, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	rep, err := npb.ParseReport(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Hosts != 3 || rep.NP != 4 || rep.Verified != npb.Successful {
		t.Fatalf("report %+v", rep)
	}
}
