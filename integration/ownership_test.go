package integration

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/pki"
)

// TestOwnershipOfProcesses: on a master and a host running as processes,
// bob runs a job with checkpoints; as alice, `dpvm kill j1`, `dpvm
// checkpoint j1`, moving its root and `dpvm restart` of its checkpoint
// are refused with a clear error and audited as refused, while bob
// kills his own job.
func TestOwnershipOfProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	shared := t.TempDir()
	v := startVM(t, 1, "--shared-dir", shared)
	userEnv := func(name string) []string {
		return []string{"DPVM_MASTER=" + v.addr, "DPVM_CREDENTIAL=" + v.creds.userFile(name, pki.RoleUser)}
	}
	bob, alice := userEnv("bob"), userEnv("alice")
	run := start(t, "bob's pi", bob, "run", "--checkpoint-every", "200ms", "pi", "-workers", "2", "-samples", "4000000000")
	jobDir := filepath.Join(shared, "job-j1")
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m, _ := filepath.Glob(filepath.Join(jobDir, "ckpt-*", "MANIFEST")); len(m) >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint of bob's job after 60 s\n%s\n%s", run.out.String(), run.err.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	refused := func(what string, args ...string) {
		t.Helper()
		code, out, errOut := dpvm(t, alice, args...)
		if code == 0 || !strings.Contains(errOut, "forbidden") || !strings.Contains(errOut, "bob's") {
			t.Errorf("alice's %s: status %d\n%s\n%s", what, code, out, errOut)
		}
	}
	refused("kill of bob's job", "kill", "j1")
	refused("checkpoint of bob's job", "checkpoint", "j1")
	refused("restart of bob's checkpoint", "restart", jobDir)

	// Moving bob's root, through the client library as alice.
	cl, err := daemon.Dial(ctx, v.addr, mustUser(t, v, "alice"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ts, err := cl.Tasks(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	moved := false
	for _, ti := range ts {
		if ti.Job == 1 {
			if _, err := cl.Migrate(ctx, ti.TID, "h2", daemon.Direct); !errors.Is(err, daemon.ErrForbidden) {
				t.Errorf("alice moved bob's %v: %v", ti.TID, err)
			}
			moved = true
			break
		}
	}
	if !moved {
		t.Fatalf("no task of job 1 among %+v", ts)
	}
	for _, method := range []string{"job.kill", "checkpoint", "run", "migrate"} {
		v.master.waitFor(regexp.MustCompile(`msg=audit .*who=alice role=user .*method=`+regexp.QuoteMeta(method)+` outcome="refused: `), true)
	}

	// Bob's job ran on through all of it; he kills it.
	if code, out, errOut := dpvm(t, bob, "kill", "j1"); code != 0 {
		t.Fatalf("bob kills his job: %d\n%s\n%s", code, out, errOut)
	}
	run.wait()
}

// mustUser issues a user certificate named name under v's CA.
func mustUser(t *testing.T, v *vm, name string) *pki.Credential {
	t.Helper()
	c, err := v.creds.cl.User(name, pki.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestHugeSpawnOfProcesses: `dpvm spawn hello -n 2000000000` is refused
// at once with the bound it passes (it once started one job per root
// without end), and an admin's spawn of a million tasks, one job as PVM's
// console makes, is refused at once by the bound on a job's tasks; the
// master serves on. (A spawn that is allowed stops when its caller gives
// up: daemon's TestCancelledCallStops.)
func TestHugeSpawnOfProcesses(t *testing.T) {
	v := startVM(t, 1)
	alice := []string{"DPVM_MASTER=" + v.addr, "DPVM_CREDENTIAL=" + v.creds.userFile("alice", pki.RoleUser)}
	code, out, errOut := dpvm(t, alice, "spawn", "hello", "-n", "2000000000", "--timeout", "20s")
	if code == 0 || !strings.Contains(errOut, "at most 1048576 in one spawn") {
		t.Fatalf("a spawn of 2e9 tasks: status %d\n%s\n%s", code, out, errOut)
	}

	// A million tasks asked for by the admin, whom the users' quotas do not
	// hold: the job's bound does.
	const asked = 1000000
	code, out, errOut = dpvm(t, v.env, "spawn", "hello", "-n", strconv.Itoa(asked), "--timeout", "20s")
	if code == 0 || !strings.Contains(errOut, "tasks in one job") {
		t.Fatalf("a spawn of %d tasks: status %d\n%s\n%s", asked, code, out, errOut)
	}
	v.master.waitFor(regexp.MustCompile(`msg=audit .*who=admin role=admin .*method=spawn outcome="spawn `+strconv.Itoa(asked)+` tasks as one job: .*over a configured limit"`), true)
	if code, out, errOut := dpvm(t, alice, "ps"); code != 0 {
		t.Fatalf("ps after the spawns: %d\n%s\n%s", code, out, errOut)
	}
}
