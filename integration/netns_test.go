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

// newNetns creates n host namespaces on a bridge, host i with the
// addresses 10.213.0.i/24 and fd00:213::i/64 and a hosts file that names
// every host node<i>.dpvm.test (both addresses), or skips the test where
// namespaces are unavailable.
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
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1 localhost\n::1 localhost\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&hosts, "10.213.0.%d node%d.dpvm.test\nfd00:213::%d node%d.dpvm.test\n", i, i, i, i)
	}
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
		// nodad: the address is usable at once, not after duplicate
		// address detection.
		must("-n", h, "addr", "add", fmt.Sprintf("fd00:213::%d/64", i), "dev", in, "nodad")
		must("-n", h, "link", "set", in, "up")
		must("-n", h, "link", "set", "lo", "up")
		// `ip netns exec` mounts /etc/netns/NAME/hosts over /etc/hosts.
		dir := filepath.Join("/etc/netns", h)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte(hosts.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ns
}

func (ns *netns) remove() {
	for _, h := range ns.names {
		_ = ipCmd("netns", "del", h)
		_ = os.RemoveAll(filepath.Join("/etc/netns", h))
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
// really are separate hosts with their own addresses. Every daemon listens
// on the wildcard address, as on a real cluster: the master records each
// host at the address its connection came from, and the hosts know the
// master by the address they joined it by. Programs run across all three,
// every pair of hosts exchanges messages, and tasks move between the two
// hosts that are not the master, directly and through the shared
// directory.
func TestDaemonsInNetworkNamespaces(t *testing.T) {
	ns := newNetns(t, 3)
	dir := t.TempDir()
	key := filepath.Join(dir, "vm.key")
	shared := filepath.Join(dir, "shared")
	mkdir(t, shared)
	if code, _, errOut := dpvm(t, nil, "keygen", "--out", key); code != 0 {
		t.Fatal(errOut)
	}
	common := []string{"--listen", "0.0.0.0:7070", "--cluster-key", key, "--shared-dir", shared}
	master := ns.startIn(t, 1, "master", append([]string{"daemon", "--master"}, common...)...)
	master.waitFor(listening, true)
	for i := 2; i <= 3; i++ {
		h := ns.startIn(t, i, fmt.Sprintf("host %d", i), append([]string{"daemon", "--join", "10.213.0.1:7070",
			"--name", fmt.Sprintf("node%d", i)}, common...)...)
		h.waitFor(listening, true)
	}
	vm := nsVM{t: t, ns: ns, master: "10.213.0.1:7070", key: key}
	code, out, errOut := vm.run(1, "conf")
	for _, want := range []string{"10.213.0.1:7070", "node2", "10.213.0.2:7070", "node3", "10.213.0.3:7070"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("conf lacks %q: %d\n%s\n%s", want, code, out, errOut)
		}
	}
	if strings.Contains(out, "0.0.0.0") || strings.Contains(out, "[::]") {
		t.Fatalf("conf lists a wildcard address, which no peer can dial:\n%s", out)
	}
	vm.programs()
	// Moves between the two hosts that are not the master, half of them
	// through the shared directory; nothing may be lost, duplicated or
	// reordered.
	code, out, errOut = vm.run(2, "run", "stream", "--messages", "4000", "--moves", "12", "--via", "mixed", "--hosts", "node2,node3")
	m := regexp.MustCompile(`received 4000, lost 0, duplicated 0, out of order 0; moves made (\d+) of 12 \(direct [1-9]\d*, indirect [1-9]\d*, failed 0\)`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("stream between node2 and node3: %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := vm.run(3, "halt"); code != 0 {
		t.Fatalf("halt: %s", errOut)
	}
	if code := master.wait(); code != 0 {
		t.Errorf("master exited with %d", code)
	}
}

// TestDaemonsByNameOverIPv6 runs a virtual machine over IPv6 in network
// namespaces, every daemon known by a DNS name (each namespace's hosts
// file): hosts join the master by its name and advertise their own, which
// the daemons resolve when they dial.
func TestDaemonsByNameOverIPv6(t *testing.T) {
	ns := newNetns(t, 3)
	key := filepath.Join(t.TempDir(), "vm.key")
	if code, _, errOut := dpvm(t, nil, "keygen", "--out", key); code != 0 {
		t.Fatal(errOut)
	}
	master := ns.startIn(t, 1, "master", "daemon", "--master", "--listen", "[::]:7071", "--advertise", "node1.dpvm.test:7071", "--cluster-key", key)
	master.waitFor(listening, true)
	for i := 2; i <= 3; i++ {
		h := ns.startIn(t, i, fmt.Sprintf("host %d", i), "daemon", "--join", "node1.dpvm.test:7071", "--listen", "[::]:7071",
			"--advertise", fmt.Sprintf("node%d.dpvm.test:7071", i), "--name", fmt.Sprintf("node%d", i), "--cluster-key", key)
		h.waitFor(listening, true)
	}
	vm := nsVM{t: t, ns: ns, master: "node1.dpvm.test:7071", key: key}
	code, out, errOut := vm.run(2, "conf")
	for _, want := range []string{"node1.dpvm.test:7071", "node2.dpvm.test:7071", "node3.dpvm.test:7071"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("conf lacks %q: %d\n%s\n%s", want, code, out, errOut)
		}
	}
	vm.programs()
	// A literal IPv6 address names the master as well as its name does.
	if code, out, errOut := vm.runAt(3, "[fd00:213::1]:7071", "conf"); code != 0 || !strings.Contains(out, "node3") {
		t.Fatalf("conf by the master's IPv6 address: %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := vm.run(1, "halt"); code != 0 {
		t.Fatalf("halt: %s", errOut)
	}
	if code := master.wait(); code != 0 {
		t.Errorf("master exited with %d", code)
	}
}

// nsVM is a virtual machine in network namespaces, for running dpvm
// commands from any of them.
type nsVM struct {
	t           *testing.T
	ns          *netns
	master, key string
}

// run runs a dpvm command from host namespace i against the master.
func (v nsVM) run(i int, args ...string) (int, string, string) {
	return v.runAt(i, v.master, args...)
}

func (v nsVM) runAt(i int, master string, args ...string) (int, string, string) {
	v.t.Helper()
	// run's flags go before the program's name.
	args = append([]string{args[0], "--master", master, "--cluster-key", v.key}, args[1:]...)
	p := v.ns.startIn(v.t, i, "dpvm "+strings.Join(args, " "), args...)
	code := p.wait()
	return code, p.out.String(), p.err.String()
}

// programs runs hello and ring across the three hosts: ring passes its
// token between every pair of hosts.
func (v nsVM) programs() {
	v.t.Helper()
	code, out, errOut := v.run(2, "run", "hello", "-n", "6")
	if code != 0 || !regexp.MustCompile(`(?s)on node2.*on node3`).MatchString(out) {
		v.t.Fatalf("hello across namespaces: %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = v.run(3, "run", "ring", "-n", "9", "-laps", "5")
	if code != 0 || !strings.Contains(out, "45 hops") {
		v.t.Fatalf("ring across namespaces: %d\n%s\n%s", code, out, errOut)
	}
}
