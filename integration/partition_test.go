package integration

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// cut takes host namespace i's link to the bridge down (down false: up
// again): every packet of the host is lost, as in a network partition.
func (ns *netns) cut(t *testing.T, i int, down bool) {
	t.Helper()
	id := ns.names[i-1][strings.LastIndex(ns.names[i-1], "-")+1:]
	state := "up"
	if down {
		state = "down"
	}
	if err := ipCmd("-n", ns.names[i-1], "link", "set", fmt.Sprintf("dv%d-%s", i, id), state); err != nil {
		t.Fatal(err)
	}
}

// TestHostRejoinsAfterPartition cuts a host off from the master (its link
// down) for longer than the failure timeout: the master suspects it, then
// deletes it. When the link comes back, the host — which ran on, looking
// for its master — registers again under its host ID, and the virtual
// machine runs programs across it as before.
func TestHostRejoinsAfterPartition(t *testing.T) {
	ns := newNetns(t, 3)
	c := newCreds(t)
	// The master's detector: this test follows its suspicion and deletion
	// by heartbeats (swim's partitions: daemon's TestSwimPartitionedHostRejoins).
	common := []string{"--listen", "0.0.0.0:7072", "--heartbeat", "200ms", "--dead-after", "1s", "--detector", "master"}
	master := ns.startIn(t, 1, "master", append(append([]string{"daemon", "--master"}, c.master()...), common...)...)
	master.waitFor(listening, true)
	var hosts []*proc
	for i := 2; i <= 3; i++ {
		h := ns.startIn(t, i, fmt.Sprintf("host %d", i), append([]string{"daemon", "--join", "10.213.0.1:7072", "--name", fmt.Sprintf("node%d", i),
			"--master-grace", "2m"}, append(c.host(fmt.Sprintf("node%d", i)), common...)...)...)
		h.waitFor(listening, true)
		hosts = append(hosts, h)
	}
	vm := nsVM{t: t, ns: ns, master: "10.213.0.1:7072", creds: c}
	code, out, errOut := vm.run(1, "conf")
	if code != 0 || !strings.Contains(out, "node3") || !strings.Contains(out, "failure detection: a silent host is suspected after") {
		t.Fatalf("conf: %d\n%s\n%s", code, out, errOut)
	}

	ns.cut(t, 3, true)
	master.waitFor(regexp.MustCompile(`msg="host suspected".*peer_name=node3`), true)
	master.waitFor(regexp.MustCompile(`msg="host deleted".*peer_name=node3 reason="no heartbeat for`), true)
	hosts[1].waitFor(regexp.MustCompile(`lost the master daemon; running on`), true)
	code, out, errOut = vm.run(1, "conf")
	if code != 0 || strings.Contains(out, "node3") {
		t.Fatalf("conf while node3 is cut off: %d\n%s\n%s", code, out, errOut)
	}

	ns.cut(t, 3, false)
	hosts[1].waitFor(regexp.MustCompile(`registered again with the master, which had deleted this host`), true)
	master.waitFor(regexp.MustCompile(`msg="host rejoined the virtual machine".*peer_name=node3`), true)
	code, out, errOut = vm.run(1, "conf")
	if code != 0 || !strings.Contains(out, "node3") || strings.Contains(out, "(suspected") || strings.Contains(out, "(rejoining)") {
		t.Fatalf("conf after the heal: %d\n%s\n%s", code, out, errOut)
	}
	vm.programs()
	if code, _, errOut := vm.run(2, "halt"); code != 0 {
		t.Fatalf("halt: %s", errOut)
	}
	for _, p := range append(hosts, master) {
		if code := p.wait(); code != 0 {
			t.Errorf("%s exited with %d", p.name, code)
		}
	}
}
