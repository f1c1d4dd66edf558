package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/pki"
)

// consoleVMKey keys the console's master address and cluster key in the
// context its commands run with: add starts a daemon that joins that
// master with that key.
type consoleVMKey struct{}

type consoleVM struct {
	addr string
	key  *pki.ClusterKey
}

// withConsoleVM records the console's master address and key in ctx.
func withConsoleVM(ctx context.Context, addr string, key *pki.ClusterKey) context.Context {
	return context.WithValue(ctx, consoleVMKey{}, consoleVM{addr: addr, key: key})
}

// addControl is the console's add: start a daemon on a host over ssh, as
// dpvm up does, and wait for it to join.
func addControl() controlCommand {
	return controlCommand{
		cmd: &cli.Command{
			Name:      "add",
			Usage:     "start a daemon on another machine over ssh and join it to this virtual machine",
			ArgsUsage: "HOST [user=U] [port=P] [name=N] [speed=S] [cores=C] [shared-dir=DIR] [flags=\"...\"]",
			Description: "HOST and its options are a hostfile's line (see 'dpvm up --help'). The daemon joins\n" +
				"the console's master with the console's cluster key (copied to the host, or\n" +
				"--remote-cluster-key). When a 'dpvm up' recorded this virtual machine, the host\n" +
				"is added to its record, so that 'dpvm down' stops it too.\n" +
				"  add node4 user=dpvm cores=8 --copy",
			Flags: []cli.Flag{sshFlag, copyFlag, binFlag, remoteBinFlag, remoteDirFlag, remoteKeyFlag,
				daemonPortFlag, waitFlag, sshTimeoutFlag, stopGraceFlag, jsonFlag},
		},
		act: addAction,
	}
}

func addAction(c *cli.Context, cl *daemon.Client, ctx context.Context) error {
	vm, ok := ctx.Value(consoleVMKey{}).(consoleVM)
	if !ok {
		return cli.Exit("add: runs in the console only", 2)
	}
	if c.NArg() == 0 {
		return cli.Exit("add: no host named (see 'help add')", 2)
	}
	h, err := parseHostWords(c.Args().Slice())
	if err != nil {
		return cli.Exit("add: "+err.Error(), 2)
	}
	if h.Master {
		return cli.Exit("add: a virtual machine has one master: this one", 2)
	}
	l, _, err := launcherFrom(c, vm.key)
	if err != nil {
		return cli.Exit("add: "+err.Error(), 2)
	}
	l.cfg.Poll = 200 * time.Millisecond
	l.run = timedRunner{l.run, c.Duration("ssh-timeout")}
	// The console's per-command timeout does not bound starting a host:
	// --wait does.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Duration("wait"))
	defer cancel()
	// The errors of ssh carry its exit status, which is not add's: they
	// are reported as add's failure.
	s, err := l.start(wctx, h, vm.addr)
	if err != nil {
		return cli.Exit("add: "+err.Error(), 1)
	}
	if err := l.waitJoined(wctx, clientVM{cl}, []startedHost{s}); err != nil {
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 2*l.cfg.StopGrace+c.Duration("ssh-timeout"))
		defer scancel()
		if _, serr := l.stop(sctx, s); serr != nil {
			return cli.Exit(fmt.Sprintf("add: %v; stopping it: %v", err, serr), 1)
		}
		return cli.Exit("add: "+err.Error(), 1)
	}
	if file, err := recordAdded(vm.addr, s); err != nil {
		fmt.Fprintf(c.App.ErrWriter, "added %s, but not recorded for 'dpvm down': %v\n", s.Name, err)
	} else if file != "" {
		fmt.Fprintf(c.App.ErrWriter, "added %s; recorded in %s for 'dpvm down'\n", s.Name, file)
	} else {
		fmt.Fprintf(c.App.ErrWriter, "added %s (pid %d on %s; 'halt' stops it)\n", s.Name, s.PID, s.Host)
	}
	hosts, err := cl.Hosts(wctx)
	if err != nil {
		return err
	}
	return printHosts(c.App.Writer, hosts, c.Bool("json"))
}

// recordAdded adds s to the state of the virtual machine dpvm up started
// with its master at addr, if there is one, and returns the state file
// ("" when none).
func recordAdded(addr string, s startedHost) (string, error) {
	dir, err := stateDir()
	if err != nil {
		return "", err
	}
	files, _ := filepath.Glob(filepath.Join(dir, "up-*.json"))
	for _, f := range files {
		st, err := readUpState(f)
		if err != nil || st.Master != addr {
			continue
		}
		st.Hosts = append(st.Hosts, s)
		return f, writeUpState(f, st)
	}
	return "", nil
}
