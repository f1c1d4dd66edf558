package integration

import (
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"os"
	"os/exec"
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

// waitSets polls the job's directory until it holds more than n complete
// sets, for up to 60 s; run is the command whose log a failure shows.
func waitSets(t *testing.T, jobDir string, n int, run *proc) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for manifests(jobDir) <= n {
		if time.Now().After(deadline) {
			t.Fatalf("no complete checkpoint beyond %d within 60 s in %s\n%s", n, jobDir, run.err.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// setsAbove lists the complete sets of a job's directory numbered above
// seq.
func setsAbove(jobDir string, seq int) []int {
	ms, _ := filepath.Glob(filepath.Join(jobDir, "ckpt-*", "MANIFEST"))
	var above []int
	for _, m := range ms {
		if s, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(filepath.Dir(m)), "ckpt-")); err == nil && s > seq {
			above = append(above, s)
		}
	}
	return above
}

// squaresN is how many squares the squares runs below sum.
const squaresN = 3_000_000

// runSquares starts `dpvm run --checkpoint-every 200ms --keep 100 squares`
// of squaresN on v: four workers, every set kept.
func runSquares(t *testing.T, v *vm) *proc {
	t.Helper()
	return start(t, "squares with checkpoints", v.env, "run", "--master", v.addr, "--checkpoint-every", "200ms", "--keep", "100",
		"squares", "-n", fmt.Sprint(squaresN), "-workers", "4")
}

// wantSquaresSum fails the test unless p, a run of runSquares's (or its
// restart) that exited with code, exited 0 with the sum of an
// uninterrupted run.
func wantSquaresSum(t *testing.T, v *vm, p *proc, code int) {
	t.Helper()
	want := fmt.Sprintf("sum of %d squares = %s", squaresN, squaresSum(squaresN))
	if code != 0 || !strings.Contains(p.out.String(), want) {
		t.Fatalf("%s: status %d, want %q\n%s\n%s\n%s", p.name, code, want, p.out.String(), p.err.String(), v.master.err.String())
	}
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
	shared := t.TempDir()
	v := startVM(t, 2, "--shared-dir", shared)
	run := runSquares(t, v)
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
	waitSets(t, jobDir, manifests(jobDir), run)        // a set after the root's move
	_ = v.hosts[0].cmd.Process.Signal(syscall.SIGKILL) // h2, the root's host
	v.hosts[0].wait()
	wantSquaresSum(t, v, run, run.wait())
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
	after := setsAbove(jobDir, back)
	if len(after) == 0 {
		entries, _ := os.ReadDir(jobDir)
		t.Fatalf("no complete checkpoint after the rollback to %d: %v\n%s", back, entries, log)
	}
	t.Logf("rolled back to checkpoint %d; checkpoints %v after", back, after)
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

// TestMasterLossOfProcesses: `dpvm run --checkpoint-every` of squares on a
// master and two hosts; once a checkpoint is complete, the master daemon
// is SIGKILLed and one is started again at its address with --recover.
// A recovered master does not take jobs back, so the job cannot be
// followed: the command says the job was lost with its master and how to
// run it again, kills what is left of it and exits non-zero; `dpvm
// restart` of its directory then prints the sum of an uninterrupted run.
// With --no-tasks every task of the job runs on the hosts and survives
// the master until the command kills it; without, those on the master's
// host die with it. Before, the command ended with the bare "attach: job
// N: no such job", the job's tasks on the hosts ran on, unowned, and the
// run's root was on the master's host even under --no-tasks.
func TestMasterLossOfProcesses(t *testing.T) {
	for _, noTasks := range []bool{true, false} {
		t.Run(fmt.Sprintf("no-tasks=%v", noTasks), func(t *testing.T) {
			const n = 3_000_000
			shared := t.TempDir()
			flags := []string{"--shared-dir", shared, "--master-grace", "60s"}
			if noTasks {
				flags = append(flags, "--no-tasks")
			}
			v := startVM(t, 2, flags...)
			run := start(t, "squares with checkpoints", v.env, "run", "--master", v.addr, "--checkpoint-every", "200ms",
				"squares", "-n", fmt.Sprint(n), "-workers", "4")
			var job uint64
			ts := waitTasks(t, v, run, func(ts []psTask) bool {
				job = 0
				for _, x := range ts {
					job = x.Job
				}
				return len(ts) == 5
			})
			for _, x := range ts {
				if noTasks && x.Host == "h1" {
					t.Fatalf("task %s of the job on the master's host under --no-tasks: %v", x.TID, ts)
				}
			}
			jobDir := filepath.Join(shared, fmt.Sprintf("job-j%d", job))
			waitSets(t, jobDir, 0, run)
			_ = v.master.cmd.Process.Signal(syscall.SIGKILL)
			v.master.wait()
			m2 := start(t, "recovered master", nil, append(append([]string{"daemon", "--master", "--recover", "--listen", v.addr,
				"--heartbeat", "100ms", "--dead-after", "2s"}, flags...), v.creds.master()...)...)
			m2.waitFor(listening, true)
			code := run.wait()
			errOut := run.err.String()
			if code == 0 || !strings.Contains(errOut, fmt.Sprintf("job %d was lost with its master", job)) ||
				!strings.Contains(errOut, "dpvm restart") {
				t.Fatalf("the command through its master's loss: status %d\n%s\n%s", code, errOut, m2.err.String())
			}
			left := waitTasks(t, v, run, func(ts []psTask) bool {
				for _, x := range ts {
					if x.Job == job {
						return false
					}
				}
				return true
			})
			code, out, rerr := dpvm(t, v.env, "restart", jobDir)
			want := fmt.Sprintf("sum of %d squares = %s", n, squaresSum(n))
			if code != 0 || !strings.Contains(out, want) {
				t.Fatalf("restart after the master's loss: status %d, want %q\n%s\n%s", code, want, out, rerr)
			}
			t.Logf("tasks before %v; after %v; the command said:\n%s", ts, left, errOut)
		})
	}
}

// TestSurviveKillOfProcesses is the survival measurement of `dpvm npb cg
// --np 4 --checkpoint-every`: on a master (--no-tasks) and two host
// daemons, the host of one of the job's tasks, picked at random (the
// root's included), is SIGKILLed at a random moment, and the command must
// exit 0 with the benchmark verified. Seeded: the same seed picks the same
// moments and tasks. By default it makes one run of class W with a
// checkpoint every 100 ms, the kill 0–300 ms after the first complete
// checkpoint. The environment sets a measurement:
//
//	DPVM_SURVIVE_RUNS=20      how many runs
//	DPVM_SURVIVE_CLASS=B      the class
//	DPVM_SURVIVE_EVERY=1s     the checkpoint period (1s for B and C, else 100ms)
//	DPVM_SURVIVE_WINDOW=5s-30s  the kill moment after the command's start
//	                          (the default for B and C; otherwise after
//	                          the first complete checkpoint, 0s-300ms)
//	DPVM_SURVIVE_SEED=1       the seed
//
// A run that ended before its kill moment is counted apart; the test
// fails if a killed run did not finish verified, or if no run was killed.
func TestSurviveKillOfProcesses(t *testing.T) {
	env := func(k, def string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return def
	}
	runs, err := strconv.Atoi(env("DPVM_SURVIVE_RUNS", "1"))
	if err != nil || runs < 1 {
		t.Fatalf("DPVM_SURVIVE_RUNS=%q: want a positive count", os.Getenv("DPVM_SURVIVE_RUNS"))
	}
	class := strings.ToUpper(env("DPVM_SURVIVE_CLASS", "W"))
	big := class == "B" || class == "C"
	every := env("DPVM_SURVIVE_EVERY", map[bool]string{true: "1s", false: "100ms"}[big])
	fromStart := big || os.Getenv("DPVM_SURVIVE_WINDOW") != ""
	window := env("DPVM_SURVIVE_WINDOW", map[bool]string{true: "5s-30s", false: "0s-300ms"}[big])
	lo, hi, ok := strings.Cut(window, "-")
	from, err1 := time.ParseDuration(lo)
	to, err2 := time.ParseDuration(hi)
	if !ok || err1 != nil || err2 != nil || to < from {
		t.Fatalf("DPVM_SURVIVE_WINDOW=%q: want LOW-HIGH durations", window)
	}
	seed, err := strconv.ParseUint(env("DPVM_SURVIVE_SEED", "1"), 10, 64)
	if err != nil {
		t.Fatalf("DPVM_SURVIVE_SEED: %v", err)
	}
	rng := rand.New(rand.NewPCG(seed, 37))
	var verified, early int
	var lines []string
	for i := range runs {
		at := from + time.Duration(rng.Int64N(int64(to-from)+1))
		pick := rng.IntN(1 << 20)
		line, killed, ok := surviveRun(t, class, every, at, fromStart, pick)
		lines = append(lines, fmt.Sprintf("run %d: %s", i+1, line))
		t.Logf("run %d: %s", i+1, line)
		switch {
		case !killed:
			early++
		case ok:
			verified++
		}
	}
	t.Logf("class %s, checkpoint every %s, kill at %s after the %s, seed %d: %d of %d killed runs verified, %d ended before their kill\n%s",
		class, every, window, map[bool]string{true: "start", false: "first checkpoint"}[fromStart], seed, verified, runs-early, early, strings.Join(lines, "\n"))
	if verified == 0 && !t.Failed() {
		t.Fatalf("no run was killed while it ran: every run of class %s ended before its kill moment", class)
	}
}

// surviveRun makes one run of TestSurviveKillOfProcesses: the job's task
// pick (modulo their number) has its host SIGKILLed at after from the
// command's start (fromStart) or from its first complete checkpoint. It
// fails the test if the killed run did not finish verified, and returns
// what happened, whether the kill came while the job ran and whether the
// run finished verified.
func surviveRun(t *testing.T, class, every string, after time.Duration, fromStart bool, pick int) (string, bool, bool) {
	t.Helper()
	shared := t.TempDir()
	v := startVM(t, 2, "--shared-dir", shared, "--no-tasks")
	began := time.Now()
	run := start(t, "npb cg", v.env, "npb", "cg", "--class", class, "--np", "4", "--json",
		"--master", v.addr, "--checkpoint-every", every)
	jobDir := filepath.Join(shared, "job-j1")
	base := began
	if !fromStart {
		for manifests(jobDir) == 0 {
			select {
			case <-run.done:
				return "ended before its first checkpoint", false, false
			case <-time.After(5 * time.Millisecond):
			}
			if time.Since(began) > 5*time.Minute {
				t.Fatalf("no checkpoint within 5 min\n%s", run.err.String())
			}
		}
		base = time.Now()
	}
	select {
	case <-run.done:
		return fmt.Sprintf("ended %v after its start, before its kill", time.Since(began).Round(time.Millisecond)), false, false
	case <-time.After(time.Until(base.Add(after))):
	}
	// ps can fail while a loaded host answers late: it is asked again.
	var ts []psTask
	for try := 1; ; try++ {
		code, out, errOut := dpvm(t, v.env, "ps", "--json")
		err := json.Unmarshal([]byte(out), &ts)
		if code == 0 && err == nil {
			break
		}
		if try == 10 {
			t.Fatalf("ps, 10 tries: %d %v %s %s", code, err, out, errOut)
		}
	}
	var job []psTask
	for _, x := range ts {
		if x.Job == 1 {
			job = append(job, x)
		}
	}
	if len(job) == 0 {
		return "no task left at its kill moment", false, false
	}
	victim := job[pick%len(job)]
	var host *proc
	for i, h := range v.hosts {
		if victim.Host == fmt.Sprintf("h%d", i+2) {
			host = h
		}
	}
	if host == nil {
		t.Fatalf("task %s on %s, not a host daemon (--no-tasks): %v", victim.TID, victim.Host, job)
	}
	killedAt := time.Since(began)
	sets := manifests(jobDir)
	_ = host.cmd.Process.Signal(syscall.SIGKILL)
	host.wait()
	select {
	case <-run.done:
	case <-time.After(30 * time.Minute):
		t.Fatalf("the run did not end within 30 min of its kill")
	}
	status := 0
	var ee *exec.ExitError
	if run.waitErr != nil && asExit(run.waitErr, &ee) {
		status = ee.ExitCode()
	}
	var rep struct {
		Verified string `json:"verified"`
	}
	_ = json.Unmarshal([]byte(run.out.String()), &rep)
	line := fmt.Sprintf("%s (%s) on %s killed %v after the start, %d sets complete; status %d, %q in %v",
		victim.TID, victim.Type, victim.Host, killedAt.Round(time.Millisecond), sets, status, rep.Verified, time.Since(began).Round(time.Millisecond))
	if status != 0 || rep.Verified != "SUCCESSFUL" {
		t.Errorf("%s\n%s\n%s", line, run.err.String(), v.master.err.String())
		return line, true, false
	}
	return line, true, true
}

// squaresUnderLoss runs `dpvm run --checkpoint-every 200ms squares` on a
// master (--no-tasks) and three hosts, h2 to h4, and once a checkpoint is
// complete calls fault with the VM, the command and the job's tasks. The
// command must print the sum of an uninterrupted run, say that the job
// rolled back, and exit 0; it returns what the command said.
func squaresUnderLoss(t *testing.T, fault func(v *vm, run *proc, job []psTask)) string {
	t.Helper()
	shared := t.TempDir()
	v := startVM(t, 3, "--shared-dir", shared, "--no-tasks")
	run := runSquares(t, v)
	job := waitTasks(t, v, run, func(ts []psTask) bool { return len(ts) == 5 })
	waitSets(t, filepath.Join(shared, fmt.Sprintf("job-j%d", job[0].Job)), 0, run)
	fault(v, run, job)
	wantSquaresSum(t, v, run, run.wait())
	if !regexp.MustCompile(fmt.Sprintf(`dpvm: job %d lost host h\d+ and rolled back to checkpoint \d+`, job[0].Job)).MatchString(run.err.String()) {
		t.Fatalf("the command did not say the job rolled back:\n%s", run.err.String())
	}
	return run.err.String()
}

// hostProc is host daemon name (h2, h3, …) of v.
func hostProc(t *testing.T, v *vm, name string) *proc {
	t.Helper()
	for i, h := range v.hosts {
		if name == fmt.Sprintf("h%d", i+2) {
			return h
		}
	}
	t.Fatalf("no host daemon %s", name)
	return nil
}

// waitLog polls p's stderr until re matches after its first skip bytes.
func waitLog(t *testing.T, p *proc, skip int, re *regexp.Regexp) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if s := p.err.String(); len(s) > skip && re.MatchString(s[skip:]) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %v within 60 s:\n%s", p.name, re, p.err.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestHostLostDuringRollbackOfProcesses: squares loses the host of a
// worker to SIGKILL; the moment the master deletes it, and so starts the
// job's rollback, a second host with tasks of the job is SIGKILLed too,
// its kill and restore steps failing or its restored tasks lost. The job
// rolls back again onto the one host left and finishes with the
// uninterrupted sum.
func TestHostLostDuringRollbackOfProcesses(t *testing.T) {
	said := squaresUnderLoss(t, func(v *vm, run *proc, job []psTask) {
		on := map[string]bool{}
		for _, x := range job {
			on[x.Host] = true
		}
		var hs []string
		for _, h := range []string{"h2", "h3", "h4"} {
			if on[h] {
				hs = append(hs, h)
			}
		}
		if len(hs) < 2 {
			t.Fatalf("the job's tasks on fewer than two hosts: %v", job)
		}
		skip := len(v.master.err.String())
		first := hostProc(t, v, hs[0])
		_ = first.cmd.Process.Signal(syscall.SIGKILL)
		first.wait()
		waitLog(t, v.master, skip, regexp.MustCompile(`msg="host deleted".* peer_name=`+hs[0]))
		second := hostProc(t, v, hs[1])
		_ = second.cmd.Process.Signal(syscall.SIGKILL)
		second.wait()
	})
	t.Logf("the command said:\n%s", said)
}

// TestHostLostDuringRootMoveOfProcesses: squares' root is being moved to
// another host (`dpvm migrate`) whose daemon is stopped (SIGSTOP), so
// that the move waits on it; once the master has the move under way (a
// second migrate is refused: the task is already moving), the origin —
// or the destination — is SIGKILLed, and the other continued. The move
// does not commit, the job rolls back (the host lost had tasks of the
// job) and it finishes with the uninterrupted sum.
func TestHostLostDuringRootMoveOfProcesses(t *testing.T) {
	for _, lose := range []string{"origin", "destination"} {
		t.Run(lose, func(t *testing.T) {
			said := squaresUnderLoss(t, func(v *vm, run *proc, job []psTask) {
				var root psTask
				for _, x := range job {
					if x.Type == "examples.squares" {
						root = x
					}
				}
				to := "h2"
				if root.Host == to {
					to = "h3"
				}
				origin, dest := hostProc(t, v, root.Host), hostProc(t, v, to)
				_ = dest.cmd.Process.Signal(syscall.SIGSTOP)
				mv := start(t, "migrate the root", v.env, "migrate", root.TID, "--to", to)
				for probes := 0; ; probes++ {
					code, _, errOut := dpvm(t, v.env, "migrate", root.TID, "--to", to, "--timeout", "300ms")
					if code == 0 {
						t.Fatalf("a move of %s committed with its destination stopped", root.TID)
					}
					if strings.Contains(errOut, "already moving") {
						break
					}
					if probes == 100 {
						t.Fatalf("no move of %s under way after 100 probes: %s", root.TID, errOut)
					}
				}
				victim, other := origin, dest
				if lose == "destination" {
					victim, other = dest, origin
				}
				_ = victim.cmd.Process.Signal(syscall.SIGKILL)
				victim.wait()
				_ = other.cmd.Process.Signal(syscall.SIGCONT)
				code := mv.wait()
				if code == 0 {
					t.Fatalf("the move of %s committed although its %s was lost: %s", root.TID, lose, mv.out.String())
				}
				t.Logf("migrate %s from %s to %s, the %s killed mid-move: status %d %s", root.TID, root.Host, to, lose, code, mv.err.String())
			})
			t.Logf("the command said:\n%s", said)
		})
	}
}

// TestHostLostDuringCheckpointOfProcesses: `dpvm run --checkpoint-every
// 200ms` of squares on a master (--no-tasks) and hosts h2 to h4, where
// h3's daemon exits as if SIGKILLed in the middle of the job's second
// checkpoint round, when asked to write its tasks' checkpoints
// (DPVM_FAULT=exit-on-second-ckpt-write). The round is abandoned, the job
// rolls back to its first set onto the hosts left and finishes with the
// uninterrupted sum, and its checkpoints after the rollback complete in
// sets numbered above the abandoned round's.
func TestHostLostDuringCheckpointOfProcesses(t *testing.T) {
	shared := t.TempDir()
	v := startVMEnv(t, 3, nil, func(name string) []string {
		if name == "h3" {
			return []string{"DPVM_FAULT=exit-on-second-ckpt-write"}
		}
		return nil
	}, "--shared-dir", shared, "--no-tasks")
	run := runSquares(t, v)
	code := run.wait()
	h3 := hostProc(t, v, "h3")
	if !strings.Contains(h3.err.String(), "fault injected: exiting in the middle of a job checkpoint") {
		t.Fatalf("h3 did not exit in the job's second checkpoint round (status %d):\n%s\n%s", code, h3.err.String(), run.err.String())
	}
	wantSquaresSum(t, v, run, code)
	m := regexp.MustCompile(`dpvm: job (\d+) lost host h3 and rolled back to checkpoint (\d+)`).FindStringSubmatch(run.err.String())
	if m == nil {
		t.Fatalf("the command did not say the job rolled back after losing h3:\n%s", run.err.String())
	}
	back, _ := strconv.Atoi(m[2])
	log := v.master.err.String()
	if strings.Contains(log, "file exists") {
		t.Fatalf("a checkpoint collided with a set on disk:\n%s", log)
	}
	// The sets: the one gone back to, the abandoned round's (removed or
	// left incomplete) and those after the rollback, numbered above both.
	jobDir := filepath.Join(shared, "job-j"+m[1])
	after := setsAbove(jobDir, back+1)
	if len(after) == 0 {
		entries, _ := os.ReadDir(jobDir)
		t.Fatalf("no complete checkpoint numbered after the abandoned round %d: %v\n%s", back+1, entries, log)
	}
	t.Logf("rolled back to checkpoint %d; complete sets after: %v", back, after)
}

// TestRestartFollowsItsRollbackOfProcesses: `dpvm restart` follows the job
// it restarts through a rollback as `dpvm run` does. squares runs with a
// checkpoint every 200 ms on a master (--no-tasks) and hosts h2 to h4;
// once a set is complete its command is interrupted (the job is killed)
// and `dpvm restart` of the job's directory runs it again; once the
// restarted job has completed a set of its own, the host of its root is
// SIGKILLed. The restart command says the job rolled back, prints the
// uninterrupted sum and exits 0. Before, it printed no note (it did not
// listen for them).
func TestRestartFollowsItsRollbackOfProcesses(t *testing.T) {
	shared := t.TempDir()
	v := startVM(t, 3, "--shared-dir", shared, "--no-tasks")
	run := runSquares(t, v)
	job := waitTasks(t, v, run, func(ts []psTask) bool { return len(ts) == 5 })
	jobDir := filepath.Join(shared, fmt.Sprintf("job-j%d", job[0].Job))
	waitSets(t, jobDir, 0, run)
	_ = run.cmd.Process.Signal(os.Interrupt)
	if code := run.wait(); code == 0 {
		t.Fatalf("the interrupted run exited 0:\n%s", run.out.String())
	}
	waitTasks(t, v, run, func(ts []psTask) bool { return len(ts) == 0 })
	sets := manifests(jobDir)
	re := start(t, "restart", v.env, "restart", "--master", v.addr, "--checkpoint-every", "200ms", "--keep", "100", jobDir)
	var root psTask
	waitTasks(t, v, re, func(ts []psTask) bool {
		for _, x := range ts {
			if x.Type == "examples.squares" {
				root = x
			}
		}
		return len(ts) == 5 && root.TID != ""
	})
	waitSets(t, jobDir, sets, re) // a set of the restarted job's
	host := hostProc(t, v, root.Host)
	_ = host.cmd.Process.Signal(syscall.SIGKILL)
	host.wait()
	wantSquaresSum(t, v, re, re.wait())
	if !regexp.MustCompile(fmt.Sprintf(`dpvm: job %d lost host %s and rolled back to checkpoint \d+`, root.Job, root.Host)).MatchString(re.err.String()) {
		t.Fatalf("the restart did not say its job rolled back:\n%s", re.err.String())
	}
	t.Logf("root %s on %s lost; the restart said:\n%s", root.TID, root.Host, re.err.String())
}
