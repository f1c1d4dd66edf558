package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/load"
	"github.com/dpvm/dpvm/daemon/metrics"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/task"
)

// Flags shared by the commands that talk to a running virtual machine.
// Each command tree makes its own: urfave/cli writes into a flag the value
// it parses, and from the environment.
func masterAddrFlag() cli.Flag {
	return &cli.StringFlag{Name: "master", Usage: "address of the master daemon", EnvVars: []string{"DPVM_MASTER"}}
}

// credentialFlag is --credential: a certificate issued under the cluster
// CA and its key.
func credentialFlag() cli.Flag {
	return &cli.StringFlag{Name: "credential", Usage: "credential file: a certificate issued under the cluster CA and its key ('dpvm keygen', 'dpvm cert')", EnvVars: []string{"DPVM_CREDENTIAL"}}
}

// legacyKeyFlag is the flag older releases took a cluster key file with:
// it is refused with the command that moves to credentials.
func legacyKeyFlag() cli.Flag {
	return &cli.StringFlag{Name: "cluster-key", Hidden: true, EnvVars: []string{"DPVM_CLUSTER_KEY"}}
}

// jsonFlag is --json: print the result as JSON.
func jsonFlag() cli.Flag { return &cli.BoolFlag{Name: "json", Usage: "print JSON"} }

func daemonCommand() *cli.Command {
	return &cli.Command{
		Name:  "daemon",
		Usage: "run a daemon: the master of a new virtual machine (--master) or a host joining one (--join)",
		Description: "Start the master:  dpvm daemon --master --listen 0.0.0.0:7070 --credential creds/master.pem --secret creds/secret.pem\n" +
			"Join it:           dpvm daemon --join master.example:7070 --listen 0.0.0.0:7070 --credential node2.pem\n" +
			"(credentials from 'dpvm keygen --out creds' and 'dpvm cert host --ca creds/ca.pem --name node2 --out node2.pem';\n" +
			"a daemon's name is its certificate's; a host is handed the cluster secret by the master when it joins)\n" +
			"The daemon runs until the virtual machine is halted ('dpvm halt'), it is deleted, it loses\n" +
			"the master, or it gets SIGINT/SIGTERM. Tasks' output is printed by the master.",
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "master", Usage: "start a new virtual machine with this daemon as its master"},
			&cli.StringFlag{Name: "join", Usage: "address of the master to join"},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7070", Usage: "UDP address to listen on (0.0.0.0:7070 or [::]:7070: every address of the machine)"},
			&cli.StringFlag{Name: "advertise", Usage: "HOST:PORT the other daemons dial to reach this one (default: a host is reached at the address its master sees it come from, the master at the address its hosts join it by)"},
			&cli.StringFlag{Name: "name", Usage: "host name (default: the credential's; must agree with it)"},
			credentialFlag(), legacyKeyFlag(),
			&cli.StringSliceFlag{Name: "allow-dir", Usage: "master: a directory besides --shared-dir that 'dpvm checkpoint --dir' and 'dpvm restart' may name (repeatable)"},
			&cli.StringFlag{Name: "revoked", Usage: "master: revocation list file ('dpvm cert revoke' adds to it): re-read when it changes, handed to every host", EnvVars: []string{"DPVM_REVOKED"}},
			&cli.StringFlag{Name: "secret", Usage: "cluster secret file (from 'dpvm keygen'): required by the master; a host gets the master's when it joins", EnvVars: []string{"DPVM_SECRET"}},
			&cli.Float64Flag{Name: "speed", Usage: "this host's speed factor α for the scheduler: 1 the reference machine, 2 twice as slow (default: calibrated at start)"},
			&cli.IntFlag{Name: "cores", Usage: "cores to report (default: this machine's)"},
			&cli.DurationFlag{Name: "heartbeat", Value: time.Second, Usage: "heartbeat period"},
			&cli.StringFlag{Name: "routes", Value: daemon.RoutesDemand, Usage: "how a move's route reaches the hosts, the same on every daemon: demand (to the task's origin, old and new host; the others learn it from refusals and by asking the origin) or broadcast (to every host)"},
			&cli.StringFlag{Name: "detector", Value: daemon.DetectorSwim, Usage: "failure detector, the same on every daemon: swim (hosts probe each other and report deaths; the master checks the accused before it deletes it, and hears no pings) or master (hosts ping the master every heartbeat)"},
			&cli.DurationFlag{Name: "dead-after", Usage: "silence after which a suspected host (or the master) is given up (default 5 heartbeats; an overloaded master widens it up to --max-health+1 times)"},
			&cli.DurationFlag{Name: "suspect-after", Usage: "master: least silence after which a host is suspected, shown by conf (default 2 heartbeats)"},
			&cli.IntFlag{Name: "max-health", Usage: "master: how far an overloaded master widens --dead-after: at most this plus 1 times (default 4)"},
			&cli.Float64Flag{Name: "join-rate", Usage: "master: registrations admitted a second; the others are told to retry later (default 64; negative: no limit)"},
			&cli.IntFlag{Name: "join-burst", Usage: "master: registrations admitted at once (default 32)"},
			&cli.StringFlag{Name: "shared-dir", Usage: "directory every host shares, for indirect migration"},
			&cli.StringFlag{Name: "placement", Value: "roundrobin", Usage: "master: where tasks spawned anywhere go: " + daemon.Placements},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "master: seed of the placement policies that probe random hosts"},
			&cli.DurationFlag{Name: "sched-period", Usage: "master: run the Dynamic-SED scheduler every δT (e.g. 3m, the paper's; 0: off)"},
			&cli.StringFlag{Name: "sched-via", Value: "direct", Usage: "master: how the scheduler's migrations move checkpoints: direct or indirect"},
			&cli.IntFlag{Name: "max-users", Usage: "interactive users tolerated before this host's tasks move away"},
			&cli.BoolFlag{Name: "emulate", Usage: "really slow this host's tasks to match a declared --speed and injected load (emulation, for experiments on one machine)"},
			&cli.StringFlag{Name: "load-source", Value: "proc", Usage: "where the host's load comes from: proc (measured), static (none; emulate with 'dpvm load inject') or trace (replay --load-trace)"},
			&cli.StringFlag{Name: "load-trace", Usage: "trace file to replay (the simulator's format; 'dpvm sim sed --write-trace' makes one): emulation"},
			&cli.StringFlag{Name: "trace-host", Usage: "which host of the trace this daemon plays (default: its --name)"},
			&cli.Float64Flag{Name: "trace-speedup", Value: 1, Usage: "trace seconds per second of replay"},
			&cli.DurationFlag{Name: "move-timeout", Value: 10 * time.Second, Usage: "how long a migrating task may take to reach a safe point"},
			&cli.BoolFlag{Name: "no-tasks", Usage: "master: place no tasks on the master's host unless asked for by name (its loss then takes no task with it)"},
			&cli.BoolFlag{Name: "recover", Usage: "master: rebuild a virtual machine whose master was lost from its hosts, which register again (same address and key)"},
			&cli.IntFlag{Name: "traffic-budget", Usage: "`MIB` of memory this daemon gives to what the network brings it, all connections together: frames being read and clients' calls until answered (a quarter), messages not yet received (a half), QUIC receive windows (a quarter) (default 2048)"},
			&cli.DurationFlag{Name: "master-grace", Value: time.Minute, Usage: "host: run on this long without a master, registering again with one restarted at its address, before stopping (0: stop at once)"},
		}, observeFlags()...),
		Action: func(c *cli.Context) error {
			if c.Bool("master") == (c.String("join") != "") {
				return cli.Exit("daemon: give either --master or --join ADDR", 2)
			}
			if mib := c.Int("traffic-budget"); mib < 0 || mib > 1<<30 {
				return cli.Exit(fmt.Sprintf("daemon: --traffic-budget %d: want MiB between 1 and %d (0: the default)", mib, 1<<30), 2)
			}
			key, err := loadCredential(c)
			if err != nil {
				return cli.Exit("daemon: "+err.Error(), 2)
			}
			var ring *pki.Keyring
			if f := c.String("secret"); f != "" {
				if ring, err = pki.LoadKeyring(f); err != nil {
					return cli.Exit("daemon: "+err.Error(), 2)
				}
			}
			placer, err := daemon.NewPlacer(c.String("placement"), c.Uint64("seed"))
			if err != nil {
				return cli.Exit("daemon: "+err.Error(), 2)
			}
			if det := c.String("detector"); det != daemon.DetectorMaster && det != daemon.DetectorSwim {
				return cli.Exit(fmt.Sprintf("daemon: --detector %q: want %s or %s", det, daemon.DetectorMaster, daemon.DetectorSwim), 2)
			}
			if rt := c.String("routes"); rt != daemon.RoutesBroadcast && rt != daemon.RoutesDemand {
				return cli.Exit(fmt.Sprintf("daemon: --routes %q: want %s or %s", rt, daemon.RoutesBroadcast, daemon.RoutesDemand), 2)
			}
			via, err := daemon.ParseVia(c.String("sched-via"))
			if err != nil {
				return cli.Exit("daemon: "+err.Error(), 2)
			}
			var src load.Source
			switch c.String("load-source") {
			case "proc":
				src = &load.Proc{}
			case "static":
				src = load.Static{}
			case "trace":
				host := c.String("trace-host")
				if host == "" {
					host = c.String("name")
				}
				tr, err := load.OpenTrace(c.String("load-trace"), load.TraceConfig{Host: host, Start: time.Now(), Speedup: c.Float64("trace-speedup"), Loop: true})
				if err != nil {
					return cli.Exit("daemon: --load-trace: "+err.Error(), 2)
				}
				src = tr
			default:
				return cli.Exit(fmt.Sprintf("daemon: --load-source %q: want proc, static or trace", c.String("load-source")), 2)
			}
			speed, err := load.ResolveSpeed(c.Float64("speed"), 200*time.Millisecond)
			if err != nil {
				return cli.Exit("daemon: "+err.Error(), 2)
			}
			token, err := statusToken(c)
			if err != nil {
				return cli.Exit("daemon: "+err.Error(), 2)
			}
			var met *metrics.Metrics
			if c.String("metrics-listen") != "" || c.String("http") != "" {
				met = metrics.New(metrics.Options{}) // the status page shows its event logs
			}
			obs, err := startObservers(c, met, c.App.ErrWriter)
			if err != nil {
				return cli.Exit("daemon: "+err.Error(), 2)
			}
			defer obs.close()
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			d, err := daemon.Start(ctx, daemon.Config{
				Name: c.String("name"), Listen: c.String("listen"), Advertise: c.String("advertise"), Master: c.Bool("master"), Join: c.String("join"),
				Credential: key, CredentialFile: c.String("credential"), Secret: ring, RevokedFile: c.String("revoked"), AllowDirs: c.StringSlice("allow-dir"), Speed: 1 / speed.Alpha, Cores: c.Int("cores"),
				Heartbeat: c.Duration("heartbeat"), DeadAfter: c.Duration("dead-after"), SuspectAfter: c.Duration("suspect-after"), Detector: c.String("detector"), Routes: c.String("routes"),
				MaxHealth: c.Int("max-health"), JoinRate: c.Float64("join-rate"), JoinBurst: c.Int("join-burst"),
				SharedDir: c.String("shared-dir"), MoveTimeout: c.Duration("move-timeout"), TrafficBudget: int64(c.Int("traffic-budget")) << 20,
				Recover: c.Bool("recover"), MasterGrace: graceFlag(c.Duration("master-grace")), MasterNoTasks: c.Bool("no-tasks"),
				Fault:  os.Getenv("DPVM_FAULT"), // failure injection for tests
				Placer: placer,
				Load:   src, Alpha: speed.Alpha, MaxUsers: c.Int("max-users"),
				Emulate: c.Bool("emulate"), Throttle: speed.Throttle,
				Sched:  daemon.SchedConfig{Period: c.Duration("sched-period"), Via: via},
				Output: masterOutput(c), Logger: loggerFrom(c), AuditLogger: auditLogger(c), Metrics: met,
			})
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			obs.started(d)
			if err := obs.startStatus(c, d, token, c.App.ErrWriter); err != nil {
				hctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = d.Halt(hctx)
				return cli.Exit("daemon: "+err.Error(), 1)
			}
			role := "host"
			if c.Bool("master") {
				role = "master"
			}
			fmt.Fprintf(c.App.ErrWriter, "dpvm daemon: %s %s (%v) listening on %s\n", role, d.Name(), d.HostID(), d.Addr())
			// SIGHUP re-reads the credential file at once (the daemon
			// also notices a change at its next heartbeat).
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
		wait:
			for {
				select {
				case <-hup:
					if err := d.ReloadCredential(); err != nil {
						fmt.Fprintf(c.App.ErrWriter, "dpvm daemon: SIGHUP: %v\n", err)
					}
				case <-d.Done():
					break wait
				case <-ctx.Done():
					hctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					_ = d.Halt(hctx)
					break wait
				}
			}
			if err := d.Err(); err != nil {
				return cli.Exit("daemon: "+err.Error(), 1)
			}
			return nil
		},
	}
}

// masterOutput is where a daemon prints tasks' output: the master prints
// everyone's; a host forwards its tasks' output to the master.
// graceFlag maps --master-grace 0 (stop at once) to the daemon's
// negative value; the daemon's zero means its default.
func graceFlag(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

func masterOutput(c *cli.Context) io.Writer {
	if c.Bool("master") {
		return c.App.Writer
	}
	return nil
}

// connect dials the master named by --master with the credential named
// by --credential.
func connect(c *cli.Context) (*daemon.Client, context.Context, context.CancelFunc, error) {
	addr := c.String("master")
	if addr == "" {
		return nil, nil, nil, cli.Exit(commandName(c)+": no virtual machine named: give --master ADDR or set DPVM_MASTER", 2)
	}
	key, err := loadCredential(c)
	if err != nil {
		return nil, nil, nil, cli.Exit(commandName(c)+": "+err.Error(), 2)
	}
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	cl, err := daemon.Dial(ctx, addr, key)
	if err != nil {
		cancel()
		return nil, nil, nil, cli.Exit(commandName(c)+": "+err.Error(), 1)
	}
	return cl, ctx, cancel, nil
}

func timeoutFlag() cli.Flag {
	return &cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "give up after this long"}
}

func vmFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{masterAddrFlag(), credentialFlag(), legacyKeyFlag(), timeoutFlag()}, extra...)
}

// withClient runs f with a connection to the virtual machine, turning its
// error into a one-line message.
func withClient(f clientAction) cli.ActionFunc {
	return func(c *cli.Context) error {
		cl, ctx, cancel, err := connect(c)
		if err != nil {
			return err
		}
		defer cancel()
		defer cl.Close()
		if err := f(c, cl, ctx); err != nil {
			var ec cli.ExitCoder
			if errors.As(err, &ec) {
				return err
			}
			if errors.Is(err, context.Canceled) {
				return cli.Exit(commandName(c)+": interrupted", exitInterrupted)
			}
			return cli.Exit(withContext(commandName(c), err).Error(), exitFailed)
		}
		return nil
	}
}

// withContext prefixes err with the command's name, once: an error that
// already begins with it ("migrate t1:2 to h3: …", from the daemon) is
// left as it is.
func withContext(name string, err error) error {
	msg := err.Error()
	verb, _, _ := strings.Cut(name, " ")
	if strings.HasPrefix(msg, name+":") || strings.HasPrefix(msg, verb+" ") {
		return err
	}
	return fmt.Errorf("%s: %w", name, err)
}

// commandName is the full name of the command c runs, without the
// program's: "sched status".
func commandName(c *cli.Context) string {
	var names []string
	for _, x := range c.Lineage() {
		if x.Command != nil && x.Command.Name != "" && x.Command.Name != c.App.Name && (len(names) == 0 || names[0] != x.Command.Name) {
			names = append([]string{x.Command.Name}, names...)
		}
	}
	return strings.Join(names, " ")
}

// A controlCommand acts on a running virtual machine through a connected
// client. The one-shot CLI form (command) dials the master for each run;
// the console runs the same command on its own long-lived connection.
type controlCommand struct {
	cmd *cli.Command // name, usage and the command's own flags; no Action
	act clientAction
}

// clientAction is what a control command does once connected.
type clientAction func(c *cli.Context, cl *daemon.Client, ctx context.Context) error

// command is the one-shot CLI form: the connection flags come first and
// each run dials the master.
func (cc controlCommand) command() *cli.Command {
	cc.cmd.Flags = vmFlags(cc.cmd.Flags...)
	cc.cmd.Action = withClient(cc.act)
	return cc.cmd
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func confCommand() *cli.Command { return confControl().command() }

func confControl() controlCommand {
	return controlCommand{
		cmd: &cli.Command{
			Name:  "conf",
			Usage: "list the hosts of a running virtual machine (SPEED is 1/α: 1 the reference machine, 0.5 twice as slow; the status page shows α)",
			Flags: []cli.Flag{jsonFlag()},
		},
		act: func(c *cli.Context, cl *daemon.Client, ctx context.Context) error {
			hosts, x, err := cl.Conf(ctx)
			if err != nil {
				return err
			}
			if err := printHosts(c.App.Writer, hosts, c.Bool("json")); err != nil || c.Bool("json") || x.DeadAfter == 0 {
				return err
			}
			_, err = fmt.Fprintf(c.App.Writer, "failure detection: %v\n", x)
			return err
		},
	}
}

func printHosts(w io.Writer, hosts []daemon.HostInfo, asJSON bool) error {
	if asJSON {
		if hosts == nil {
			hosts = []daemon.HostInfo{}
		}
		return printJSON(w, hosts)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tADDRESS\tCORES\tSPEED\tLOAD\tTASKS\tBUILD\t")
	for _, h := range hosts {
		name := h.Name
		if h.Master {
			name += " (master)"
		}
		switch h.Liveness {
		case "suspected":
			name += fmt.Sprintf(" (suspected: silent %v)", time.Duration(h.SilentMS)*time.Millisecond)
		case "rejoining":
			name += " (rejoining)"
		}
		fmt.Fprintf(tw, "%v\t%s\t%s\t%d\t%s\t%.2f\t%d\t%s\t\n", h.ID, name, h.Addr, h.Cores, formatSpeed(h.Speed), h.Load, h.Tasks, buildLabel(h.Build))
	}
	return tw.Flush()
}

// formatSpeed is a host's speed (1/α: 1 the reference machine, 0.5 twice
// as slow) to three significant digits, as conf shows it.
func formatSpeed(s float64) string { return strconv.FormatFloat(s, 'g', 3, 64) }

// buildLabel is a host's build in one word: its version, its revision's
// first 12 digits, its Go version and its task registry's fingerprint.
func buildLabel(b daemon.Build) string {
	if b.Version == "" {
		return "-"
	}
	rev := b.Revision
	if dirty := strings.HasSuffix(rev, "+dirty"); len(rev) > 12 {
		rev = rev[:12]
		if dirty {
			rev += "+dirty"
		}
	}
	if rev == "" {
		rev = "?"
	}
	return fmt.Sprintf("%s/%s/%s/%s", b.Version, rev, b.Go, b.Registry)
}

func psCommand() *cli.Command { return psControl().command() }

func psControl() controlCommand {
	return controlCommand{
		cmd: &cli.Command{
			Name:  "ps",
			Usage: "list the tasks of a running virtual machine",
			Flags: []cli.Flag{jsonFlag(), &cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "include exited tasks"}},
		},
		act: func(c *cli.Context, cl *daemon.Client, ctx context.Context) error {
			ts, jobs, err := cl.PS(ctx, c.Bool("all"))
			if err != nil {
				return err
			}
			return printPS(c.App.Writer, ts, jobs, c.Bool("json"))
		},
	}
}

func printTasks(w io.Writer, ts []daemon.TaskInfo, asJSON bool) error {
	return printPS(w, ts, nil, asJSON)
}

// psTask is a task as ps --json prints it: with its job's checkpoint
// progress.
type psTask struct {
	daemon.TaskInfo
	Checkpoint *daemon.JobCheckpointStatus `json:"checkpoint,omitempty"`
}

// printPS prints the tasks, then each job's checkpoint progress and its
// warnings; with asJSON, one array of the tasks, each of a job carrying
// its job's progress as "checkpoint".
func printPS(w io.Writer, ts []daemon.TaskInfo, jobs []daemon.JobCheckpointStatus, asJSON bool) error {
	byJob := map[uint64]*daemon.JobCheckpointStatus{}
	for i := range jobs {
		byJob[jobs[i].Job] = &jobs[i]
	}
	if asJSON {
		out := make([]psTask, len(ts))
		for i, t := range ts {
			out[i] = psTask{TaskInfo: t, Checkpoint: byJob[t.Job]}
		}
		return printJSON(w, out)
	}
	if err := printTaskTable(w, ts); err != nil {
		return err
	}
	if len(jobs) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tEVERY\tLAST CHECKPOINT\tAGE\tHELD UP BY\tLAST FAILURE\t")
	for _, j := range jobs {
		every, last, held := "-", "none", ""
		if j.EverySeconds > 0 {
			every = secs(j.EverySeconds).String()
		}
		if j.Last != 0 {
			last = fmt.Sprint(j.Last)
		}
		if len(j.HeldUpBy) > 0 {
			held = fmt.Sprintf("%s (%v)", strings.Join(j.HeldUpBy, ","), secs(j.HeldUpSeconds))
		}
		fmt.Fprintf(tw, "j%d\t%s\t%s\t%v\t%s\t%s\t\n", j.Job, every, last, secs(j.AgeSeconds).Round(time.Millisecond), held, j.Failed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, j := range jobs {
		if j.Warning != "" {
			fmt.Fprintf(w, "warning: %s\n", j.Warning)
		}
	}
	return nil
}

// secs is a duration of s seconds.
func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func printTaskTable(w io.Writer, ts []daemon.TaskInfo) error {
	// Tasks of a job together, in job order, then the tasks of no job.
	ts = slices.Clone(ts)
	slices.SortStableFunc(ts, func(a, b daemon.TaskInfo) int {
		if (a.Job == 0) != (b.Job == 0) {
			return cmp.Compare(b.Job, a.Job) // no job last
		}
		return cmp.Compare(a.Job, b.Job)
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TID\tTYPE\tHOST\tSTATE\tSTATUS\tPARENT\tJOB\tMEM\tSAFE POINT\t")
	for _, t := range ts {
		st := ""
		if t.State != daemon.Running {
			st = fmt.Sprint(t.Status)
			if t.Err != "" {
				st += " (" + t.Err + ")"
			}
		}
		mem, safe := "", ""
		if t.State == daemon.Running {
			mem = fmt.Sprintf("%.1f MiB", float64(t.MemBytes)/(1<<20))
			// Time since the last safe point; "waiting" in a receive that is one.
			safe = "waiting"
			if t.SinceSafePointMS > 0 {
				safe = (time.Duration(t.SinceSafePointMS * float64(time.Millisecond))).Round(time.Millisecond).String() + " ago"
			}
		}
		job := ""
		if t.Job != 0 {
			job = fmt.Sprintf("j%d", t.Job)
		}
		fmt.Fprintf(tw, "%v\t%s\t%s\t%v\t%s\t%v\t%s\t%s\t%s\t\n", t.TID, t.Type, t.Host, t.State, st, t.Parent, job, mem, safe)
	}
	return tw.Flush()
}

func spawnCommand() *cli.Command { return spawnControl().command() }

func spawnControl() controlCommand {
	return controlCommand{
		cmd: &cli.Command{
			Name:      "spawn",
			Usage:     "start tasks on a running virtual machine",
			ArgsUsage: "TYPE [-- program flags | JSON state]",
			Description: "TYPE is a program (as 'dpvm run --list' shows; its flags follow '--') or a\n" +
				"registered task type (its initial state may follow as a JSON object of its fields).\n" +
				"  dpvm spawn hello -- -n 8\n" +
				"  dpvm spawn examples.pi.worker -n 2 --host h2 '{\"Lo\":0,\"Hi\":1000}'\n" +
				"-n N starts N tasks as one job, as PVM's console 'spawn -N' does: the first is\n" +
				"the job's root, and the tasks share the job's groups.\n" +
				"Tasks' output is printed by the master daemon.",
			Flags: []cli.Flag{jsonFlag(),
				&cli.IntFlag{Name: "count", Aliases: []string{"n"}, Value: 1, Usage: "number of tasks, started as one job"},
				&cli.IntFlag{Name: "min", Usage: "a parallel job mapped with Dynamic-SED: at least this many tasks (with --max)"},
				&cli.IntFlag{Name: "max", Usage: "a parallel job mapped with Dynamic-SED: at most this many tasks (0: no bound)"},
				&cli.StringFlag{Name: "host", Usage: "host to start them on (default: the master's placement)"},
				checkpointEveryFlag(), keepFlag(),
			},
		},
		act: func(c *cli.Context, cl *daemon.Client, ctx context.Context) error {
			if c.NArg() == 0 {
				return cli.Exit("spawn: no task type named (see 'dpvm spawn --help')", 2)
			}
			typ, state, err := spawnState(c.Args().First(), c.Args().Tail())
			if err != nil {
				return cli.Exit("spawn: "+err.Error(), 2)
			}
			var tids []task.TID
			if c.Int("min") > 0 || c.Int("max") > 0 {
				tids, err = cl.SpawnJob(ctx, typ, state, c.Int("min"), c.Int("max"))
			} else {
				var opts daemon.JobOptions
				if opts, err = jobOptions(c); err != nil {
					return cli.Exit("spawn: "+err.Error(), 2)
				}
				tids, err = cl.SpawnOneJob(ctx, typ, state, c.Int("count"), c.String("host"), opts)
			}
			if len(tids) > 0 || err == nil {
				if c.Bool("json") {
					if tids == nil {
						tids = []task.TID{}
					}
					_ = printJSON(c.App.Writer, map[string]any{"tids": tids})
				} else {
					for _, t := range tids {
						fmt.Fprintln(c.App.Writer, t)
					}
				}
			}
			return err
		},
	}
}

// spawnState resolves a spawn's TYPE and arguments: a program's root task
// built from its flags, or a task type with an optional JSON state.
func spawnState(name string, args []string) (string, []byte, error) {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if p, ok := task.LookupProgram(name); ok {
		root, err := setupProgram(p, args, io.Discard)
		if err != nil {
			return "", nil, fmt.Errorf("%s: %w", name, err)
		}
		return task.EncodeState(root)
	}
	t, err := task.New(name, nil)
	if err != nil {
		return "", nil, fmt.Errorf("%w (programs: %s; task types: %s)", err, programNames(), strings.Join(task.Types(), ", "))
	}
	switch len(args) {
	case 0:
	case 1:
		dec := json.NewDecoder(strings.NewReader(args[0]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(t); err != nil {
			return "", nil, fmt.Errorf("state of %s: %w", name, err)
		}
	default:
		return "", nil, fmt.Errorf("a task type takes at most one argument, its state as JSON; got %d", len(args))
	}
	b, err := msgpack.Marshal(t)
	return name, b, err
}

func killCommand() *cli.Command { return killControl().command() }

func killControl() controlCommand {
	return controlCommand{
		cmd: &cli.Command{
			Name:      "kill",
			Usage:     "kill tasks, or whole jobs (jN, as ps shows them), of a running virtual machine",
			ArgsUsage: "TID|JOB...",
			Flags:     []cli.Flag{jsonFlag()},
		},
		act: func(c *cli.Context, cl *daemon.Client, ctx context.Context) error {
			if c.NArg() == 0 {
				return cli.Exit("kill: no TID given", exitUsage)
			}
			var tids []task.TID
			var jobs []uint64
			for _, a := range c.Args().Slice() {
				if job, err := parseJob(a); err == nil && strings.HasPrefix(a, "j") {
					jobs = append(jobs, job)
					continue
				}
				tid, err := task.ParseTID(a)
				if err != nil {
					return cli.Exit("kill: "+err.Error(), exitUsage)
				}
				tids = append(tids, tid)
			}
			killed := []task.TID{}
			jobTasks := map[string]int{}
			var errs []error
			for _, tid := range tids {
				if err := cl.Kill(ctx, tid); err != nil {
					errs = append(errs, err)
				} else {
					killed = append(killed, tid)
				}
			}
			for _, job := range jobs {
				n, err := cl.KillJob(ctx, job)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				jobTasks[fmt.Sprintf("j%d", job)] = n
				if !c.Bool("json") {
					fmt.Fprintf(c.App.Writer, "job j%d: %d tasks killed\n", job, n)
				}
			}
			if c.Bool("json") {
				out := map[string]any{"killed": killed}
				if len(jobs) > 0 {
					out["jobs"] = jobTasks // tasks killed, by job
				}
				if err := printJSON(c.App.Writer, out); err != nil {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		},
	}
}

func deleteCommand() *cli.Command { return deleteControl().command() }

func deleteControl() controlCommand {
	return controlCommand{
		cmd: &cli.Command{
			Name:      "delete",
			Usage:     "remove hosts from a running virtual machine (their daemons stop)",
			ArgsUsage: "HOST...",
			Flags:     []cli.Flag{jsonFlag()},
		},
		act: func(c *cli.Context, cl *daemon.Client, ctx context.Context) error {
			if c.NArg() == 0 {
				return cli.Exit("delete: no host given", exitUsage)
			}
			deleted := []string{}
			var errs []error
			for _, h := range c.Args().Slice() {
				if err := cl.Delete(ctx, h); err != nil {
					errs = append(errs, err)
				} else {
					deleted = append(deleted, h)
				}
			}
			if c.Bool("json") {
				if err := printJSON(c.App.Writer, map[string]any{"deleted": deleted}); err != nil {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		},
	}
}

func haltCommand() *cli.Command { return haltControl().command() }

func haltControl() controlCommand {
	return controlCommand{
		cmd: &cli.Command{
			Name:  "halt",
			Usage: "stop a running virtual machine: every task and every daemon",
			Flags: []cli.Flag{jsonFlag()},
		},
		act: func(c *cli.Context, cl *daemon.Client, ctx context.Context) error {
			if err := cl.Halt(ctx); err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, map[string]any{"halted": true, "master": cl.Master().Name})
			}
			_, err := fmt.Fprintln(c.App.Writer, "virtual machine halted")
			return err
		},
	}
}

func migrateCommand() *cli.Command { return migrateControl().command() }
