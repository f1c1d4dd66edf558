package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon"
)

// addSpec is add's name, help and own flags: start a daemon on a host over
// ssh, as dpvm up does, joining a running virtual machine's master with
// a credential for its name, and wait for it to join. The console's add and
// 'dpvm add' give it their actions.
func addSpec() *cli.Command {
	return &cli.Command{
		Name:      "add",
		Usage:     "start a daemon on another machine over ssh and join it to a running virtual machine",
		ArgsUsage: "HOST [user=U] [port=P] [name=N] [speed=S] [cores=C] [shared-dir=DIR] [flags=\"...\"]",
		Description: "HOST and its options are a hostfile's line (see 'dpvm up --help'). The daemon joins\n" +
			"the master (the console's, or --master) with its credential: DIR/host-NAME.pem of\n" +
			"--credentials DIR, issued under DIR/ca.pem if missing, copied to the host (or\n" +
			"--remote-credentials). When a 'dpvm up' recorded this virtual machine, the host\n" +
			"is added to its record, so that 'dpvm down' stops it too.\n" +
			"  dpvm add node4 user=dpvm cores=8 --copy --master node1:7070 --credential creds/admin.pem --credentials creds",
		Flags: []cli.Flag{sshFlag(), acceptNewHostKeysFlag(), copyFlag(), binFlag(), remoteBinFlag(), remoteDirFlag(), credentialsFlag(), remoteCredsFlag(),
			daemonPortFlag(), waitFlag(), sshTimeoutFlag(), stopGraceFlag(), jsonFlag()},
	}
}

// addCommand is 'dpvm add': add on the master --master names.
func addCommand() *cli.Command {
	cmd := addSpec()
	cmd.Flags = vmFlags(cmd.Flags...)
	cmd.Action = withClient(func(c *cli.Context, cl *daemon.Client, _ context.Context) error {
		return addAction(c, c.String("master"), cl)
	})
	return cmd
}

// addCommand is the console's add, on the console's master and client.
func (con *console) addCommand() *cli.Command {
	cmd := addSpec()
	cmd.Action = func(c *cli.Context) error {
		cl, err := con.client(c.Context)
		if err != nil {
			return fmt.Errorf("add: %w", err)
		}
		return addAction(c, con.addr, cl)
	}
	return cmd
}

func addAction(c *cli.Context, master string, cl *daemon.Client) error {
	if c.NArg() == 0 {
		return cli.Exit("add: no host named: give HOST and its options, as a hostfile line", exitUsage)
	}
	h, err := parseHostWords(c.Args().Slice())
	if err != nil {
		return cli.Exit("add: "+err.Error(), exitUsage)
	}
	if h.Master {
		return cli.Exit("add: a virtual machine has one master: this one", exitUsage)
	}
	l, _, err := launcherFrom(c)
	if err != nil {
		return cli.Exit("add: "+err.Error(), exitUsage)
	}
	l.cfg.Poll = 200 * time.Millisecond
	l.run = timedRunner{l.run, c.Duration("ssh-timeout")}
	// --wait bounds starting the host, not the console's per-command
	// timeout; ^C in the console cancels it.
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("wait"))
	defer cancel()
	// The errors of ssh carry its exit status, which is not add's: they
	// are reported as add's failure.
	s, err := l.start(ctx, h, master)
	if err != nil {
		return cli.Exit("add: "+err.Error(), exitFailed)
	}
	if err := l.waitJoined(ctx, clientVM{cl}, []startedHost{s}); err != nil {
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 2*l.cfg.StopGrace+c.Duration("ssh-timeout"))
		defer scancel()
		if _, serr := l.stop(sctx, s); serr != nil {
			return cli.Exit(fmt.Sprintf("add: %v; stopping it: %v", err, serr), exitFailed)
		}
		return cli.Exit("add: "+err.Error(), exitFailed)
	}
	if file, err := recordAdded(master, s); err != nil {
		fmt.Fprintf(c.App.ErrWriter, "added %s, but not recorded for 'dpvm down': %v\n", s.Name, err)
	} else if file != "" {
		fmt.Fprintf(c.App.ErrWriter, "added %s; recorded in %s for 'dpvm down'\n", s.Name, file)
	} else {
		fmt.Fprintf(c.App.ErrWriter, "added %s (pid %d on %s; 'halt' stops it)\n", s.Name, s.PID, s.Host)
	}
	hosts, err := cl.Hosts(ctx)
	if err != nil {
		return fmt.Errorf("add: %w", err)
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
