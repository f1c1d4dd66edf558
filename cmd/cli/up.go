package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/pki"
)

// upState is what dpvm up records of a virtual machine it started, for
// dpvm down (and the console's add) to find.
type upState struct {
	Hostfile   string        `json:"hostfile,omitempty"` // absolute path
	Master     string        `json:"master"`             // the address clients dial
	Credential string        `json:"credential"`         // the local admin credential clients use
	SSH        []string      `json:"ssh"`                // the ssh command used
	Hosts      []startedHost `json:"hosts"`
}

// maxStateFile bounds a state file read back.
const maxStateFile = 16 << 20

// stateDir is where dpvm up keeps its state files: $XDG_STATE_HOME/dpvm,
// or ~/.local/state/dpvm.
func stateDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "dpvm"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	return filepath.Join(home, ".local", "state", "dpvm"), nil
}

// stateFileFor is the state file of the virtual machine started from the
// hostfile at the absolute path hostfile.
func stateFileFor(hostfile string) (string, error) {
	dir, err := stateDir()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(hostfile))
	return filepath.Join(dir, "up-"+hex.EncodeToString(sum[:6])+".json"), nil
}

func writeUpState(file string, st upState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return nil
}

func readUpState(file string) (upState, error) {
	var st upState
	f, err := os.Open(file)
	if err != nil {
		return st, fmt.Errorf("state: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxStateFile+1))
	if err != nil {
		return st, fmt.Errorf("state %s: %w", file, err)
	}
	if len(b) > maxStateFile {
		return st, fmt.Errorf("state %s: longer than %d bytes", file, maxStateFile)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("state %s: %w", file, err)
	}
	return st, nil
}

// findStateFile is the state file dpvm down acts on: the one given, the
// one of the hostfile given, or the only one there is.
func findStateFile(given, hostfile string) (string, error) {
	if given != "" {
		return given, nil
	}
	if hostfile != "" {
		abs, err := filepath.Abs(hostfile)
		if err != nil {
			return "", err
		}
		return stateFileFor(abs)
	}
	dir, err := stateDir()
	if err != nil {
		return "", err
	}
	files, _ := filepath.Glob(filepath.Join(dir, "up-*.json"))
	switch len(files) {
	case 0:
		return "", fmt.Errorf("no virtual machine started by 'dpvm up' is recorded in %s", dir)
	case 1:
		return files[0], nil
	}
	var hf []string
	for _, f := range files {
		if st, err := readUpState(f); err == nil {
			hf = append(hf, st.Hostfile)
		}
	}
	return "", fmt.Errorf("several virtual machines started by 'dpvm up': name the hostfile (%s)", strings.Join(hf, ", "))
}

// Flags of dpvm up and down, and the console's add, made anew for each
// command tree (urfave/cli writes parsed values into them).
func sshFlag() cli.Flag {
	return &cli.StringFlag{Name: "ssh", Value: "ssh -o BatchMode=yes", Usage: "ssh command and options, split as a shell would (OpenSSH; -p and -l come from the hostfile)"}
}

func parallelFlag() cli.Flag {
	return &cli.BoolFlag{Name: "parallel", Usage: "start the hosts' daemons all at once (quicker for many hosts; host IDs then follow the order they join in, not the hostfile's)"}
}

func acceptNewHostKeysFlag() cli.Flag {
	return &cli.BoolFlag{Name: "accept-new-host-keys", Usage: "record the ssh host key of a host never contacted before (ssh -o StrictHostKeyChecking=accept-new); a changed key is still refused"}
}

func copyFlag() cli.Flag {
	return &cli.BoolFlag{Name: "copy", Usage: "copy the dpvm binary (--bin) to each host's --remote-bin first"}
}

func binFlag() cli.Flag {
	return &cli.StringFlag{Name: "bin", Usage: "local binary --copy sends (default: this one; the hosts must be able to run it)"}
}

func remoteBinFlag() cli.Flag {
	return &cli.StringFlag{Name: "remote-bin", Usage: "the dpvm binary on the hosts (default: dpvm on the PATH; with --copy, REMOTE_DIR/dpvm)"}
}

func remoteDirFlag() cli.Flag {
	return &cli.StringFlag{Name: "remote-dir", Value: ".dpvm", Usage: "directory on each host for PID files, logs and the copied key (relative: to the login directory)"}
}

func daemonPortFlag() cli.Flag {
	return &cli.IntFlag{Name: "daemon-port", Value: 7070, Usage: "port every daemon listens on (UDP, all addresses), unless its flags=\"--listen ...\" says"}
}

func waitFlag() cli.Flag {
	return &cli.DurationFlag{Name: "wait", Value: 2 * time.Minute, Usage: "how long to wait for every host to join"}
}

func sshTimeoutFlag() cli.Flag {
	return &cli.DurationFlag{Name: "ssh-timeout", Value: time.Minute, Usage: "how long one ssh command may take"}
}

func stopGraceFlag() cli.Flag {
	return &cli.DurationFlag{Name: "stop-grace", Value: 5 * time.Second, Usage: "how long a daemon may take to exit after the halt, then after SIGTERM, before SIGKILL"}
}

func stateFlag() cli.Flag {
	return &cli.StringFlag{Name: "state", Usage: "state file recording what was started (default: under $XDG_STATE_HOME/dpvm, one per hostfile)"}
}

// launcherFrom builds the launcher the flags describe: the daemons'
// credentials come from --credentials (copied) or are already on the
// hosts (--remote-credentials).
func launcherFrom(c *cli.Context) (*launcher, []string, error) {
	ssh, err := splitWords(c.String("ssh"))
	if err != nil || len(ssh) == 0 {
		return nil, nil, fmt.Errorf("--ssh %q: want a command", c.String("ssh"))
	}
	if c.Bool("accept-new-host-keys") {
		ssh = append(ssh, acceptNewHostKeys...)
	}
	cfg := launchConfig{
		RemoteDir: c.String("remote-dir"), RemoteBin: c.String("remote-bin"),
		RemoteCreds: c.String("remote-credentials"), Port: c.Int("daemon-port"),
		StopGrace: c.Duration("stop-grace"), Parallel: c.Bool("parallel"),
	}
	if cfg.Port <= 0 || cfg.Port > 65535 {
		return nil, nil, fmt.Errorf("--daemon-port %d: out of range", cfg.Port)
	}
	if c.Bool("copy") {
		bin := c.String("bin")
		if bin == "" {
			if bin, err = os.Executable(); err != nil {
				return nil, nil, fmt.Errorf("--copy: %w", err)
			}
		}
		if cfg.CopyBin, err = os.ReadFile(bin); err != nil {
			return nil, nil, fmt.Errorf("--copy: %w", err)
		}
		if cfg.RemoteBin == "" {
			cfg.RemoteBin = cfg.RemoteDir + "/dpvm"
		}
	}
	if cfg.RemoteCreds == "" {
		dir, err := credentialsDir(c)
		if err != nil {
			return nil, nil, err
		}
		cfg.Creds = &upCreds{dir: dir}
	}
	return &launcher{run: sshRunner{command: ssh}, cfg: cfg}, ssh, nil
}

// credentialsDir is --credentials, absolute.
func credentialsDir(c *cli.Context) (string, error) {
	dir := c.String("credentials")
	if dir == "" {
		return "", errors.New("no credentials: give --credentials DIR (from 'dpvm keygen --out DIR') or --remote-credentials DIR")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("--credentials: %w", err)
	}
	return dir, nil
}

// clientVM is a vmControl through a daemon.Client.
type clientVM struct{ cl *daemon.Client }

func (v clientVM) Hosts(ctx context.Context) ([]daemon.HostInfo, error) { return v.cl.Hosts(ctx) }

func (v clientVM) Halt(ctx context.Context) error { return v.cl.Halt(ctx) }
func (v clientVM) Close() error                   { return v.cl.Close() }

// dialTry bounds one try to reach the master while it starts; dpvm up
// tries again until --wait.
const dialTry = 5 * time.Second

// dialClient is the dialFunc of the real daemons: each try is bounded by
// the dial timeout.
func dialClient(key *pki.Credential) dialFunc {
	return func(ctx context.Context, addr string) (vmControl, error) {
		dctx, cancel := context.WithTimeout(ctx, dialTry)
		defer cancel()
		cl, err := daemon.Dial(dctx, addr, key)
		if err != nil {
			return nil, err
		}
		return clientVM{cl}, nil
	}
}

func upCommand() *cli.Command {
	return &cli.Command{
		Name:      "up",
		Usage:     "start a virtual machine over ssh on the hosts of a hostfile",
		ArgsUsage: "HOSTFILE",
		Description: "A hostfile has a host per line ('#' comments):\n" +
			"  host [master] [user=U] [port=P] [name=N] [speed=S] [cores=C] [shared-dir=DIR] [flags=\"...\"]\n" +
			"port is ssh's; the master is the line with 'master', or the first. dpvm up starts the\n" +
			"master's daemon, then one on every other host joining it (nohup, PID file and log in\n" +
			"--remote-dir), one after another in hostfile order so that host IDs follow it (--parallel:\n" +
			"all at once), waits until all have joined and prints the host table. It records what\n" +
			"it started so that 'dpvm down HOSTFILE' stops it.\n" +
			"Credentials: --credentials DIR is the directory of 'dpvm keygen --out DIR'. Each daemon is\n" +
			"given DIR/host-NAME.pem (the master DIR/master.pem if it names the master's host, else\n" +
			"DIR/master-NAME.pem, and DIR/secret.pem), NAME the hostfile's; one missing is issued under\n" +
			"DIR/ca.pem and kept there. Clients (up itself, down, and you) use DIR/admin.pem.\n" +
			"ssh must know the hosts' keys (known_hosts), or --accept-new-host-keys records those of\n" +
			"hosts never contacted. A daemon that exits before joining (no dpvm on the host's PATH:\n" +
			"give --copy) fails up within seconds, with the end of its log. A host named by an ssh\n" +
			"alias is reached at the HostName ssh resolves it to (ssh -G).\n" +
			"  dpvm keygen --out creds && dpvm up hosts.txt --credentials creds --copy",
		Flags: []cli.Flag{credentialsFlag(), legacyKeyFlag(), sshFlag(), acceptNewHostKeysFlag(), copyFlag(), binFlag(), remoteBinFlag(), remoteDirFlag(), remoteCredsFlag(),
			parallelFlag(), daemonPortFlag(), waitFlag(), sshTimeoutFlag(), stopGraceFlag(), stateFlag(), jsonFlag()},
		Action: upAction,
	}
}

func upAction(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit(fmt.Sprintf("up: give one HOSTFILE, got %d arguments (see 'dpvm up --help')", c.NArg()), exitUsage)
	}
	hostfile, err := filepath.Abs(c.Args().First())
	if err != nil {
		return cli.Exit("up: "+err.Error(), exitUsage)
	}
	f, err := os.Open(hostfile)
	if err != nil {
		return cli.Exit("up: "+err.Error(), exitUsage)
	}
	hosts, err := parseHostfile(f, c.Args().First())
	f.Close()
	if err != nil {
		return cli.Exit("up: "+err.Error(), exitUsage)
	}
	if c.String("cluster-key") != "" {
		return cli.Exit(fmt.Sprintf("up: --cluster-key (DPVM_CLUSTER_KEY) is no longer taken: %v: %s", pki.ErrLegacyKey, pki.LegacyHint), exitUsage)
	}
	l, ssh, err := launcherFrom(c)
	if err != nil {
		return cli.Exit("up: "+err.Error(), exitUsage)
	}
	dir, err := credentialsDir(c)
	if err != nil {
		return cli.Exit("up: give --credentials DIR: up's own client needs DIR/admin.pem", exitUsage)
	}
	keyFile := upCreds{dir: dir}.admin()
	key, err := pki.LoadCredential(keyFile)
	if err != nil {
		return cli.Exit("up: "+err.Error(), exitUsage)
	}
	stateFile, err := findStateFile(c.String("state"), hostfile)
	if err != nil {
		return cli.Exit("up: "+err.Error(), exitFailed)
	}
	if _, err := os.Stat(stateFile); err == nil {
		return cli.Exit(fmt.Sprintf("up: a virtual machine from %s is recorded as up (%s): 'dpvm down %s' first", c.Args().First(), stateFile, c.Args().First()), exitFailed)
	}
	// ^C or SIGTERM while starting stops what was started, as a timeout does.
	sctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(sctx, c.Duration("wait"))
	defer cancel()
	l.cfg.Poll = 200 * time.Millisecond
	l.run = timedRunner{l.run, c.Duration("ssh-timeout")}
	if l.cfg.Creds != nil {
		if note := l.cfg.Creds.masterNote(hosts[0].Name); note != "" {
			fmt.Fprintf(c.App.ErrWriter, "dpvm up: %s\n", note)
		}
	}
	fmt.Fprintf(c.App.ErrWriter, "dpvm up: starting %d daemons (master %s)\n", len(hosts), hosts[0].Name)
	addr, started, vm, err := l.up(ctx, hosts, dialClient(key))
	if err != nil {
		return cli.Exit("up: "+err.Error(), exitFailed)
	}
	defer vm.Close()
	st := upState{Hostfile: hostfile, Master: addr, Credential: keyFile, SSH: ssh, Hosts: started}
	if err := writeUpState(stateFile, st); err != nil {
		return cli.Exit(fmt.Sprintf("up: the virtual machine is up at %s, but %v", addr, err), exitFailed)
	}
	info, err := vm.Hosts(c.Context)
	if err != nil {
		return cli.Exit("up: "+err.Error(), exitFailed)
	}
	if c.Bool("json") {
		if info == nil {
			info = []daemon.HostInfo{}
		}
		return printJSON(c.App.Writer, map[string]any{"master": addr, "credential": keyFile, "state": stateFile, "hosts": info})
	}
	if err := printHosts(c.App.Writer, info, false); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "dpvm up: %d hosts joined; use it with\n  export DPVM_MASTER=%s DPVM_CREDENTIAL=%s\nand stop it with 'dpvm down %s'\n",
		len(info), addr, keyFile, c.Args().First())
	return nil
}

// timedRunner bounds each remote command by a timeout.
type timedRunner struct {
	r       remoteRunner
	timeout time.Duration
}

func (t timedRunner) Run(ctx context.Context, h hostLine, script string, stdin io.Reader) ([]byte, error) {
	if t.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.timeout)
		defer cancel()
	}
	return t.r.Run(ctx, h, script, stdin)
}

// Resolve asks the runner it wraps, within the timeout, where h is.
func (t timedRunner) Resolve(ctx context.Context, h hostLine) (string, error) {
	r, ok := t.r.(hostResolver)
	if !ok {
		return h.Host, nil
	}
	if t.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.timeout)
		defer cancel()
	}
	return r.Resolve(ctx, h)
}

func downCommand() *cli.Command {
	return &cli.Command{
		Name:      "down",
		Usage:     "stop a virtual machine started by 'dpvm up'",
		ArgsUsage: "[HOSTFILE]",
		Description: "Halts the virtual machine through its master, then makes sure every daemon\n" +
			"'dpvm up' started (and the console's add) is gone: over ssh, by its PID file,\n" +
			"with SIGTERM and then SIGKILL after --stop-grace. Without HOSTFILE, the only\n" +
			"virtual machine recorded is stopped.",
		Flags:  []cli.Flag{stateFlag(), &cli.StringFlag{Name: "ssh", Usage: "ssh command (default: the one dpvm up used)"}, stopGraceFlag(), sshTimeoutFlag(), timeoutFlag(), jsonFlag()},
		Action: downAction,
	}
}

func downAction(c *cli.Context) error {
	if c.NArg() > 1 {
		return cli.Exit(fmt.Sprintf("down: give at most one HOSTFILE, got %d arguments", c.NArg()), exitUsage)
	}
	stateFile, err := findStateFile(c.String("state"), c.Args().First())
	if err != nil {
		return cli.Exit("down: "+err.Error(), exitFailed)
	}
	st, err := readUpState(stateFile)
	if err != nil {
		return cli.Exit("down: "+err.Error(), exitFailed)
	}
	ssh := st.SSH
	if c.String("ssh") != "" {
		if ssh, err = splitWords(c.String("ssh")); err != nil || len(ssh) == 0 {
			return cli.Exit(fmt.Sprintf("down: --ssh %q: want a command", c.String("ssh")), exitUsage)
		}
	}
	l := &launcher{run: timedRunner{sshRunner{command: ssh}, c.Duration("ssh-timeout")}, cfg: launchConfig{StopGrace: c.Duration("stop-grace")}}
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout")+2*c.Duration("stop-grace")+c.Duration("ssh-timeout"))
	defer cancel()
	var vm vmControl
	if key, err := pki.LoadCredential(st.Credential); err != nil {
		fmt.Fprintf(c.App.ErrWriter, "dpvm down: not halting through the master: %v\n", err)
	} else {
		dctx, dcancel := context.WithTimeout(ctx, c.Duration("timeout"))
		if vm, err = dialClient(key)(dctx, st.Master); err != nil {
			fmt.Fprintf(c.App.ErrWriter, "dpvm down: the master at %s does not answer (%v); stopping the daemons by their PID files\n", st.Master, err)
			vm = nil
		}
		dcancel()
	}
	if vm != nil {
		defer vm.Close()
	}
	res, err := l.down(ctx, vm, st.Hosts)
	if c.Bool("json") {
		if res == nil {
			res = []stopResult{}
		}
		_ = printJSON(c.App.Writer, res)
	} else {
		tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tHOST\tDAEMON\t")
		for _, r := range res {
			state := r.Result
			if r.Err != "" {
				state = "error: " + r.Err
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t\n", r.Name, r.Host, state)
		}
		_ = tw.Flush()
	}
	if err != nil {
		var failed []startedHost
		for i, r := range res {
			if r.Err != "" {
				failed = append(failed, st.Hosts[i])
			}
		}
		if len(failed) > 0 {
			st.Hosts = failed
			if werr := writeUpState(stateFile, st); werr != nil {
				err = errors.Join(err, werr)
			}
			return cli.Exit(fmt.Sprintf("down: %v (the hosts not stopped stay recorded in %s)", err, stateFile), exitFailed)
		}
	}
	if err := os.Remove(stateFile); err != nil {
		return cli.Exit("down: "+err.Error(), exitFailed)
	}
	return nil
}
