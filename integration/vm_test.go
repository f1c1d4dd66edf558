package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// dpvmBin is the dpvm command built for these tests.
var dpvmBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dpvm-integration")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dpvmBin = filepath.Join(dir, "dpvm")
	build := exec.Command("go", "build", "-o", dpvmBin, "github.com/dpvm/dpvm/cmd/dpvm")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build dpvm:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer collects a process's output while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a dpvm process running in the background.
type proc struct {
	t        *testing.T
	name     string
	cmd      *exec.Cmd
	out, err syncBuffer
	done     chan struct{}
	waitErr  error
}

func start(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(dpvmBin, args...)
	cmd.Env = append(os.Environ(), env...)
	return startCmd(t, name, cmd)
}

// startCmd starts cmd in the background, collecting its output; it is
// killed, and its output logged if the test failed, when the test ends.
func startCmd(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{t: t, name: name, cmd: cmd, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s stdout:\n%s\n%s stderr:\n%s", p.name, p.out.String(), p.name, p.err.String())
		}
	})
	return p
}

// waitFor polls the process's output until re matches, or fails after a
// deadline: real processes on real sockets give no other signal.
func (p *proc) waitFor(re *regexp.Regexp, stderr bool) []string {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		s := p.out.String()
		if stderr {
			s = p.err.String()
		}
		if m := re.FindStringSubmatch(s); m != nil {
			return m
		}
		select {
		case <-p.done:
			p.t.Fatalf("%s exited (%v) before printing %v", p.name, p.waitErr, re)
		case <-time.After(20 * time.Millisecond):
		}
	}
	p.t.Fatalf("%s did not print %v within 30s", p.name, re)
	return nil
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		p.t.Fatalf("%s did not exit within 60s", p.name)
	}
	if p.waitErr == nil {
		return 0
	}
	var ee *exec.ExitError
	if ok := asExit(p.waitErr, &ee); ok {
		return ee.ExitCode()
	}
	p.t.Fatalf("%s: %v", p.name, p.waitErr)
	return -1
}

func asExit(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	if ok {
		*ee = e
	}
	return ok
}

// dpvm runs a one-shot dpvm command to completion.
func dpvm(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	p := start(t, "dpvm "+strings.Join(args, " "), env, args...)
	code := p.wait()
	return code, p.out.String(), p.err.String()
}

var listening = regexp.MustCompile(`listening on (\S+)`)

// vm is a virtual machine of separate daemon processes on loopback.
type vm struct {
	master *proc
	hosts  []*proc
	addr   string
	env    []string // DPVM_MASTER and DPVM_CREDENTIAL
	creds  *creds
}

// startVM starts a master and hosts host daemons, each given the extra
// daemon flags too.
func startVM(t *testing.T, hosts int, extra ...string) *vm {
	t.Helper()
	return startVMWith(t, hosts, nil, extra...)
}

// startVMWith is startVM under the credentials c (new ones when nil). Its
// hosts are named h2, h3, …
func startVMWith(t *testing.T, hosts int, c *creds, extra ...string) *vm {
	t.Helper()
	return startVMEnv(t, hosts, c, nil, extra...)
}

// startVMEnv is startVMWith with env(name) added to the environment of
// the daemon named name (h1 the master), when env is not nil.
func startVMEnv(t *testing.T, hosts int, c *creds, env func(name string) []string, extra ...string) *vm {
	t.Helper()
	if c == nil {
		c = newCreds(t)
	}
	if env == nil {
		env = func(string) []string { return nil }
	}
	v := &vm{creds: c}
	common := append([]string{"--listen", "127.0.0.1:0", "--heartbeat", "100ms", "--dead-after", "2s"}, extra...)
	v.master = start(t, "master", env("h1"), append(append([]string{"daemon", "--master"}, c.master()...), common...)...)
	v.addr = v.master.waitFor(listening, true)[1]
	for i := range hosts {
		name := fmt.Sprintf("h%d", i+2)
		h := start(t, fmt.Sprintf("host %d", i+2), env(name), append(append([]string{"daemon", "--join", v.addr}, c.host(name)...), common...)...)
		h.waitFor(listening, true)
		v.hosts = append(v.hosts, h)
	}
	v.env = []string{"DPVM_MASTER=" + v.addr, c.env()}
	return v
}

type hostJSON struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Master bool   `json:"master"`
}

// TestVMOfProcesses starts a master and three host daemons as separate
// processes, runs every example across them, kills a host with SIGKILL in
// the middle of a program and checks notify tells the program and the
// machine goes on, refuses clients without a credential of the cluster CA, and halts.
func TestVMOfProcesses(t *testing.T) {
	v := startVM(t, 3)

	code, out, errOut := dpvm(t, v.env, "conf", "--json")
	var hosts []hostJSON
	if code != 0 || json.Unmarshal([]byte(out), &hosts) != nil || len(hosts) != 4 || !hosts[0].Master || hosts[3].ID != "h4" {
		t.Fatalf("conf: %d %s %s", code, out, errOut)
	}

	// Every example, across the hosts.
	examples := []struct {
		args []string
		want *regexp.Regexp
	}{
		{[]string{"hello", "-n", "8"}, regexp.MustCompile(`(?s)8 children said hello:.*on h2.*on h3.*on h4`)},
		{[]string{"pingpong", "-n", "500", "-size", "1024"}, regexp.MustCompile(`500 round trips of 1024 B verified`)},
		{[]string{"ring", "-n", "8", "-laps", "4"}, regexp.MustCompile(`token made 4 laps around 8 tasks: 32 hops`)},
		{[]string{"pi", "-workers", "8", "-samples", "400000"}, regexp.MustCompile(`pi: 400000 samples on 8 workers: \d+ hits`)},
		{[]string{"squares", "-n", "100", "-workers", "6"}, regexp.MustCompile(`sum of 100 squares = 328350`)},
	}
	for _, ex := range examples {
		code, out, errOut := dpvm(t, v.env, append([]string{"run", "--master", v.addr}, ex.args...)...)
		if code != 0 || !ex.want.MatchString(out) {
			t.Errorf("run %v: status %d\nstdout:\n%s\nstderr:\n%s", ex.args, code, out, errOut)
		}
	}

	// spawn, ps, kill.
	code, out, _ = dpvm(t, v.env, "spawn", "examples.watch.worker", "-n", "2", "--host", "h3", "--json")
	var sp struct{ TIDs []string }
	if code != 0 || json.Unmarshal([]byte(out), &sp) != nil || len(sp.TIDs) != 2 || !strings.HasPrefix(sp.TIDs[0], "t3:") {
		t.Fatalf("spawn: %d %q", code, out)
	}
	code, out, _ = dpvm(t, v.env, "ps")
	if code != 0 || !strings.Contains(out, sp.TIDs[0]) || !strings.Contains(out, "examples.watch.worker") {
		t.Fatalf("ps: %d\n%s", code, out)
	}
	// The second task first: the first is the job's root (`spawn -n` starts
	// one job), whose kill ends the job and its other tasks with it.
	if code, _, errOut := dpvm(t, v.env, "kill", sp.TIDs[1], sp.TIDs[0]); code != 0 {
		t.Fatalf("kill: %d %s", code, errOut)
	}
	if code, _, errOut := dpvm(t, v.env, "kill", sp.TIDs[0]); code == 0 || !strings.Contains(errOut, "no such task") {
		t.Fatalf("second kill: %d %s", code, errOut)
	}

	// SIGKILL a host in the middle of a program that watches its workers.
	watch := start(t, "watch", v.env, "run", "--master", v.addr, "watch", "-workers", "3", "-expect", "1")
	started := watch.waitFor(regexp.MustCompile(`3 workers started: \[(.*)\]`), false)
	// Kill the host of the first worker that is not on the master.
	var lost int
	for _, tid := range strings.Fields(started[1]) {
		var h, n int
		if _, err := fmt.Sscanf(tid, "t%d:%d", &h, &n); err == nil && h > 1 {
			lost = h
			break
		}
	}
	if lost == 0 {
		t.Fatalf("no worker off the master: %s", started[0])
	}
	victim := v.hosts[lost-2] // hosts joined in order: h2, h3, h4
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := watch.wait(); code != 0 {
		t.Fatalf("watch: status %d", code)
	}
	wout := watch.out.String()
	for _, want := range []string{fmt.Sprintf("host h%d (h%d) deleted", lost, lost), "exited (status -1: lost with its host)", "watch: 1 workers lost, 2 stopped"} {
		if !strings.Contains(wout, want) {
			t.Errorf("watch output lacks %q:\n%s", want, wout)
		}
	}
	// The machine goes on without the lost host.
	code, out, _ = dpvm(t, v.env, "conf", "--json")
	if json.Unmarshal([]byte(out), &hosts) != nil || len(hosts) != 3 {
		t.Fatalf("conf after the loss: %d %s", code, out)
	}
	if code, out, errOut := dpvm(t, v.env, "run", "--master", v.addr, "hello", "-n", "4"); code != 0 || !strings.Contains(out, "4 children said hello") {
		t.Fatalf("run after the loss: %d\n%s\n%s", code, out, errOut)
	}

	// Without a credential of the cluster's CA: refused.
	other := newCreds(t, "h9")
	code, _, errOut = dpvm(t, []string{"DPVM_MASTER=" + v.addr, other.env()}, "conf", "--timeout", "5s")
	if code == 0 {
		t.Fatalf("a client with another key listed the hosts\n%s", errOut)
	}
	stranger := start(t, "stranger", nil, append([]string{"daemon", "--join", v.addr, "--listen", "127.0.0.1:0"}, other.host("h9")...)...)
	if code := stranger.wait(); code == 0 {
		t.Fatal("a daemon with another key joined")
	}
	code, _, errOut = dpvm(t, []string{"DPVM_MASTER=" + v.addr, "DPVM_CREDENTIAL="}, "conf")
	if code == 0 || !strings.Contains(errOut, "no credential") {
		t.Fatalf("no key: %d %s", code, errOut)
	}

	// Halt: every daemon exits cleanly.
	if code, _, errOut := dpvm(t, v.env, "halt"); code != 0 {
		t.Fatalf("halt: %d %s", code, errOut)
	}
	for _, p := range append([]*proc{v.master}, v.hosts...) {
		if p == victim {
			continue
		}
		if code := p.wait(); code != 0 {
			t.Errorf("%s exited with %d after halt", p.name, code)
		}
	}
}
