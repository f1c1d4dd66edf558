package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon"
)

// First-checkpoint runs: `dpvm npb cg --class A --np 4 --checkpoint-every
// 500ms` on three hosts, firstRuns times; issue 34 asks for class B every
// 1s in 10 of 10 runs (integration/README.md has the command), too heavy
// for a test.
const (
	firstRuns   = 10
	firstClass  = "A"
	firstPeriod = 500 * time.Millisecond
)

// TestNPBFirstCheckpointOfProcesses: on a machine of three daemon
// processes, every run of `dpvm npb cg --np 4 --checkpoint-every P`
// completes its first checkpoint within two periods of its job's start, as
// the master reports it (`dpvm ps`: the job's newest complete checkpoint
// and how long ago it completed, or, before the first, how long ago the
// job started), and verifies.
func TestNPBFirstCheckpointOfProcesses(t *testing.T) {
	shared := t.TempDir()
	v := startVM(t, 2, "--shared-dir", shared)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cl, err := daemon.Dial(ctx, v.addr, v.creds.cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[uint64]bool{}
	for i := range firstRuns {
		run := start(t, fmt.Sprintf("npb run %d", i+1), v.env, "npb", "cg", "--class", firstClass, "--np", "4", "--json",
			"--master", v.addr, "--checkpoint-every", firstPeriod.String())
		first, job, err := firstCheckpoint(ctx, cl, seen, run)
		if err != nil {
			t.Fatalf("run %d: %v\n%s\n%s", i+1, err, run.out.String(), run.err.String())
		}
		code := run.wait()
		var rep struct {
			Verified string `json:"verified"`
		}
		if err := json.Unmarshal([]byte(run.out.String()), &rep); code != 0 || err != nil || rep.Verified != "SUCCESSFUL" {
			t.Fatalf("run %d: status %d, %v\n%s\n%s", i+1, code, err, run.out.String(), run.err.String())
		}
		t.Logf("run %d, job %d: first checkpoint %v after the job started (period %v)", i+1, job, first.Round(time.Millisecond), firstPeriod)
		if first > 2*firstPeriod {
			t.Errorf("run %d, job %d: first checkpoint %v after the job started, more than two periods of %v", i+1, job, first, firstPeriod)
		}
	}
}

// firstCheckpoint follows the checkpoint progress of the job of run, the
// only one with a period not in seen (which it adds it to), until its
// first checkpoint is complete, and returns how long after the job's start
// that was. Both instants come from the master's ages (the job's since its
// start, then its newest checkpoint's since it completed), each taken from
// the time the answer came: the answers' latency cancels out but for its
// variation. It reads the completion on the second answer that reports
// it; with more than one checkpoint complete by then, the newest one's
// time bounds the first's from above.
func firstCheckpoint(ctx context.Context, cl *daemon.Client, seen map[uint64]bool, run *proc) (time.Duration, uint64, error) {
	var job uint64
	var started time.Time
	confirmed := false
	for {
		select {
		case <-run.done:
			return 0, job, fmt.Errorf("the run ended before its first checkpoint was seen complete")
		default:
		}
		_, jobs, err := cl.PS(ctx, true)
		now := time.Now()
		if err != nil {
			return 0, job, err
		}
		for _, js := range jobs {
			if seen[js.Job] && js.Job != job || js.EverySeconds != firstPeriod.Seconds() {
				continue
			}
			if job == 0 {
				job = js.Job
				seen[job] = true
			}
			at := now.Add(-time.Duration(js.AgeSeconds * float64(time.Second)))
			if js.Last == 0 {
				if started.IsZero() || at.Before(started) {
					started = at
				}
				if age := time.Duration(js.AgeSeconds * float64(time.Second)); age > 2*firstPeriod {
					return age, job, nil // already late: no need to wait for it
				}
				continue
			}
			if started.IsZero() {
				return 0, job, fmt.Errorf("job %d: checkpoint %d complete when first seen: poll more often", job, js.Last)
			}
			if !confirmed {
				// The master counts a set complete a moment before it
				// records when: its age is then still the job's.
				confirmed = true
				continue
			}
			return at.Sub(started), job, nil
		}
		select {
		case <-ctx.Done():
			return 0, job, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
