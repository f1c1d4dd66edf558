package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// TestJobCheckpointRestartOfProcesses runs pi on a virtual machine of four
// daemon processes with a checkpoint every 200 ms, loses the whole machine
// (SIGKILL to every daemon and to the command) once a checkpoint is
// complete, and restarts the job with `dpvm restart` on a new machine of
// two daemons sharing the directory: the job finishes with the result an
// uninterrupted run gives.
func TestJobCheckpointRestartOfProcesses(t *testing.T) {
	shared := t.TempDir()
	args := []string{"pi", "-workers", "4", "-samples", "800000000"}
	v := startVM(t, 3, "--shared-dir", shared)
	run := start(t, "pi with checkpoints", v.env, append([]string{"run", "--master", v.addr, "--checkpoint-every", "200ms"}, args...)...)
	// Wait for a complete checkpoint (its manifest).
	jobDir := filepath.Join(shared, "job-j1")
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m, _ := filepath.Glob(filepath.Join(jobDir, "ckpt-*", "MANIFEST")); len(m) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint after 60 s\n%s\n%s", run.out.String(), run.err.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Lose everything.
	for _, p := range append([]*proc{v.master, run}, v.hosts...) {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		p.wait()
	}
	if regexp.MustCompile(`hits`).MatchString(run.out.String()) {
		t.Fatalf("pi finished before the machine was lost: %s", run.out.String())
	}

	// A new machine of two daemons, the same key and directory.
	v2 := startVMWith(t, 1, v.creds, "--shared-dir", shared)
	code, out, errOut := dpvm(t, v2.env, "restart", "--master", v2.addr, jobDir)
	want := regexp.MustCompile(`pi: 800000000 samples on 4 workers: (\d+) hits`)
	got := want.FindStringSubmatch(out)
	if code != 0 || got == nil {
		t.Fatalf("restart: status %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = dpvm(t, v2.env, append([]string{"run", "--master", v2.addr}, args...)...)
	ref := want.FindStringSubmatch(out)
	if code != 0 || ref == nil || ref[1] != got[1] {
		t.Fatalf("uninterrupted run: status %d, %q; the restarted job said %q\n%s", code, out, got[0], errOut)
	}
	sets, _ := filepath.Glob(filepath.Join(jobDir, "ckpt-*"))
	for _, s := range sets {
		fi, err := os.Stat(s)
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v", s, fi.Mode(), err)
		}
	}
	t.Logf("restarted from %d kept checkpoint set(s); %s hits, as uninterrupted", len(sets), got[1])
}
