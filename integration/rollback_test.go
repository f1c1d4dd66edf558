package integration

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNPBFollowsItsRollbackOfProcesses: `dpvm npb cg --master ADDR
// --checkpoint-every` on a machine of three daemon processes; once a
// checkpoint is complete, a host daemon running a worker is SIGKILLed. The
// master rolls the job back; the command keeps receiving the job's output,
// says it rolled back and to which checkpoint, and exits 0 with the zeta of
// an uninterrupted run.
func TestNPBFollowsItsRollbackOfProcesses(t *testing.T) {
	shared := t.TempDir()
	v := startVM(t, 2, "--shared-dir", shared)
	args := []string{"npb", "cg", "--class", "A", "--np", "4", "--json"}
	ref, out, errOut := dpvm(t, v.env, append(args, "--master", v.addr)...)
	var want struct {
		Verified string             `json:"verified"`
		Values   map[string]float64 `json:"values"`
	}
	if err := json.Unmarshal([]byte(out), &want); ref != 0 || err != nil || want.Verified != "SUCCESSFUL" {
		t.Fatalf("uninterrupted run: status %d, %v\n%s\n%s", ref, err, out, errOut)
	}

	run := start(t, "npb with checkpoints", v.env, append(args, "--master", v.addr, "--checkpoint-every", "100ms")...)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m, _ := filepath.Glob(filepath.Join(shared, "job-j2", "ckpt-*", "MANIFEST")); len(m) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint after 60 s\n%s\n%s", run.out.String(), run.err.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = v.hosts[0].cmd.Process.Signal(syscall.SIGKILL)
	v.hosts[0].wait()
	code := run.wait()
	var got struct {
		Verified string             `json:"verified"`
		Values   map[string]float64 `json:"values"`
	}
	if err := json.Unmarshal([]byte(run.out.String()), &got); code != 0 || err != nil || got.Verified != "SUCCESSFUL" {
		t.Fatalf("run through the loss: status %d, %v\n%s\n%s", code, err, run.out.String(), run.err.String())
	}
	if got.Values["zeta"] != want.Values["zeta"] {
		t.Fatalf("zeta %v after the rollback, %v uninterrupted", got.Values["zeta"], want.Values["zeta"])
	}
	note := regexp.MustCompile(`dpvm: job 2 lost host h\d+ and rolled back to checkpoint (\d+) \((\d+) tasks\)`)
	m := note.FindStringSubmatch(run.err.String())
	if m == nil || m[2] != "5" || strings.Contains(run.err.String(), "failed") {
		t.Fatalf("the command did not say it rolled back, or said a worker failed:\n%s", run.err.String())
	}
	t.Logf("rolled back to checkpoint %s; zeta %v as uninterrupted", m[1], got.Values["zeta"])
}
