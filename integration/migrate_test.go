package integration

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestMigrationOfProcesses runs the stream program on a master and three
// host daemons started as separate processes with a shared directory: a
// producer streams numbered messages to a consumer on another host while
// both are migrated back and forth among the hosts a few hundred times,
// directly and indirectly, and one destination daemon is killed in the
// middle of a migration (it exits as a killed process would when asked to
// restore the task). The consumer must receive every number once, in
// order.
func TestMigrationOfProcesses(t *testing.T) {
	dir := t.TempDir()
	c := newCreds(t)
	shared := filepath.Join(dir, "shared")
	mkdir(t, shared)
	common := []string{"--listen", "127.0.0.1:0", "--shared-dir", shared,
		"--heartbeat", "100ms", "--dead-after", "1s"}
	master := start(t, "master", nil, append(append([]string{"daemon", "--master"}, c.master()...), common...)...)
	addr := master.waitFor(listening, true)[1]
	var hosts []*proc
	for i := 2; i <= 4; i++ {
		var env []string
		if i == 4 {
			env = []string{"DPVM_FAULT=exit-on-restore"} // the destination that dies mid-migration
		}
		h := start(t, fmt.Sprintf("host %d", i), env, append(append([]string{"daemon", "--join", addr}, c.host(fmt.Sprintf("h%d", i))...), common...)...)
		h.waitFor(listening, true)
		hosts = append(hosts, h)
	}
	const messages, moves = 20000, 300
	code, out, errOut := dpvm(t, []string{c.env()}, "run", "--master", addr,
		"stream", "--messages", strconv.Itoa(messages), "--moves", strconv.Itoa(moves), "--via", "mixed")
	t.Logf("%s", strings.TrimSpace(out))
	if code != 0 {
		t.Fatalf("stream: status %d\n%s\n%s", code, out, errOut)
	}
	m := regexp.MustCompile(`received (\d+), lost (\d+), duplicated (\d+), out of order (\d+); moves made (\d+) of (\d+) \(direct (\d+), indirect (\d+), failed (\d+)\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no verdict in the output:\n%s", out)
	}
	n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	if n(1) != messages || n(2) != 0 || n(3) != 0 || n(4) != 0 {
		t.Fatalf("stream lost, duplicated or reordered messages: %s", m[0])
	}
	if n(5) < moves/2 || n(7) == 0 || n(8) == 0 {
		t.Fatalf("too few moves were made, or not in both modes: %s", m[0])
	}
	// The faulty destination died in a migration, which was aborted.
	if code := hosts[2].wait(); code == 0 {
		t.Fatal("the faulty host did not die")
	}
	if !strings.Contains(hosts[2].err.String(), "fault injected: exiting in the middle of a migration") {
		t.Fatalf("the faulty host died of something else:\n%s", hosts[2].err.String())
	}
	if n(9) == 0 {
		t.Fatalf("no move failed, though a destination died: %s", m[0])
	}
	t.Logf("%d messages received once and in order through %d moves (%d direct, %d indirect); %d moves failed, one with a destination killed mid-migration",
		n(1), n(5), n(7), n(8), n(9))
	if code, _, errOut := dpvm(t, []string{"DPVM_MASTER=" + addr, c.env()}, "halt"); code != 0 {
		t.Fatal(errOut)
	}
}
