package integration

import (
	"encoding/json"
	"fmt"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// TestMasterRecoveryOfProcesses kills the master daemon process (SIGKILL)
// while pi runs on the hosts; the hosts run on, a master started again at
// the same address with --recover takes them back, pi's result reaches the
// new master, and programs run across the hosts again.
func TestMasterRecoveryOfProcesses(t *testing.T) {
	const samples = 1_000_000_000
	want := make(chan int64, 1)
	go func() { want <- piHits(samples) }()
	v := startVM(t, 2, "--master-grace", "60s", "--no-tasks", "--dead-after", "1s")
	// pi's root and workers on h2 and h3: the master hosts no tasks.
	code, out, errOut := dpvm(t, v.env, "spawn", "pi", "--host", "h2", "--", "-workers", "4", "-samples", fmt.Sprint(samples))
	if code != 0 {
		t.Fatalf("spawn: %d %s %s", code, out, errOut)
	}
	// Once every worker has joined pi's group (the group server is the
	// master's), the master dies.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, out, _ := dpvm(t, v.env, "ps", "--json")
		var ts []struct{ Type string }
		if code == 0 && json.Unmarshal([]byte(out), &ts) == nil && len(ts) == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pi did not start within 30 s: %s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = v.master.cmd.Process.Signal(syscall.SIGKILL)
	v.master.wait()
	// The hosts run on; a new master at the same address recovers them.
	m2 := start(t, "recovered master", nil, append([]string{"daemon", "--master", "--recover", "--listen", v.addr,
		"--heartbeat", "100ms", "--dead-after", "1s", "--no-tasks"}, v.creds.master()...)...)
	m2.waitFor(listening, true)
	deadline = time.Now().Add(30 * time.Second)
	for {
		code, out, _ := dpvm(t, v.env, "conf", "--json")
		var hs []hostJSON
		if code == 0 && json.Unmarshal([]byte(out), &hs) == nil && len(hs) == 3 && hs[1].ID == "h2" && hs[2].ID == "h3" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hosts did not register again within 30 s: %s\n%s", out, m2.err.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := m2.waitFor(regexp.MustCompile(`pi: \d+ samples on 4 workers: (\d+) hits`), false)
	if ref := fmt.Sprint(<-want); got[1] != ref {
		t.Fatalf("pi through the master's loss: %s hits, want %s", got[1], ref)
	}
	// Programs run across the hosts again.
	code, out, errOut = dpvm(t, v.env, "run", "--master", v.addr, "hello", "-n", "4")
	if code != 0 || !regexp.MustCompile(`4 children said hello`).MatchString(out) {
		t.Fatalf("run after recovery: %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("pi finished with %s hits through the master's loss; the recovered master runs programs", got[1])
}
