package cli

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/pki"
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
	if err := pki.WriteCredential(key, vm.Cluster.Admin); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if st := Run([]string{"dpvm", "npb", "is", "--class", "S", "--np", "4", "--json", "--master", vm.Master().Addr(), "--credential", key}, &out, &errb); st != 0 {
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

// TestNPBClassesSWVerify runs every kernel on classes S and W through the
// command: each verifies against the official reference values, and the
// command exits 0.
func TestNPBClassesSWVerify(t *testing.T) {
	for _, k := range npb.Kernels {
		for _, class := range []string{"S", "W"} {
			st, out, errOut := dpvmRun(t, "npb", k, "--class", class, "--np", "2", "--json")
			if st != 0 {
				t.Fatalf("npb %s class %s: status %d: %s", k, class, st, errOut)
			}
			rep, err := npb.ParseReport([]byte(out))
			if err != nil {
				t.Fatalf("npb %s class %s: %v", k, class, err)
			}
			if rep.Verified != npb.Successful || rep.Reason != "" || rep.Class != class || rep.Kernel != k {
				t.Fatalf("npb %s class %s: report %+v", k, class, rep)
			}
		}
	}
}

// TestNPBUnverifiableRunFails runs MG class S for 2 iterations instead of 4,
// which the reference values do not cover: the command says why and exits
// 1, and with --no-verify it exits 0 with the same verdict in its report.
func TestNPBUnverifiableRunFails(t *testing.T) {
	st, out, errOut := dpvmRun(t, "npb", "mg", "--class", "S", "--iterations", "2")
	if st != 1 {
		t.Fatalf("status %d, want 1; stderr %q", st, errOut)
	}
	for _, want := range []string{"Verification    = NOT PERFORMED", "Reason          = class S's reference values are for 4 iterations, the run did 2"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "verification NOT PERFORMED: class S's reference values are for 4 iterations") || !strings.Contains(errOut, "--no-verify") {
		t.Errorf("stderr %q does not say why and how to accept the run", errOut)
	}
	st, out, errOut = dpvmRun(t, "npb", "mg", "--class", "S", "--iterations", "2", "--no-verify", "--json")
	if st != 0 {
		t.Fatalf("--no-verify: status %d, stderr %q", st, errOut)
	}
	rep, err := npb.ParseReport([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Iterations != 2 || rep.Verified != npb.NotPerformed || !strings.Contains(rep.Reason, "for 4 iterations") || rep.Values.Rnm2 == nil {
		t.Fatalf("--no-verify: report %+v", rep)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"npb", "ep", "--iterations", "2"}, "only cg, mg and ft take an iteration count"},
		{[]string{"npb", "cg", "--iterations", "0"}, "at least one iteration"},
	} {
		if st, _, errOut := dpvmRun(t, c.args...); st != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: status %d, stderr %q, want 2 and %q", c.args, st, errOut, c.want)
		}
	}
}

// TestNPBVerdict checks the command's outcome for each verdict.
func TestNPBVerdict(t *testing.T) {
	cases := []struct {
		verified, reason string
		noVerify         bool
		status           int
	}{
		{npb.Successful, "", false, 0},
		{npb.Unsuccessful, "zeta = 1, reference 2", false, 1},
		{npb.Unsuccessful, "zeta = 1, reference 2", true, 1},
		{npb.NotPerformed, "the report has no zeta", false, 1},
		{npb.NotPerformed, "the report has no zeta", true, 0},
	}
	for _, c := range cases {
		err := npbVerdict("cg", &npb.Report{Kernel: "cg", Class: "B", Verified: c.verified, Reason: c.reason}, c.noVerify)
		st := 0
		if err != nil {
			var ec cli.ExitCoder
			if !errors.As(err, &ec) {
				t.Fatalf("%s: %v is not an exit status", c.verified, err)
			}
			st = ec.ExitCode()
			if !strings.Contains(err.Error(), c.reason) || !strings.Contains(err.Error(), "class B") {
				t.Errorf("%s: %q lacks the class or the reason", c.verified, err)
			}
		}
		if st != c.status {
			t.Errorf("%s, --no-verify %t: status %d, want %d", c.verified, c.noVerify, st, c.status)
		}
	}
}

// TestNPBClassDMemory: a class D run says how much memory it needs before
// it starts, and is refused (status 1) when the machine has less available.
func TestNPBClassDMemory(t *testing.T) {
	defer func(f func() (int64, error)) { npbMemAvailable = f }(npbMemAvailable)
	npbMemAvailable = func() (int64, error) { return 1 << 30, nil }
	need, err := npb.MemoryNeed("ft", "D", 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	st, _, errOut := dpvmRun(t, "npb", "ft", "--class", "D", "--np", "2")
	if st != 1 {
		t.Fatalf("status %d, want 1; stderr %q", st, errOut)
	}
	announce := "npb ft class D np 2: needs about " + npb.FormatBytes(need) + " of memory; /proc/meminfo reports 1.0 GiB available\n"
	if !strings.HasPrefix(errOut, announce) {
		t.Errorf("stderr %q does not start with %q", errOut, announce)
	}
	if !strings.Contains(errOut, "not enough memory") {
		t.Errorf("stderr %q does not refuse the run", errOut)
	}
	// A small run says nothing about its memory.
	var b bytes.Buffer
	root, err := npb.NewRoot("ep", "S", 1)
	if err != nil {
		t.Fatal(err)
	}
	announceMemory(&b, root, 1, npbMemAvailable)
	if b.Len() != 0 {
		t.Errorf("class S announced %q", b.String())
	}
}
