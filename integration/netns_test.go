package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// netns is a set of network namespaces joined by a bridge: separate hosts
// with their own addresses on one machine. The addresses live only inside
// namespaces this test creates; nothing is routed out of them.
type netns struct {
	t     *testing.T
	names []string // host namespaces
	br    string   // the bridge's namespace
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// newNetns creates n host namespaces with addresses 10.213.0.1…n on a
// bridge, or skips the test where namespaces are unavailable.
func newNetns(t *testing.T, n int) *netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root: skipping the multi-namespace test")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no 'ip' command (iproute2): skipping the multi-namespace test")
	}
	id := fmt.Sprint(os.Getpid() % 100000)
	ns := &netns{t: t, br: "dpvm-br-" + id}
	if err := ipCmd("netns", "add", ns.br); err != nil {
		t.Skipf("cannot create network namespaces here (%v): skipping the multi-namespace test", err)
	}
	t.Cleanup(ns.remove)
	must := func(args ...string) {
		if err := ipCmd(args...); err != nil {
			t.Fatal(err)
		}
	}
	must("-n", ns.br, "link", "add", "br0", "type", "bridge")
	must("-n", ns.br, "link", "set", "br0", "up")
	for i := 1; i <= n; i++ {
		h := fmt.Sprintf("dpvm-h%d-%s", i, id)
		must("netns", "add", h)
		ns.names = append(ns.names, h)
		in, out := fmt.Sprintf("dv%d-%s", i, id), fmt.Sprintf("db%d-%s", i, id)
		must("link", "add", in, "type", "veth", "peer", "name", out)
		must("link", "set", in, "netns", h)
		must("link", "set", out, "netns", ns.br)
		must("-n", ns.br, "link", "set", out, "master", "br0")
		must("-n", ns.br, "link", "set", out, "up")
		must("-n", h, "addr", "add", fmt.Sprintf("10.213.0.%d/24", i), "dev", in)
		must("-n", h, "link", "set", in, "up")
		must("-n", h, "link", "set", "lo", "up")
	}
	return ns
}

func (ns *netns) remove() {
	for _, h := range ns.names {
		_ = ipCmd("netns", "del", h)
	}
	_ = ipCmd("netns", "del", ns.br)
}

// in returns the arguments that run dpvm inside host namespace i (from 1).
func (ns *netns) in(i int, args ...string) []string {
	return append([]string{"netns", "exec", ns.names[i-1], dpvmBin}, args...)
}

// startIn starts a dpvm process inside host namespace i.
func (ns *netns) startIn(t *testing.T, i int, name string, args ...string) *proc {
	t.Helper()
	return startCmd(t, name, exec.Command("ip", ns.in(i, args...)...))
}

// TestDaemonsInNetworkNamespaces puts the master and two hosts each in its
// own network namespace, joined by veth pairs on a bridge, so the daemons
// really are separate hosts with their own addresses, and runs programs
// across them.
func TestDaemonsInNetworkNamespaces(t *testing.T) {
	ns := newNetns(t, 3)
	key := filepath.Join(t.TempDir(), "vm.key")
	if code, _, errOut := dpvm(t, nil, "keygen", "--out", key); code != 0 {
		t.Fatal(errOut)
	}
	master := ns.startIn(t, 1, "master", "daemon", "--master", "--listen", "10.213.0.1:7070", "--cluster-key", key)
	master.waitFor(listening, true)
	for i := 2; i <= 3; i++ {
		h := ns.startIn(t, i, fmt.Sprintf("host %d", i), "daemon", "--join", "10.213.0.1:7070",
			"--listen", fmt.Sprintf("10.213.0.%d:7070", i), "--name", fmt.Sprintf("node%d", i), "--cluster-key", key)
		h.waitFor(listening, true)
	}
	run := func(args ...string) (int, string, string) {
		p := ns.startIn(t, 1, "dpvm "+strings.Join(args, " "), append(args, "--master", "10.213.0.1:7070", "--cluster-key", key)...)
		code := p.wait()
		return code, p.out.String(), p.err.String()
	}
	code, out, errOut := run("conf")
	for _, want := range []string{"10.213.0.1:7070", "node2", "10.213.0.2:7070", "node3", "10.213.0.3:7070"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("conf lacks %q: %d\n%s\n%s", want, code, out, errOut)
		}
	}
	// run's flags go before the program's name.
	p := ns.startIn(t, 1, "run hello", "run", "--master", "10.213.0.1:7070", "--cluster-key", key, "hello", "-n", "6")
	if code := p.wait(); code != 0 || !regexp.MustCompile(`(?s)on node2.*on node3`).MatchString(p.out.String()) {
		t.Fatalf("hello across namespaces: %d\n%s\n%s", code, p.out.String(), p.err.String())
	}
	p = ns.startIn(t, 1, "run ring", "run", "--master", "10.213.0.1:7070", "--cluster-key", key, "ring", "-n", "9", "-laps", "5")
	if code := p.wait(); code != 0 || !strings.Contains(p.out.String(), "45 hops") {
		t.Fatalf("ring across namespaces: %d\n%s\n%s", code, p.out.String(), p.err.String())
	}
	if code, _, errOut := run("halt"); code != 0 {
		t.Fatalf("halt: %s", errOut)
	}
	if code := master.wait(); code != 0 {
		t.Errorf("master exited with %d", code)
	}
}
