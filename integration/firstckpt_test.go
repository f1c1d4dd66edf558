package integration

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
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

// jobStarted is the master's log line of a job's start; ckptRound that of
// the outcome of one of its checkpoint rounds (info, at --log-level info).
var (
	jobStarted = regexp.MustCompile(`(?m)^time=(\S+) .*msg="job started" (?:\S+=\S+ )*?job=(\d+) `)
	ckptRound  = regexp.MustCompile(`(?m)^time=(\S+) .*msg="(job checkpointed|job checkpoint failed; the previous one stands)" (?:\S+=\S+ )*?job=(\d+)(?: seq=(\d+))?`)
)

// TestNPBFirstCheckpointOfProcesses: on a machine of three daemon
// processes, every run of `dpvm npb cg --np 4 --checkpoint-every P` has
// its first checkpoint from the first round the master starts, one period
// after the job's start: in the master's log, the job's first round
// outcome is "job checkpointed" with set 1, no failed round before it
// (CG's workers building their matrix reach safe points, so the round's
// pause finds them), and the run verifies. The rounds are counted, not
// timed: the master's periodic rounds start a period apart, so the first
// round's success is what puts the first checkpoint within two periods,
// whatever the write of the set costs on a loaded machine. The time from
// the job's start to that set, as the master logged both, is printed.
func TestNPBFirstCheckpointOfProcesses(t *testing.T) {
	shared := t.TempDir()
	v := startVMEnv(t, 2, nil, func(name string) []string {
		if name == "h1" {
			return []string{"DPVM_LOG=info"} // the master's rounds
		}
		return nil
	}, "--shared-dir", shared)
	for i := range firstRuns {
		skip := len(v.master.err.String())
		run := start(t, fmt.Sprintf("npb run %d", i+1), v.env, "npb", "cg", "--class", firstClass, "--np", "4", "--json",
			"--master", v.addr, "--checkpoint-every", firstPeriod.String())
		code := run.wait()
		var rep struct {
			Verified string `json:"verified"`
		}
		if err := json.Unmarshal([]byte(run.out.String()), &rep); code != 0 || err != nil || rep.Verified != "SUCCESSFUL" {
			t.Fatalf("run %d: status %d, %v\n%s\n%s", i+1, code, err, run.out.String(), run.err.String())
		}
		log := v.master.err.String()[skip:]
		job, after, err := firstRound(log)
		if err != nil {
			t.Errorf("run %d: %v\nthe master's log of the run:\n%s", i+1, err, log)
			continue
		}
		t.Logf("run %d, job %s: checkpoint 1 from its first round, %v after the job started (period %v)", i+1, job, after, firstPeriod)
	}
}

// firstRound reads the master's log of one run of a job: the job it
// started, and the outcome of that job's first checkpoint round, which
// must be set 1 complete. It returns the job and how long after its start
// the set was logged complete.
func firstRound(log string) (job string, after time.Duration, err error) {
	s := jobStarted.FindStringSubmatch(log)
	if s == nil {
		return "", 0, fmt.Errorf("no job started")
	}
	job = s[2]
	for _, r := range ckptRound.FindAllStringSubmatch(log, -1) {
		if r[3] != job {
			continue
		}
		if r[2] != "job checkpointed" || r[4] != "1" {
			return job, 0, fmt.Errorf("job %s: its first checkpoint round did not complete set 1: %q", job, strings.TrimSpace(r[0]))
		}
		t0, err0 := time.Parse(time.RFC3339Nano, s[1])
		t1, err1 := time.Parse(time.RFC3339Nano, r[1])
		if err0 != nil || err1 != nil {
			return job, 0, fmt.Errorf("job %s: log times %q, %q: %v %v", job, s[1], r[1], err0, err1)
		}
		return job, t1.Sub(t0), nil
	}
	return job, 0, fmt.Errorf("job %s: no checkpoint round ended before the job did", job)
}
