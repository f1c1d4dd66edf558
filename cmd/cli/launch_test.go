package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/pki"
)

func TestSSHArgv(t *testing.T) {
	s := sshRunner{command: []string{"ssh", "-o", "BatchMode=yes"}}
	got := s.argv(hostLine{Host: "node2", User: "alice", Port: 2222}, "echo hi")
	want := []string{"ssh", "-o", "BatchMode=yes", "-p", "2222", "-l", "alice", "--", "node2", "echo hi"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("argv %q, want %q", got, want)
	}
	if got := s.argv(hostLine{Host: "n"}, "x"); !reflect.DeepEqual(got, []string{"ssh", "-o", "BatchMode=yes", "--", "n", "x"}) {
		t.Errorf("argv without user and port: %q", got)
	}
}

func TestDaemonArgs(t *testing.T) {
	l := &launcher{cfg: launchConfig{Port: 7070}}
	h := hostLine{Host: "n2", Name: "n2", Speed: 2, Cores: 4, SharedDir: "/mnt/s", Flags: []string{"--heartbeat", "2s"}}
	got := l.daemonArgs(h, "n1:7070", "k.pem", "s.pem")
	want := []string{"daemon", "--join", "n1:7070", "--listen", "0.0.0.0:7070", "--name", "n2", "--credential", "k.pem",
		"--speed", "2", "--cores", "4", "--shared-dir", "/mnt/s", "--heartbeat", "2s"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("host args %q\nwant %q", got, want)
	}
	if got := l.daemonArgs(hostLine{Host: "n1", Name: "n1"}, "", "k", "s"); !reflect.DeepEqual(got[:2], []string{"daemon", "--master"}) ||
		!reflect.DeepEqual(got[4:8], []string{"--name", "n1", "--credential", "k"}) || !reflect.DeepEqual(got[8:10], []string{"--secret", "s"}) {
		t.Errorf("master args %q", got)
	}
	addr, err := l.masterAddr(t.Context(), hostLine{Host: "fd00::1", Name: "m", Flags: []string{"--listen", "[::]:7071"}})
	if err != nil || addr != "[fd00::1]:7071" {
		t.Errorf("master address %q %v, want [fd00::1]:7071", addr, err)
	}
}

func TestShellQuote(t *testing.T) {
	for _, s := range []string{"plain", "with space", "it's", `a"b$c\d`, ""} {
		out, err := exec.Command("sh", "-c", "printf %s "+shellQuote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("%q quoted as %s came back %q (%v)", s, shellQuote(s), out, err)
		}
	}
}

// localRunner runs the launcher's scripts with the local shell, in dir.
type localRunner struct{ dir string }

func (r localRunner) Run(ctx context.Context, h hostLine, script string, stdin io.Reader) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Dir = r.dir
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%w: %s", err, out)
	}
	return out, nil
}

// gone reports whether process pid is gone: absent, or a zombie no one
// reaped.
func gone(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && (f[2] == "Z" || f[2] == "X")
}

// TestScriptsStartStop runs the start, copy, status and stop scripts with
// the local shell on a stand-in daemon that ignores nothing and never
// exits by itself.
func TestScriptsStartStop(t *testing.T) {
	dir := t.TempDir()
	fake := "#!/bin/sh\nwhile :; do sleep 1; done\n"
	creds := t.TempDir()
	cl, err := pki.NewCluster(time.Now(), "n1", "admin")
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.WriteDir(creds); err != nil {
		t.Fatal(err)
	}
	l := &launcher{run: localRunner{dir}, cfg: launchConfig{
		RemoteDir: "state", RemoteBin: "bin/dpvm", CopyBin: []byte(fake), Creds: &upCreds{dir: creds}, Port: 7070, StopGrace: time.Second,
	}}
	h := hostLine{Host: "local", Name: "n1", Master: true}
	ctx := context.Background()
	s, err := l.start(ctx, h, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(s.PID, syscall.SIGKILL) })
	if b, err := os.ReadFile(filepath.Join(dir, "bin/dpvm")); err != nil || string(b) != fake {
		t.Fatalf("copied binary: %q %v", b, err)
	}
	// The master is given master.pem (it names n1) and the secret.
	for remote, local := range map[string]string{"state/n1.pem": pki.MasterFile, "state/secret.pem": pki.SecretFile} {
		want, _ := os.ReadFile(filepath.Join(creds, local))
		if b, err := os.ReadFile(filepath.Join(dir, remote)); err != nil || len(want) == 0 || string(b) != string(want) {
			t.Fatalf("copied %s: %q %v", remote, b, err)
		}
		if fi, err := os.Stat(filepath.Join(dir, remote)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s mode: %v %v", remote, fi.Mode(), err)
		}
	}
	// A host's credential is issued under the CA for its name and kept.
	pem, err := l.cfg.Creds.credential("n2", false)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := pki.ParseCredential(pem); err != nil || c.Name != "n2" || c.Master {
		t.Fatalf("n2's credential: %v %v", c, err)
	}
	if c, err := pki.LoadCredential(filepath.Join(creds, "host-n2.pem")); err != nil || c.Name != "n2" {
		t.Fatalf("n2's credential kept: %v %v", c, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, s.PIDFile)); err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(s.PID) {
		t.Fatalf("PID file %q (%v), started pid %d", b, err, s.PID)
	}
	if gone(s.PID) {
		t.Fatalf("daemon %d not running after start", s.PID)
	}
	if st := l.status(ctx, s); !strings.HasPrefix(st, "daemon running") {
		t.Errorf("status: %q", st)
	}
	if _, err := l.start(ctx, h, ""); err == nil || !strings.Contains(err.Error(), "already runs") {
		t.Fatalf("a second start on a running daemon: %v", err)
	}
	r, err := l.stop(ctx, s)
	if err != nil || (r != "terminated" && r != "killed") {
		t.Fatalf("stop: %q %v, want terminated or killed", r, err)
	}
	if !gone(s.PID) {
		t.Fatalf("daemon %d still running after stop", s.PID)
	}
	if _, err := os.Stat(filepath.Join(dir, s.PIDFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("PID file left: %v", err)
	}
	// The credentials copied there are gone with the daemon.
	if want := []string{"state/n1.pem", "state/secret.pem"}; !reflect.DeepEqual(s.Copied, want) {
		t.Errorf("copied %q, want %q", s.Copied, want)
	}
	for _, f := range s.Copied {
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("credential %s left after stop: %v", f, err)
		}
	}
	if r, err := l.stop(ctx, s); err != nil || r != "not running" {
		t.Errorf("second stop: %q %v", r, err)
	}
	if st := l.status(ctx, s); !strings.HasPrefix(st, "daemon not running") {
		t.Errorf("status after stop: %q", st)
	}
}

// fakeRunner answers the launcher's scripts without running them.
type fakeRunner struct {
	mu      sync.Mutex
	starts  map[string]string // host name → start script
	order   []string          // hosts in the order their daemons were started
	onStart func(name string) // called, unlocked, before a start is answered
	stopped []string
	fail    string            // host whose start fails
	dead    map[string]string // host name → the log of its daemon, which exited at start
	checks  int               // status checks made
}

func (f *fakeRunner) Run(ctx context.Context, h hostLine, script string, stdin io.Reader) ([]byte, error) {
	if f.onStart != nil && strings.Contains(script, "nohup ") {
		f.onStart(h.Name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case strings.Contains(script, "nohup "):
		if h.Name == f.fail {
			return nil, errors.New("connection refused")
		}
		f.starts[h.Name] = script
		f.order = append(f.order, h.Name)
		return []byte(fmt.Sprintf("pid %d\n", 100+len(f.starts))), nil
	case strings.Contains(script, "kill -9"):
		f.stopped = append(f.stopped, h.Name)
		return []byte("stopped\n"), nil
	case strings.Contains(script, "tail -n"):
		f.checks++
		if log, ok := f.dead[h.Name]; ok {
			return []byte("daemon not running\n" + log), nil
		}
		return []byte("daemon running\nlog line"), nil
	}
	return nil, nil
}

// fakeVM is a master whose hosts join one per poll, except those never
// joining.
type fakeVM struct {
	mu     sync.Mutex
	names  []string
	next   []string
	halted bool
}

func (v *fakeVM) Hosts(ctx context.Context) ([]daemon.HostInfo, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.next) > 0 {
		v.names, v.next = append(v.names, v.next[0]), v.next[1:]
	}
	hosts := make([]daemon.HostInfo, len(v.names))
	for i, n := range v.names {
		hosts[i] = daemon.HostInfo{Name: n}
	}
	return hosts, nil
}

func (v *fakeVM) Halt(ctx context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.halted = true
	return nil
}

func (v *fakeVM) Close() error { return nil }

func testHosts(t *testing.T) []hostLine {
	hosts, err := parseHostfile(strings.NewReader("m1\nh2 cores=2\nh3\n"), "h")
	if err != nil {
		t.Fatal(err)
	}
	return hosts
}

func TestUpWaitsForEveryHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		run := &fakeRunner{starts: map[string]string{}}
		l := &launcher{run: run, cfg: launchConfig{Port: 7070, Poll: time.Second}}
		vm := &fakeVM{next: []string{"m1", "h3", "h2"}}
		dials := 0
		dial := func(ctx context.Context, addr string) (vmControl, error) {
			if addr != "m1:7070" {
				t.Errorf("dialled %s, want m1:7070", addr)
			}
			if dials++; dials < 3 {
				return nil, errors.New("not yet listening")
			}
			return vm, nil
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		addr, started, got, err := l.up(ctx, testHosts(t), dial)
		if err != nil {
			t.Fatal(err)
		}
		if addr != "m1:7070" || got != vm || len(started) != 3 {
			t.Fatalf("up: %s %v %d started", addr, got, len(started))
		}
		if !strings.Contains(run.starts["m1"], "'daemon' '--master'") {
			t.Errorf("master's start: %s", run.starts["m1"])
		}
		for _, h := range []string{"h2", "h3"} {
			if !strings.Contains(run.starts[h], "'--join' 'm1:7070'") {
				t.Errorf("%s's start does not join m1:7070: %s", h, run.starts[h])
			}
		}
		if !strings.Contains(run.starts["h2"], "'--cores' '2'") {
			t.Errorf("h2's start lacks its cores: %s", run.starts["h2"])
		}
		if dials != 3 {
			t.Errorf("dialled %d times, want 3 (two refused)", dials)
		}
		if len(run.stopped) != 0 {
			t.Errorf("stopped %v after a good start", run.stopped)
		}
	})
}

func TestUpStopsWhatItStartedOnFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		run := &fakeRunner{starts: map[string]string{}}
		l := &launcher{run: run, cfg: launchConfig{Port: 7070, Poll: time.Second}}
		vm := &fakeVM{next: []string{"m1", "h2"}} // h3 never joins
		dial := func(ctx context.Context, addr string) (vmControl, error) { return vm, nil }
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		_, started, _, err := l.up(ctx, testHosts(t), dial)
		if !errors.Is(err, errNotJoined) || started != nil {
			t.Fatalf("up with a host that never joins: %v, %d started", err, len(started))
		}
		if !strings.Contains(err.Error(), "h3 (h3):\ndaemon running\nlog line") {
			t.Errorf("error lacks the missing host's state: %v", err)
		}
		if len(run.stopped) != 3 || !vm.halted {
			t.Errorf("stopped %v (halted %v), want all three after a halt", run.stopped, vm.halted)
		}

		run = &fakeRunner{starts: map[string]string{}, fail: "h2"}
		l.run = run
		_, _, _, err = l.up(t.Context(), testHosts(t), dial)
		if err == nil || !strings.Contains(err.Error(), "h2: start the daemon: connection refused") {
			t.Fatalf("up with a host that cannot be started: %v", err)
		}
		if !reflect.DeepEqual(run.stopped, []string{"m1", "h2"}) && !reflect.DeepEqual(run.stopped, []string{"h2", "m1"}) {
			t.Errorf("stopped %v, want the master and h2 (h3 was never started)", run.stopped)
		}
	})
}

func TestDownHaltsThenStops(t *testing.T) {
	run := &fakeRunner{starts: map[string]string{}}
	l := &launcher{run: run}
	vm := &fakeVM{}
	started := []startedHost{{hostLine: hostLine{Name: "m1", Host: "m1"}}, {hostLine: hostLine{Name: "h2", Host: "h2"}}}
	res, err := l.down(t.Context(), vm, started)
	if err != nil || !vm.halted || len(res) != 2 || res[0].Result != "stopped" || res[1].Name != "h2" {
		t.Fatalf("down: %+v %v halted=%v", res, err, vm.halted)
	}
}

func TestUpState(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	if _, err := findStateFile("", ""); err == nil || !strings.Contains(err.Error(), "no virtual machine") {
		t.Fatalf("no state: %v", err)
	}
	f1, err := stateFileFor("/a/hosts")
	if err != nil {
		t.Fatal(err)
	}
	st := upState{Hostfile: "/a/hosts", Master: "m:7070", SSH: []string{"ssh"}, Hosts: []startedHost{{hostLine: hostLine{Name: "m"}, PID: 7}}}
	if err := writeUpState(f1, st); err != nil {
		t.Fatal(err)
	}
	if got, err := findStateFile("", ""); err != nil || got != f1 {
		t.Fatalf("the only state: %s %v", got, err)
	}
	back, err := readUpState(f1)
	if err != nil || !reflect.DeepEqual(back, st) {
		t.Fatalf("read back %+v %v", back, err)
	}
	if f, err := recordAdded("m:7070", startedHost{hostLine: hostLine{Name: "x"}}); err != nil || f != f1 {
		t.Fatalf("recordAdded: %s %v", f, err)
	}
	if back, _ = readUpState(f1); len(back.Hosts) != 2 || back.Hosts[1].Name != "x" {
		t.Errorf("added host not recorded: %+v", back.Hosts)
	}
	if f, err := recordAdded("other:7070", startedHost{}); err != nil || f != "" {
		t.Errorf("recordAdded for another master: %s %v", f, err)
	}
	f2, _ := stateFileFor("/b/hosts")
	if err := writeUpState(f2, upState{Hostfile: "/b/hosts"}); err != nil {
		t.Fatal(err)
	}
	if _, err := findStateFile("", ""); err == nil || !strings.Contains(err.Error(), "/a/hosts") || !strings.Contains(err.Error(), "/b/hosts") {
		t.Errorf("two states: %v", err)
	}
}
