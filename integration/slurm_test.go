package integration

import (
	"crypto/rand"
	"fmt"
	"net"
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

// slurmCluster is a Slurm controller and two slurmd nodes (n1, n2) in
// Slurm's multiple-slurmd mode on this machine, with their own munged.
type slurmCluster struct {
	t    *testing.T
	dir  string
	conf string
	env  []string
	// procs are stopped in reverse order.
	procs []*exec.Cmd
}

// freePort returns a TCP and UDP port free at the moment of asking.
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		u, err := net.ListenPacket("udp", fmt.Sprintf(":%d", port))
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// startSlurm starts munged, slurmctld and two slurmd, or skips the test
// with the reason when Slurm is not installed or this is not root.
func startSlurm(t *testing.T) *slurmCluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("Slurm test: needs root (slurmd runs jobs as their users)")
	}
	for _, c := range []string{"munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "sinfo"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("Slurm test: %s is not installed (apt-get install -y slurm-wlm munge)", c)
		}
	}
	dir, err := os.MkdirTemp("", "dpvm-slurm")
	if err != nil {
		t.Fatal(err)
	}
	sc := &slurmCluster{t: t, dir: dir, conf: filepath.Join(dir, "slurm.conf")}
	t.Cleanup(sc.stop)
	key := make([]byte, 1024)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "munge.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"state", "spool", "log"} {
		mkdir(t, filepath.Join(dir, d))
	}
	sock := filepath.Join(dir, "munge.sock")
	ctld, dport, d1, d2 := freePort(t), freePort(t), freePort(t), freePort(t)
	conf := fmt.Sprintf(`ClusterName=dpvmtest
SlurmctldHost=localhost
SlurmctldPort=%[2]d
SlurmdPort=%[3]d
AuthType=auth/munge
AuthInfo=socket=%[1]s/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=%[1]s/state
SlurmdSpoolDir=%[1]s/spool/%%n
SlurmctldPidFile=%[1]s/slurmctld.pid
SlurmdPidFile=%[1]s/slurmd-%%n.pid
SlurmctldLogFile=%[1]s/log/slurmctld.log
SlurmdLogFile=%[1]s/log/slurmd-%%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
KillWait=30
JobRequeue=1
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=%[4]d CPUs=1 RealMemory=500
NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=%[5]d CPUs=1 RealMemory=500
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
`, dir, ctld, dport, d1, d2)
	if err := os.WriteFile(sc.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	sc.env = append(os.Environ(), "SLURM_CONF="+sc.conf)
	sc.start("munged", "-F", "-f", "--socket="+sock, "--key-file="+filepath.Join(dir, "munge.key"),
		"--pid-file="+filepath.Join(dir, "munged.pid"), "--log-file="+filepath.Join(dir, "log", "munged.log"),
		"--seed-file="+filepath.Join(dir, "munge.seed"))
	waitFile(t, sock, 20*time.Second)
	sc.start("slurmctld", "-D", "-i", "-f", sc.conf)
	sc.start("slurmd", "-D", "-N", "n1", "-f", sc.conf)
	sc.start("slurmd", "-D", "-N", "n2", "-f", sc.conf)
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _ := sc.cmd("sinfo", "-h", "-o", "%D %T").CombinedOutput()
		if strings.TrimSpace(string(out)) == "2 idle" {
			return sc
		}
		if time.Now().After(deadline) {
			t.Fatalf("Slurm nodes not idle after 60 s: sinfo says %q; logs in %s", out, dir)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (sc *slurmCluster) cmd(name string, args ...string) *exec.Cmd {
	c := exec.Command(name, args...)
	c.Env = sc.env
	c.Dir = sc.dir
	return c
}

// start runs a Slurm or munge daemon in the foreground until stop.
func (sc *slurmCluster) start(name string, args ...string) {
	sc.t.Helper()
	c := sc.cmd(name, args...)
	log, err := os.Create(filepath.Join(sc.dir, "log", fmt.Sprintf("%s-%d.out", name, len(sc.procs))))
	if err != nil {
		sc.t.Fatal(err)
	}
	c.Stdout, c.Stderr = log, log
	if err := c.Start(); err != nil {
		sc.t.Fatalf("start %s: %v", name, err)
	}
	sc.procs = append(sc.procs, c)
}

// run runs a Slurm command and returns its output, failing the test on
// an error.
func (sc *slurmCluster) run(name string, args ...string) string {
	sc.t.Helper()
	out, err := sc.cmd(name, args...).CombinedOutput()
	if err != nil {
		sc.t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// stop cancels every job, waits for them to end, then stops the daemons
// it started, newest first, and removes the directory.
func (sc *slurmCluster) stop() {
	if len(sc.procs) > 1 {
		_ = sc.cmd("scancel", "--full", "--partition=debug").Run()
		deadline := time.Now().Add(40 * time.Second)
		for time.Now().Before(deadline) {
			out, err := sc.cmd("squeue", "-h").Output()
			if err != nil || strings.TrimSpace(string(out)) == "" {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	for i := len(sc.procs) - 1; i >= 0; i-- {
		p := sc.procs[i]
		_ = p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
	if sc.t.Failed() {
		sc.t.Logf("Slurm logs kept in %s", sc.dir)
		return
	}
	os.RemoveAll(sc.dir)
}

func waitFile(t *testing.T, path string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %v", path, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSlurmRequeueResumes submits the shipped batch script with a verified
// NPB kernel to a real Slurm controller with two nodes, requeues the job
// once its first checkpoint is complete, and checks that the second run
// resumes from a checkpoint and finishes with a verified result.
func TestSlurmRequeueResumes(t *testing.T) {
	sc := startSlurm(t)
	script, err := filepath.Abs("../cmd/dpvm/deploy/slurm/dpvm.sbatch")
	if err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(sc.dir, "submit")
	mkdir(t, sub)
	out := filepath.Join(sub, "out.txt")
	flags := fmt.Sprintf("--port %d --master-host 127.0.0.1 --checkpoint-every 300ms --grace 20s --join-timeout 60s", freePort(t))
	// sbatch from the submit directory: the shared directory's default
	// is under it (SLURM_SUBMIT_DIR).
	// The test's nodes have one CPU each; the script asks for four a
	// node (#SBATCH --cpus-per-task=4), which sbatch's own flag overrides.
	submit := sc.cmd("sbatch", "--parsable", "--output="+out, "--cpus-per-task=1",
		"--export=ALL,DPVM="+dpvmBin+",DPVM_SLURM_FLAGS="+flags,
		script, "npb", "cg", "--class", "A", "--np", "2")
	submit.Dir = sub
	b, err := submit.CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch: %v: %s", err, b)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(b)), ";")
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("sbatch: job id %q", id)
	}
	state := filepath.Join(sub, "dpvm-shared", "slurm-"+id)
	read := func() string {
		b, _ := os.ReadFile(out)
		return string(b)
	}

	// Requeue as soon as the first checkpoint is complete.
	deadline := time.Now().Add(120 * time.Second)
	for {
		sets, _ := filepath.Glob(filepath.Join(state, "job-*", "ckpt-*", "MANIFEST"))
		if len(sets) > 0 {
			break
		}
		if strings.Contains(read(), "finished") || time.Now().After(deadline) {
			t.Fatalf("no checkpoint in %s before the job ended or 120 s passed; output:\n%s", state, read())
		}
		time.Sleep(20 * time.Millisecond)
	}
	sc.run("scontrol", "requeue", id)

	// A requeued job waits for Slurm's credential lifetime (2 min by
	// default) before it may start again: let it start at once.
	deadline = time.Now().Add(60 * time.Second)
	for {
		st, _ := sc.cmd("squeue", "-h", "-j", id, "-o", "%T").Output()
		if strings.TrimSpace(string(st)) == "PENDING" {
			if err := sc.cmd("scontrol", "update", "jobid="+id, "StartTime=now").Run(); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not pending again after the requeue (state %q); output:\n%s", id, st, read())
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The second run ends with "finished" or an error of its own.
	ended := func() bool {
		text := read()
		if strings.Count(text, "dpvm slurm: Slurm job") < 2 {
			return false
		}
		rest := text[strings.LastIndex(text, "dpvm slurm: Slurm job"):]
		return strings.Contains(rest, " finished;") || strings.Contains(rest, "dpvm: slurm")
	}
	deadline = time.Now().Add(180 * time.Second)
	for !ended() {
		if time.Now().After(deadline) {
			t.Fatalf("the requeued job did not end within 180 s; output:\n%s", read())
		}
		time.Sleep(100 * time.Millisecond)
	}
	text := read()
	t.Logf("job output:\n%s", text)
	for _, want := range []string{
		"starting npb cg class A np 2 fresh",
		"Verification    =   SUCCESSFUL",
		"npb cg class A np 2 finished",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	resumed := regexp.MustCompile(`resuming job (\S+) from checkpoint (\d+) \(`).FindStringSubmatch(text)
	if resumed == nil {
		t.Fatalf("output does not say the job resumed from a checkpoint")
	}
	if strings.Index(text, "fresh") > strings.Index(text, resumed[0]) {
		t.Errorf("the resume came before the fresh start")
	}
	if n, _ := strconv.Atoi(resumed[2]); n < 1 {
		t.Errorf("resumed from checkpoint %s", resumed[2])
	}
	if strings.Count(text, "CG Benchmark Completed") != 1 {
		t.Errorf("want exactly one completed run, got %d", strings.Count(text, "CG Benchmark Completed"))
	}
}
