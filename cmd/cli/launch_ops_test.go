package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/pki"
)

// TestUpFailsFastWhenTheMasterDies: a master daemon that could not start
// (no dpvm on the host's PATH) fails up at its first check, long before
// --wait, with the end of its log.
func TestUpFailsFastWhenTheMasterDies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const msg = "nohup: failed to run command 'dpvm': No such file or directory"
		run := &fakeRunner{starts: map[string]string{}, dead: map[string]string{"m1": msg}}
		l := &launcher{run: run, cfg: launchConfig{Port: 7070, Poll: 200 * time.Millisecond}}
		dial := func(ctx context.Context, addr string) (vmControl, error) { return nil, errors.New("no answer") }
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		_, started, _, err := l.up(ctx, testHosts(t), dial)
		if !errors.Is(err, errDaemonExited) || started != nil {
			t.Fatalf("up with a master that exited: %v, %d started", err, len(started))
		}
		if ctx.Err() != nil {
			t.Fatalf("up waited out --wait before failing: %v", err)
		}
		if !strings.Contains(err.Error(), "m1 (m1)") || !strings.Contains(err.Error(), msg) {
			t.Errorf("error lacks the host and its log: %v", err)
		}
		if len(run.starts) != 1 || !slices.Equal(run.stopped, []string{"m1"}) {
			t.Errorf("started %d, stopped %v: want only the master, then stopped", len(run.starts), run.stopped)
		}
	})
}

// TestUpFailsFastWhenAHostDies: a host's daemon that exits before it
// joins fails up at the next check, with its log, and everything started
// is stopped.
func TestUpFailsFastWhenAHostDies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const msg = "daemon: load credential: open .dpvm/h3.pem: permission denied"
		run := &fakeRunner{starts: map[string]string{}, dead: map[string]string{"h3": msg}}
		l := &launcher{run: run, cfg: launchConfig{Port: 7070, Poll: 200 * time.Millisecond, AliveEvery: time.Second}}
		vm := &fakeVM{next: []string{"m1", "h2"}}
		dial := func(ctx context.Context, addr string) (vmControl, error) { return vm, nil }
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		_, _, _, err := l.up(ctx, testHosts(t), dial)
		if !errors.Is(err, errDaemonExited) || errors.Is(err, errNotJoined) || ctx.Err() != nil {
			t.Fatalf("up with a host whose daemon exited: %v (ctx %v)", err, ctx.Err())
		}
		if !strings.Contains(err.Error(), "h3 (h3)") || !strings.Contains(err.Error(), msg) || strings.Contains(err.Error(), "h2 (h2)") {
			t.Errorf("error does not name h3 alone with its log: %v", err)
		}
		if len(run.stopped) != 3 || !vm.halted {
			t.Errorf("stopped %v (halted %v), want all three after a halt", run.stopped, vm.halted)
		}
	})
}

// resolvingRunner is a fakeRunner that resolves ssh aliases.
type resolvingRunner struct {
	*fakeRunner
	addrs map[string]string
}

func (r resolvingRunner) Resolve(ctx context.Context, h hostLine) (string, error) {
	if a, ok := r.addrs[h.Host]; ok {
		return a, nil
	}
	return h.Host, nil
}

// TestUpDialsTheAliasAddress: a master named by an ssh alias is dialled,
// and joined, at the address ssh resolves the alias to, never at the alias.
func TestUpDialsTheAliasAddress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		run := resolvingRunner{&fakeRunner{starts: map[string]string{}}, map[string]string{"m1": "10.0.0.1"}}
		l := &launcher{run: timedRunner{run, time.Minute}, cfg: launchConfig{Port: 7070, Poll: time.Second}}
		vm := &fakeVM{next: []string{"m1", "h2", "h3"}}
		dial := func(ctx context.Context, addr string) (vmControl, error) {
			if addr != "10.0.0.1:7070" {
				return nil, errors.New("dialled " + addr)
			}
			return vm, nil
		}
		addr, _, _, err := l.up(t.Context(), testHosts(t), dial)
		if err != nil || addr != "10.0.0.1:7070" {
			t.Fatalf("up: %s %v", addr, err)
		}
		for _, h := range []string{"h2", "h3"} {
			if !strings.Contains(run.starts[h], "'--join' '10.0.0.1:7070'") {
				t.Errorf("%s's start does not join 10.0.0.1:7070: %s", h, run.starts[h])
			}
		}
	})
}

// TestSSHResolve reads an alias's HostName through the OpenSSH client's
// -G, with a configuration file of the test's own.
func TestSSHResolve(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("no ssh (OpenSSH client)")
	}
	cfg := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(cfg, []byte("Host alpha\n  HostName 10.213.0.1\n  User u\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := sshRunner{command: []string{"ssh", "-F", cfg, "-o", "BatchMode=yes"}}
	if got := s.resolveArgv(hostLine{Host: "alpha", Port: 22}); !slices.Equal(got, []string{"ssh", "-F", cfg, "-o", "BatchMode=yes", "-G", "-p", "22", "--", "alpha"}) {
		t.Errorf("argv %q", got)
	}
	for host, want := range map[string]string{"alpha": "10.213.0.1", "beta": "beta", "10.1.2.3": "10.1.2.3"} {
		if got, err := s.Resolve(t.Context(), hostLine{Host: host}); err != nil || got != want {
			t.Errorf("Resolve(%s) = %q %v, want %q", host, got, err, want)
		}
	}
	if _, err := parseSSHConfigHostname("user u\nport 22\n"); err == nil {
		t.Error("no hostname: want an error")
	}
}

func TestHostKeyError(t *testing.T) {
	h := hostLine{Host: "alpha"}
	if err := hostKeyError(h, "Permission denied (publickey)."); err != nil {
		t.Errorf("not a host key failure: %v", err)
	}
	err := hostKeyError(h, "No ED25519 host key is known for alpha and you have requested strict checking.\r\nHost key verification failed.\r\n")
	if !errors.Is(err, errHostKey) || !strings.Contains(err.Error(), "--accept-new-host-keys") || !strings.Contains(err.Error(), "ssh alpha") {
		t.Errorf("unknown key: %v", err)
	}
	err = hostKeyError(h, "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\nHost key verification failed.\n")
	if !errors.Is(err, errHostKey) || strings.Contains(err.Error(), "--accept-new-host-keys") || !strings.Contains(err.Error(), "ssh-keygen -R alpha") {
		t.Errorf("changed key: %v", err)
	}
	// Through sshRunner: an ssh that prints the failure.
	dir := t.TempDir()
	fake := filepath.Join(dir, "ssh")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'Host key verification failed.' >&2\nexit 255\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := (sshRunner{command: []string{fake}}).Run(t.Context(), h, "true", nil); !errors.Is(err, errHostKey) {
		t.Errorf("ssh refusing the key: %v", err)
	}
}

// TestAcceptNewHostKeysFlag: up's and add's --accept-new-host-keys adds
// StrictHostKeyChecking=accept-new to the ssh command (recorded for down).
func TestAcceptNewHostKeysFlag(t *testing.T) {
	for _, cmd := range []*cli.Command{upCommand(), addCommand()} {
		for _, accept := range []bool{false, true} {
			var ssh []string
			app := &cli.App{Name: "dpvm", Writer: io.Discard, ErrWriter: io.Discard, Flags: cmd.Flags,
				Action: func(c *cli.Context) error {
					var err error
					_, ssh, err = launcherFrom(c)
					return err
				}}
			args := []string{"dpvm", "--credentials", t.TempDir()}
			if accept {
				args = append(args, "--accept-new-host-keys")
			}
			if err := app.Run(args); err != nil {
				t.Fatalf("%s: %v", cmd.Name, err)
			}
			got := strings.Join(ssh, " ")
			if strings.Contains(got, "StrictHostKeyChecking=accept-new") != accept || !strings.HasPrefix(got, "ssh -o BatchMode=yes") {
				t.Errorf("%s --accept-new-host-keys=%v: ssh %q", cmd.Name, accept, got)
			}
		}
	}
}

// TestMasterNote: up says when keygen's master.pem names another host than
// the hostfile's master, and so goes unused.
func TestMasterNote(t *testing.T) {
	dir := t.TempDir()
	cl, err := pki.NewCluster(time.Now(), "master", "admin")
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	u := upCreds{dir: dir}
	if note := u.masterNote("master"); note != "" {
		t.Errorf("master.pem names the master: %q", note)
	}
	note := u.masterNote("n1")
	if !strings.Contains(note, "master-n1.pem") || !strings.Contains(note, "--master-name n1") {
		t.Errorf("master.pem names another host: %q", note)
	}
	if note := (upCreds{dir: t.TempDir()}).masterNote("n1"); note != "" {
		t.Errorf("no master.pem: %q", note)
	}
}

// startedVM is a master that lists the hosts whose daemons were started, as
// they would join, and remembers which it has listed.
type startedVM struct {
	run    *fakeRunner
	mu     sync.Mutex
	listed map[string]bool
}

func (v *startedVM) Hosts(ctx context.Context) ([]daemon.HostInfo, error) {
	v.run.mu.Lock()
	names := slices.Clone(v.run.order)
	v.run.mu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	hosts := make([]daemon.HostInfo, len(names))
	for i, n := range names {
		hosts[i] = daemon.HostInfo{Name: n}
		v.listed[n] = true
	}
	return hosts, nil
}

func (v *startedVM) Halt(ctx context.Context) error { return nil }
func (v *startedVM) Close() error                   { return nil }

// TestUpStartsInHostfileOrder: the hosts' daemons start one after another
// in hostfile order, each once the one before has joined, so that the
// master numbers them as the hostfile lists them; --parallel starts them
// all at once.
func TestUpStartsInHostfileOrder(t *testing.T) {
	hosts, err := parseHostfile(strings.NewReader("m1\nh2\nh3\nh4\nh5\n"), "h")
	if err != nil {
		t.Fatal(err)
	}
	for _, parallel := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			run := &fakeRunner{starts: map[string]string{}}
			vm := &startedVM{run: run, listed: map[string]bool{}}
			var early []string // hosts started before the one before them joined
			run.onStart = func(name string) {
				i := slices.IndexFunc(hosts, func(h hostLine) bool { return h.Name == name })
				vm.mu.Lock()
				defer vm.mu.Unlock()
				if i > 1 && !vm.listed[hosts[i-1].Name] {
					early = append(early, name)
				}
			}
			l := &launcher{run: run, cfg: launchConfig{Port: 7070, Poll: time.Second, Parallel: parallel}}
			dial := func(ctx context.Context, addr string) (vmControl, error) { return vm, nil }
			_, started, _, err := l.up(t.Context(), hosts, dial)
			if err != nil || len(started) != 5 {
				t.Fatalf("parallel %v: up: %v, %d started", parallel, err, len(started))
			}
			for i, s := range started {
				if s.Name != hosts[i].Name {
					t.Errorf("parallel %v: started %d is %s, want %s", parallel, i, s.Name, hosts[i].Name)
				}
			}
			if !parallel && (!slices.Equal(run.order, []string{"m1", "h2", "h3", "h4", "h5"}) || len(early) != 0) {
				t.Errorf("started in order %v, %v before the host before them joined", run.order, early)
			}
			if parallel && len(early) == 0 {
				t.Errorf("--parallel: every host waited for the one before it (order %v)", run.order)
			}
		})
	}
}
