package integration

import (
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// squaresSum is what squares -n n prints: the sum of i² for i < n.
func squaresSum(n int64) string {
	s := new(big.Int).Mul(big.NewInt(n-1), big.NewInt(n))
	s.Mul(s, big.NewInt(2*n-1))
	return s.Div(s, big.NewInt(6)).String()
}

// psTask is a task as `dpvm ps --json` lists it.
type psTask struct {
	TID  string `json:"tid"`
	Job  uint64 `json:"job"`
	Type string `json:"type"`
	Host string `json:"host"`
}

// waitTasks polls `dpvm ps --json` until ok accepts the tasks listed.
func waitTasks(t *testing.T, v *vm, run *proc, ok func([]psTask) bool) []psTask {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, out, _ := dpvm(t, v.env, "ps", "--json")
		var ts []psTask
		if code == 0 && json.Unmarshal([]byte(out), &ts) == nil && ok(ts) {
			return ts
		}
		if time.Now().After(deadline) {
			t.Fatalf("tasks not as wanted within 60 s: %s\n%s", out, run.err.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// manifests counts the complete sets of a job's directory.
func manifests(jobDir string) int {
	m, _ := filepath.Glob(filepath.Join(jobDir, "ckpt-*", "MANIFEST"))
	return len(m)
}

// TestRootHostLossOfProcesses: `dpvm run --checkpoint-every` of squares on
// a machine of three daemon processes; its root is moved to h2, and once
// a checkpoint has completed since, h2's daemon is SIGKILLed. The master
// rolls the job back, the root restored from the checkpoint on a host
// left; the command says so, prints the sum of an uninterrupted run and
// exits 0; the job's checkpoints after the rollback complete. Before, the
// command failed with "wait …: host unreachable: connection to h2 lost"
// and the job was not rolled back.
func TestRootHostLossOfProcesses(t *testing.T) {
	const n = 3_000_000
	shared := t.TempDir()
	v := startVM(t, 2, "--shared-dir", shared)
	run := start(t, "squares with checkpoints", v.env, "run", "--master", v.addr, "--checkpoint-every", "200ms", "--keep", "100",
		"squares", "-n", fmt.Sprint(n), "-workers", "4")
	var root psTask
	waitTasks(t, v, run, func(ts []psTask) bool {
		for _, x := range ts {
			if x.Type == "examples.squares" {
				root = x
			}
		}
		return root.TID != ""
	})
	if code, out, errOut := dpvm(t, v.env, "migrate", root.TID, "--to", "h2"); code != 0 {
		t.Fatalf("migrate the root: %d %s %s", code, out, errOut)
	}
	jobDir := filepath.Join(shared, fmt.Sprintf("job-j%d", root.Job))
	before := manifests(jobDir)
	deadline := time.Now().Add(60 * time.Second)
	for manifests(jobDir) <= before {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint after the root's move within 60 s\n%s\n%s", run.err.String(), v.master.err.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = v.hosts[0].cmd.Process.Signal(syscall.SIGKILL) // h2, the root's host
	v.hosts[0].wait()
	code := run.wait()
	want := fmt.Sprintf("sum of %d squares = %s", n, squaresSum(n))
	if code != 0 || !strings.Contains(run.out.String(), want) {
		t.Fatalf("run through the loss of its root's host: status %d, want %q\n%s\n%s\n%s", code, want, run.out.String(), run.err.String(), v.master.err.String())
	}
	note := regexp.MustCompile(fmt.Sprintf(`dpvm: job %d lost host h2 and rolled back to checkpoint (\d+)`, root.Job))
	m := note.FindStringSubmatch(run.err.String())
	if m == nil {
		t.Fatalf("the command did not say the job rolled back:\n%s", run.err.String())
	}
	back, _ := strconv.Atoi(m[1])
	// The checkpoints after the rollback complete (all are kept), in sets
	// numbered after the one it went back to.
	log := v.master.err.String()
	if strings.Contains(log, "file exists") {
		t.Fatalf("a checkpoint collided with a set on disk:\n%s", log)
	}
	sets, _ := filepath.Glob(filepath.Join(jobDir, "ckpt-*", "MANIFEST"))
	var after []int
	for _, m := range sets {
		if s, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(filepath.Dir(m)), "ckpt-")); err == nil && s > back {
			after = append(after, s)
		}
	}
	if len(after) == 0 {
		entries, _ := os.ReadDir(jobDir)
		t.Fatalf("no complete checkpoint after the rollback to %d: %v\n%s", back, entries, log)
	}
	t.Logf("rolled back to checkpoint %d; checkpoints %v after; %s", back, after, want)
}

// TestLostWithoutCheckpointOfProcesses: a job asking for a checkpoint
// every hour (none taken yet) loses the host of one of its workers to
// SIGKILL. It cannot roll back: the command exits non-zero within
// seconds, saying why and which host took which tasks, and none of the
// job's tasks runs on. Before, the command waited for good.
func TestLostWithoutCheckpointOfProcesses(t *testing.T) {
	shared := t.TempDir()
	v := startVM(t, 2, "--shared-dir", shared)
	run := start(t, "squares without a checkpoint", v.env, "run", "--master", v.addr, "--checkpoint-every", "1h",
		"squares", "-n", "2000000000", "-workers", "4")
	var lost []string
	var job uint64
	waitTasks(t, v, run, func(ts []psTask) bool {
		lost, job = nil, 0
		for _, x := range ts {
			if x.Type == "examples.squares.worker" {
				job = x.Job
				if x.Host == "h2" {
					lost = append(lost, x.TID)
				}
			}
		}
		return len(ts) == 5 && len(lost) > 0
	})
	killed := time.Now()
	_ = v.hosts[0].cmd.Process.Signal(syscall.SIGKILL) // h2
	v.hosts[0].wait()
	code := run.wait()
	took := time.Since(killed)
	errOut := run.err.String()
	if code == 0 {
		t.Fatalf("the lost job's command exited 0\n%s", errOut)
	}
	if !strings.Contains(errOut, fmt.Sprintf("job %d lost host h2 and ends: no complete checkpoint to roll back to", job)) {
		t.Fatalf("the command did not say why the job ended:\n%s", errOut)
	}
	for _, tid := range lost {
		if !strings.Contains(errOut, tid) {
			t.Fatalf("the command did not name %s, lost with h2:\n%s", tid, errOut)
		}
	}
	ts := waitTasks(t, v, run, func(ts []psTask) bool {
		for _, x := range ts {
			if x.Job == job {
				return false
			}
		}
		return true
	})
	t.Logf("the command exited %d %v after the loss; tasks left %v; it said:\n%s", code, took.Round(time.Millisecond), ts, errOut)
}
