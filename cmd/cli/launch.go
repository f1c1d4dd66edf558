package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/pki"
)

// This file holds the pieces that start a virtual machine's daemons on
// other machines, wait for them to join and stop them again: dpvm up and
// down, and the console's add. They run shell scripts on each host through
// a remoteRunner (ssh here; a batch system's launcher can be another).

// errNotJoined: a started daemon did not join the virtual machine in time.
var errNotJoined = errors.New("did not join")

// errDaemonExited: a started daemon is no longer running on its host
// (it could not start, or stopped before joining).
var errDaemonExited = errors.New("the daemon exited")

// errHostKey: ssh refused a host whose key is not known, or changed.
var errHostKey = errors.New("host key verification failed")

// A remoteRunner runs a POSIX shell script on a host, with stdin as its
// standard input (nil: none), and returns what it printed.
type remoteRunner interface {
	Run(ctx context.Context, h hostLine, script string, stdin io.Reader) ([]byte, error)
}

// maxRemoteOutput bounds what is kept of a remote script's output.
const maxRemoteOutput = 64 << 10

// sshRunner runs scripts with the OpenSSH client: command is the ssh
// command and its options (e.g. ssh -o BatchMode=yes); the host's port and
// user are added to it.
type sshRunner struct {
	command []string
}

// argv is the ssh command line that runs script on h.
func (s sshRunner) argv(h hostLine, script string) []string {
	args := append([]string(nil), s.command...)
	if h.Port != 0 {
		args = append(args, "-p", strconv.Itoa(h.Port))
	}
	if h.User != "" {
		args = append(args, "-l", h.User)
	}
	return append(args, "--", h.Host, script)
}

// Run runs script on h over ssh.
func (s sshRunner) Run(ctx context.Context, h hostLine, script string, stdin io.Reader) ([]byte, error) {
	if len(s.command) == 0 {
		return nil, errors.New("no ssh command")
	}
	argv := s.argv(h, script)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = time.Second
	cmd.Stdin = stdin
	var out limitedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		if herr := hostKeyError(h, out.String()); herr != nil {
			return out.Bytes(), herr
		}
		if msg := strings.TrimSpace(out.String()); msg != "" {
			return out.Bytes(), fmt.Errorf("%s: %w: %s", s.command[0], err, msg)
		}
		return out.Bytes(), fmt.Errorf("%s: %w", s.command[0], err)
	}
	return out.Bytes(), nil
}

// hostKeyError is the error, with what to do about it, of an ssh whose
// output says it refused h's host key; nil when it does not say so.
func hostKeyError(h hostLine, out string) error {
	if !strings.Contains(out, "Host key verification failed") {
		return nil
	}
	if strings.Contains(out, "HAS CHANGED") {
		return fmt.Errorf("%w: the key of %s has changed since it was recorded in known_hosts: if the machine was reinstalled, 'ssh-keygen -R %s' and connect again; otherwise do not trust it", errHostKey, h.Host, h.Host)
	}
	return fmt.Errorf("%w: the key of %s is not known: connect once with 'ssh %s' and check its fingerprint, or give --accept-new-host-keys to record the keys of hosts never seen before", errHostKey, h.Host, h.Host)
}

// acceptNewHostKeys is the ssh option --accept-new-host-keys adds: record
// the key of a host never seen, refuse one that changed.
var acceptNewHostKeys = []string{"-o", "StrictHostKeyChecking=accept-new"}

// A hostResolver says at which address a host's daemon is reached: the
// host's name in the hostfile may be an ssh alias that only ssh knows.
type hostResolver interface {
	Resolve(ctx context.Context, h hostLine) (string, error)
}

// resolveArgv is the ssh command line that prints the configuration ssh
// would use to reach h (ssh -G), whose hostname is h's address.
func (s sshRunner) resolveArgv(h hostLine) []string {
	args := append([]string(nil), s.command...)
	args = append(args, "-G")
	if h.Port != 0 {
		args = append(args, "-p", strconv.Itoa(h.Port))
	}
	if h.User != "" {
		args = append(args, "-l", h.User)
	}
	return append(args, "--", h.Host)
}

// Resolve is the host name ssh dials for h: its HostName in the ssh
// configuration (h.Host itself when there is none), read from ssh -G.
func (s sshRunner) Resolve(ctx context.Context, h hostLine) (string, error) {
	if len(s.command) == 0 {
		return "", errors.New("no ssh command")
	}
	argv := s.resolveArgv(h)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = time.Second
	var out limitedBuffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s -G %s: %w", s.command[0], h.Host, err)
	}
	return parseSSHConfigHostname(out.String())
}

// parseSSHConfigHostname is the hostname of ssh -G's output.
func parseSSHConfigHostname(out string) (string, error) {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "hostname "); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v), nil
		}
	}
	return "", errors.New("ssh -G printed no hostname")
}

// limitedBuffer keeps the first maxRemoteOutput bytes written to it.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxRemoteOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// launchConfig says how daemons are started on hosts. Relative remote
// paths are relative to the login directory.
type launchConfig struct {
	RemoteDir string // each host's PID files, logs and copied credentials
	RemoteBin string // the dpvm binary on each host
	CopyBin   []byte // when not nil, copied to RemoteBin first
	// Creds, when not nil, gives each daemon's credential (and the
	// master's secret), copied to the host.
	Creds       *upCreds
	RemoteCreds string        // the directory on the hosts holding NAME.pem and secret.pem, when Creds is nil
	Port        int           // the port daemons listen on, unless their flags say
	StopGrace   time.Duration // how long a stop waits for a daemon to exit, then after SIGTERM
	Poll        time.Duration // how often joins are checked
	// Parallel starts the hosts' daemons all at once rather than one after
	// another in hostfile order.
	Parallel bool
	// AliveEvery is how often, while waiting for them, the daemons not
	// yet joined are checked over ssh to be still running (default 2s).
	AliveEvery time.Duration
}

// A startedHost is a daemon started on a host: what dpvm down needs to
// stop it.
type startedHost struct {
	hostLine
	Bin            string `json:"bin"`
	PIDFile        string `json:"pid_file"`
	LogFile        string `json:"log_file"`
	CredentialFile string `json:"credential_file"`
	// Copied are the credential files up copied to the host (its
	// credential, the master's secret), removed when it is stopped.
	Copied []string `json:"copied,omitempty"`
	PID    int      `json:"pid"`
}

// launcher starts and stops daemons on hosts.
type launcher struct {
	run remoteRunner
	cfg launchConfig
}

func (l *launcher) remoteDir() string {
	if l.cfg.RemoteDir == "" {
		return ".dpvm"
	}
	return l.cfg.RemoteDir
}

// files are the remote paths of h's PID file, log, credential and
// cluster secret (the master's).
func (l *launcher) files(h hostLine) (pid, log, cred, secret string) {
	dir := l.remoteDir()
	cdir := l.cfg.RemoteCreds
	if l.cfg.Creds != nil || cdir == "" {
		cdir = dir
	}
	return path.Join(dir, h.Name+".pid"), path.Join(dir, h.Name+".log"), path.Join(cdir, h.Name+".pem"), path.Join(cdir, pki.SecretFile)
}

// masterAddr is the address hosts join and clients dial: the master's
// host (its address as ssh resolves it, when the runner can say) at its
// daemon's port.
func (l *launcher) masterAddr(ctx context.Context, m hostLine) (string, error) {
	port, err := m.listenPort(l.cfg.Port)
	if err != nil {
		return "", fmt.Errorf("%s: %w", m.Name, err)
	}
	host := m.Host
	if r, ok := l.run.(hostResolver); ok {
		if a, err := r.Resolve(ctx, m); err == nil {
			host = a
		}
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}

// daemonArgs are the arguments of h's daemon: the master's when join is
// empty, else a host's joining the master at join. The hostfile's flags
// come last and so override.
func (l *launcher) daemonArgs(h hostLine, join, credFile, secretFile string) []string {
	args := []string{"daemon"}
	if join == "" {
		args = append(args, "--master")
	} else {
		args = append(args, "--join", join)
	}
	args = append(args, "--listen", net.JoinHostPort("0.0.0.0", strconv.Itoa(l.cfg.Port)), "--name", h.Name, "--credential", credFile)
	if join == "" {
		args = append(args, "--secret", secretFile)
	}
	if h.Speed != 0 {
		args = append(args, "--speed", strconv.FormatFloat(h.Speed, 'g', -1, 64))
	}
	if h.Cores != 0 {
		args = append(args, "--cores", strconv.Itoa(h.Cores))
	}
	if h.SharedDir != "" {
		args = append(args, "--shared-dir", h.SharedDir)
	}
	return append(args, h.Flags...)
}

// aliveFunc is a shell function: is process $1 a running dpvm daemon
// (not a zombie, and, where /proc says, running 'daemon')?
const aliveFunc = `alive() { kill -0 "$1" 2>/dev/null || return 1; [ -r /proc/$1/stat ] || return 0; case "$(cut -d' ' -f3 /proc/$1/stat)" in Z|X) return 1;; esac; tr '\0' ' ' </proc/$1/cmdline | grep -q ' daemon '; }
`

// copyScript writes its standard input to file (mode) atomically.
func copyScript(file string, mode string) string {
	return "set -e\numask 077\nmkdir -p " + shellQuote(path.Dir(file)) + "\n" +
		"t=" + shellQuote(file+".tmp.") + "$$\ncat >\"$t\"\nchmod " + mode + " \"$t\"\nmv -f \"$t\" " + shellQuote(file) + "\n"
}

// startScript starts a daemon in the background, its output in log and
// its PID in pid, refusing when one recorded there still runs.
func startScript(argv []string, pid, log string) string {
	return aliveFunc + "set -e\numask 077\nmkdir -p " + shellQuote(path.Dir(pid)) + " " + shellQuote(path.Dir(log)) + "\n" +
		"f=" + shellQuote(pid) + "\n" +
		"if [ -f \"$f\" ] && alive \"$(cat \"$f\")\"; then echo \"a daemon already runs there: pid $(cat \"$f\") in $f\" >&2; exit 3; fi\n" +
		"nohup " + shellJoin(argv) + " >" + shellQuote(log) + " 2>&1 </dev/null &\n" +
		"echo $! >\"$f\"\necho \"pid $!\"\n"
}

// stopScript waits up to grace seconds for the daemon of the PID file pid
// to exit (a halted virtual machine stops its daemons), then sends it
// SIGTERM and waits as long again, then SIGKILL; it prints what it took:
// "not running", "stopped", "terminated" or "killed". The files remove
// (the credentials copied for the daemon) are removed once it is gone.
func stopScript(pid string, grace int, remove []string) string {
	g := strconv.Itoa(grace)
	rm := ""
	if len(remove) > 0 {
		rm = "rm -f " + shellJoin(remove) + "\n"
	}
	return aliveFunc + "f=" + shellQuote(pid) + "\n" +
		"if [ ! -f \"$f\" ]; then\n" + rm + "echo 'not running'; exit 0\nfi\n" +
		"p=$(cat \"$f\")\n" +
		"i=0; while alive \"$p\" && [ $i -lt " + g + " ]; do sleep 1; i=$((i+1)); done\n" +
		"r=stopped\n" +
		"if alive \"$p\"; then kill \"$p\" 2>/dev/null || true; r=terminated; i=0; while alive \"$p\" && [ $i -lt " + g + " ]; do sleep 1; i=$((i+1)); done; fi\n" +
		"if alive \"$p\"; then kill -9 \"$p\" 2>/dev/null || true; r=killed; fi\n" +
		"rm -f \"$f\"\n" + rm + "echo \"$r\"\n"
}

// statusScript says whether the daemon of pid runs and prints its log's end.
func statusScript(pid, log string) string {
	return aliveFunc + "f=" + shellQuote(pid) + "\n" +
		"if [ -f \"$f\" ] && alive \"$(cat \"$f\")\"; then echo 'daemon running'; else echo 'daemon not running'; fi\n" +
		"tail -n 20 " + shellQuote(log) + " 2>/dev/null || true\n"
}

// start starts h's daemon: the master when join is empty, else a host
// joining the master at join. It copies the binary first when the
// configuration says so, and the daemon's credential (and the master's
// secret) from the credentials directory.
func (l *launcher) start(ctx context.Context, h hostLine, join string) (startedHost, error) {
	s, err := l.prepare(ctx, h, join)
	if err != nil {
		return s, err
	}
	return l.launch(ctx, s, join)
}

// prepare copies to h what its daemon needs before it starts: the binary
// when the configuration says so, its credential (and the master's
// secret) from the credentials directory. The copied credentials are
// listed in the result, for stop to remove.
func (l *launcher) prepare(ctx context.Context, h hostLine, join string) (startedHost, error) {
	pid, log, cred, secret := l.files(h)
	s := startedHost{hostLine: h, Bin: l.cfg.RemoteBin, PIDFile: pid, LogFile: log, CredentialFile: cred}
	if s.Bin == "" {
		s.Bin = "dpvm"
	}
	if l.cfg.CopyBin != nil {
		if _, err := l.run.Run(ctx, h, copyScript(s.Bin, "755"), bytes.NewReader(l.cfg.CopyBin)); err != nil {
			return s, fmt.Errorf("%s: copy the binary to %s: %w", h.Name, s.Bin, err)
		}
	}
	if l.cfg.Creds != nil {
		pem, err := l.cfg.Creds.credential(h.Name, join == "")
		if err != nil {
			return s, fmt.Errorf("%s: %w", h.Name, err)
		}
		if _, err := l.run.Run(ctx, h, copyScript(cred, "600"), bytes.NewReader(pem)); err != nil {
			return s, fmt.Errorf("%s: copy its credential to %s: %w", h.Name, cred, err)
		}
		s.Copied = append(s.Copied, cred)
		if join == "" {
			sec, err := l.cfg.Creds.secret()
			if err != nil {
				return s, fmt.Errorf("%s: %w", h.Name, err)
			}
			if _, err := l.run.Run(ctx, h, copyScript(secret, "600"), bytes.NewReader(sec)); err != nil {
				return s, fmt.Errorf("%s: copy the cluster secret to %s: %w", h.Name, secret, err)
			}
			s.Copied = append(s.Copied, secret)
		}
	}
	return s, nil
}

// launch starts the daemon of the prepared host s: the master when join is
// empty, else a host joining the master at join.
func (l *launcher) launch(ctx context.Context, s startedHost, join string) (startedHost, error) {
	h := s.hostLine
	_, _, cred, secret := l.files(h)
	argv := append([]string{s.Bin}, l.daemonArgs(h, join, cred, secret)...)
	out, err := l.run.Run(ctx, h, startScript(argv, s.PIDFile, s.LogFile), nil)
	if err != nil {
		return s, fmt.Errorf("%s: start the daemon: %w", h.Name, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "pid "); ok {
			s.PID, _ = strconv.Atoi(p)
		}
	}
	if s.PID == 0 {
		return s, fmt.Errorf("%s: start the daemon: no PID in %q", h.Name, out)
	}
	return s, nil
}

// stop makes sure s's daemon is gone and says how.
func (l *launcher) stop(ctx context.Context, s startedHost) (string, error) {
	grace := int((l.cfg.StopGrace + time.Second - 1) / time.Second)
	out, err := l.run.Run(ctx, s.hostLine, stopScript(s.PIDFile, grace, s.Copied), nil)
	if err != nil {
		return "", fmt.Errorf("%s: stop the daemon: %w", s.Name, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// status reports whether s's daemon runs, with the end of its log.
func (l *launcher) status(ctx context.Context, s startedHost) string {
	out, err := l.run.Run(ctx, s.hostLine, statusScript(s.PIDFile, s.LogFile), nil)
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(out))
}

// A vmControl is a connection to a running virtual machine's master, as
// the launcher needs it.
type vmControl interface {
	// Hosts lists the hosts that joined.
	Hosts(ctx context.Context) ([]daemon.HostInfo, error)
	// Halt stops the virtual machine.
	Halt(ctx context.Context) error
	Close() error
}

// dialFunc connects to the master at addr.
type dialFunc func(ctx context.Context, addr string) (vmControl, error)

// up starts the master (hosts[0]) and then the other hosts' daemons, one
// after another in order (Parallel: all at once), and waits until all have
// joined or ctx ends. On failure it stops what it
// started, and the error carries the state of the hosts that did not
// join. It returns the master's address, the started daemons and a
// connection to the master.
func (l *launcher) up(ctx context.Context, hosts []hostLine, dial dialFunc) (string, []startedHost, vmControl, error) {
	if len(hosts) == 0 || !hosts[0].Master {
		return "", nil, nil, errors.New("no master host")
	}
	addr, err := l.masterAddr(ctx, hosts[0])
	if err != nil {
		return "", nil, nil, err
	}
	var started []startedHost
	var vm vmControl
	// fail stops what was started, halting through the master when it
	// answers; stopping goes on past ctx's end.
	fail := func(err error) (string, []startedHost, vmControl, error) {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*l.cfg.StopGrace+30*time.Second)
		defer cancel()
		if _, serr := l.down(sctx, vm, started); serr != nil {
			err = fmt.Errorf("%w; stopping what was started: %v", err, serr)
		}
		if vm != nil {
			vm.Close()
		}
		return addr, nil, nil, err
	}
	m, err := l.start(ctx, hosts[0], "")
	if err != nil {
		return fail(err)
	}
	started = append(started, m)
	if vm, err = l.waitMaster(ctx, addr, m, dial); err != nil {
		if errors.Is(err, errDaemonExited) {
			return fail(fmt.Errorf("master %w", err))
		}
		return fail(fmt.Errorf("master %s at %s: %w\n%s", m.Name, addr, err, l.status(context.WithoutCancel(ctx), m)))
	}
	// The other hosts get their files all at once. On a failure, what was
	// started is stopped, and what was copied removed.
	others := hosts[1:]
	prepared, err := forAll(len(others), func(i int) (startedHost, error) { return l.prepare(ctx, others[i], addr) })
	withCopies := func(ps []startedHost) {
		for _, p := range ps {
			if len(p.Copied) > 0 {
				started = append(started, p)
			}
		}
	}
	if err != nil {
		withCopies(prepared)
		return fail(err)
	}
	if l.cfg.Parallel {
		rest, err := forAll(len(prepared), func(i int) (startedHost, error) { return l.launch(ctx, prepared[i], addr) })
		if err != nil {
			// Those whose start failed too: ssh may fail after the start.
			started = append(started, prepared...)
			return fail(err)
		}
		started = append(started, rest...)
		if err := l.waitJoined(ctx, vm, started); err != nil {
			return fail(err)
		}
		return addr, started, vm, nil
	}
	// One after another in hostfile order, each once the one before has
	// joined: the master numbers hosts as they join, so their IDs follow
	// the hostfile.
	for i, p := range prepared {
		s, err := l.launch(ctx, p, addr)
		started = append(started, s) // stopped on failure too: ssh may fail after the start
		if err == nil {
			err = l.waitJoined(ctx, vm, []startedHost{s})
		}
		if err != nil {
			withCopies(prepared[i+1:])
			return fail(err)
		}
	}
	return addr, started, vm, nil
}

// forAll runs f(0) to f(n-1) at once; it returns the results of those
// that succeeded, in order, and the errors of the others.
func forAll(n int, f func(i int) (startedHost, error)) ([]startedHost, error) {
	res := make([]startedHost, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { res[i], errs[i] = f(i) })
	}
	wg.Wait()
	var ok []startedHost
	for i, s := range res {
		if errs[i] == nil {
			ok = append(ok, s)
		}
	}
	return ok, errors.Join(errs...)
}

// waitMaster dials the master until it answers or ctx ends, and fails
// at once when its daemon m is found no longer running.
func (l *launcher) waitMaster(ctx context.Context, addr string, m startedHost, dial dialFunc) (vmControl, error) {
	var last error
	checked := time.Now()
	for {
		vm, err := dial(ctx, addr)
		if err == nil {
			return vm, nil
		}
		last = err
		if time.Since(checked) >= l.aliveEvery() {
			if err := l.checkAlive(ctx, []startedHost{m}); err != nil {
				return nil, err
			}
			checked = time.Now()
		}
		if err := l.pause(ctx); err != nil {
			return nil, fmt.Errorf("%w (last: %v)", err, last)
		}
	}
}

// aliveEvery is how often waiting daemons are checked to be running.
func (l *launcher) aliveEvery() time.Duration {
	if l.cfg.AliveEvery <= 0 {
		return 2 * time.Second
	}
	return l.cfg.AliveEvery
}

// checkAlive checks over ssh, all at once, that the daemons of started
// still run; the error names those that do not, with the end of their
// logs. A host that cannot be asked is not counted as exited.
func (l *launcher) checkAlive(ctx context.Context, started []startedHost) error {
	errs := make([]error, len(started))
	var wg sync.WaitGroup
	for i, s := range started {
		wg.Go(func() {
			out, err := l.run.Run(ctx, s.hostLine, statusScript(s.PIDFile, s.LogFile), nil)
			if err != nil {
				return
			}
			first, rest, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
			if strings.TrimSpace(first) == "daemon not running" {
				if rest = strings.TrimSpace(rest); rest == "" {
					rest = "(its log " + s.LogFile + " is empty)"
				}
				errs[i] = fmt.Errorf("%s (%s): %w; the end of its log %s:\n%s", s.Name, s.Host, errDaemonExited, s.LogFile, rest)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitJoined polls the master until every started daemon has joined or
// ctx ends; then the error names the missing hosts and their state.
// Every AliveEvery it checks that the daemons not yet joined still run,
// and fails at once when one does not.
func (l *launcher) waitJoined(ctx context.Context, vm vmControl, started []startedHost) error {
	var missing []startedHost
	var last error
	checked := time.Now()
	for {
		hosts, err := vm.Hosts(ctx)
		last = err
		if err == nil {
			missing = missingHosts(started, hosts)
			if len(missing) == 0 {
				return nil
			}
			if time.Since(checked) >= l.aliveEvery() {
				if err := l.checkAlive(ctx, missing); err != nil {
					return err
				}
				checked = time.Now()
			}
		}
		if err := l.pause(ctx); err != nil {
			break
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var b strings.Builder
	for _, s := range missing {
		fmt.Fprintf(&b, "\n%s (%s):\n%s", s.Name, s.Host, l.status(sctx, s))
	}
	if last != nil {
		return fmt.Errorf("waiting for the hosts to join: %w", last)
	}
	return fmt.Errorf("%d of %d hosts %w in time:%s", len(missing), len(started), errNotJoined, b.String())
}

func missingHosts(started []startedHost, hosts []daemon.HostInfo) []startedHost {
	joined := map[string]bool{}
	for _, h := range hosts {
		joined[h.Name] = true
	}
	var missing []startedHost
	for _, s := range started {
		if !joined[s.Name] {
			missing = append(missing, s)
		}
	}
	return missing
}

// pause waits one poll period, or returns ctx's error.
func (l *launcher) pause(ctx context.Context) error {
	p := l.cfg.Poll
	if p <= 0 {
		p = 200 * time.Millisecond
	}
	t := time.NewTimer(p)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// A stopResult is what stopping one host's daemon took.
type stopResult struct {
	Name   string `json:"name"`
	Host   string `json:"host"`
	Result string `json:"result"` // not running, stopped, terminated, killed
	Err    string `json:"error,omitempty"`
}

// down halts the virtual machine through vm (when not nil), then makes
// sure every started daemon is gone, all hosts at once.
func (l *launcher) down(ctx context.Context, vm vmControl, started []startedHost) ([]stopResult, error) {
	var errs []error
	if vm != nil {
		if err := vm.Halt(ctx); err != nil {
			errs = append(errs, fmt.Errorf("halt: %w", err))
		}
	}
	res := make([]stopResult, len(started))
	serrs := make([]error, len(started))
	var wg sync.WaitGroup
	for i, s := range started {
		wg.Go(func() {
			r, err := l.stop(ctx, s)
			res[i] = stopResult{Name: s.Name, Host: s.Host, Result: r}
			if err != nil {
				res[i].Err, serrs[i] = err.Error(), err
			}
		})
	}
	wg.Wait()
	return res, errors.Join(append(errs, serrs...)...)
}
