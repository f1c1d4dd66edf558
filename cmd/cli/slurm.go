package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/ckpt/jobset"
	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/load"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/examples/npb"
	"github.com/dpvm/dpvm/task"
)

// slurmCommand is `dpvm slurm [flags] [--] PROGRAM ARGS…` or `dpvm slurm
// [flags] npb KERNEL [--class C] [--np N]`, run from a Slurm batch script:
// it starts a virtual machine on the allocation's nodes, runs the program
// as a job with periodic checkpoints, resumes it from its newest checkpoint
// when the batch script runs again after a requeue, and checkpoints it
// before leaving when Slurm signals the job.
func slurmCommand() *cli.Command {
	return &cli.Command{
		Name:      "slurm",
		Usage:     "run a program on a virtual machine of the Slurm allocation this runs in, resuming it from its checkpoint after a requeue",
		ArgsUsage: "[--] PROGRAM [program flags] | npb KERNEL [--class C] [--np N]",
		Description: "Run from a batch script (see cmd/dpvm/deploy/slurm/README.md). Reads the allocation\n" +
			"(SLURM_JOB_NODELIST, SLURM_JOB_ID, SLURM_CPUS_PER_TASK), starts one daemon per node\n" +
			"with srun (the master on the first node), each reporting the cores Slurm gave it\n" +
			"(its step's SLURM_CPUS_ON_NODE: '#SBATCH --cpus-per-task=N'), waits until\n" +
			"all have joined and runs the program as a job that is checkpointed every\n" +
			"--checkpoint-every into the state directory. If that directory already holds a\n" +
			"complete checkpoint (the same job requeued, or the same --state-dir), the job\n" +
			"resumes from the newest one instead, on however many nodes there are now.\n" +
			"On SIGTERM (scancel, requeue, or '#SBATCH --signal=B:TERM@120' before the time\n" +
			"limit) the job is checkpointed within --grace, then everything stops.\n" +
			"Flags come before the program; everything after its name belongs to it.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "shared-dir", Usage: "directory every node sees (default: dpvm-shared under SLURM_SUBMIT_DIR)"},
			&cli.StringFlag{Name: "state-dir", Usage: "this job's directory of checkpoints and key, relative to --shared-dir (default: slurm-$SLURM_JOB_ID, so a requeued job finds its own)"},
			&cli.DurationFlag{Name: "checkpoint-every", Value: time.Minute, Usage: "take a coordinated checkpoint of the job this often"},
			keepFlag(),
			&cli.DurationFlag{Name: "grace", Value: 90 * time.Second, Usage: "on SIGTERM: time to checkpoint the job and stop the daemons"},
			&cli.DurationFlag{Name: "join-timeout", Value: 2 * time.Minute, Usage: "how long the daemons may take to start and join"},
			&cli.IntFlag{Name: "port", Value: 7070, Usage: "UDP port of the master daemon on the first node (the other daemons take any free port)"},
			&cli.StringFlag{Name: "master-host", Usage: "address the daemons reach the first node by (default: its Slurm node name)"},
			&cli.StringFlag{Name: "srun", Value: "srun", Usage: "the srun command"},
			&cli.StringFlag{Name: "credentials", Usage: "credentials directory of 'dpvm keygen --out DIR' (ca.pem, secret.pem, admin.pem; default: one made in the state directory)"},
			legacyKeyFlag(),
			&cli.BoolFlag{Name: "node", Hidden: true, Usage: "internal: run this node's daemon (srun starts it)"},
		},
		Action: func(c *cli.Context) error {
			if c.Bool("node") {
				return slurmNode(c)
			}
			return slurmLaunch(c)
		},
	}
}

// slurmAlloc is what a Slurm allocation says about itself in the
// environment of its batch script.
type slurmAlloc struct {
	JobID string
	Nodes []string
	Cores int // cores for dpvm on this node (0: the daemon's own count)
	// CPUsPerTask is the batch script's --cpus-per-task (0: not given).
	CPUsPerTask int
	SubmitDir   string
}

// readAllocation reads the allocation from environment variables as
// getenv returns them.
func readAllocation(getenv func(string) string) (slurmAlloc, error) {
	a := slurmAlloc{JobID: getenv("SLURM_JOB_ID"), SubmitDir: getenv("SLURM_SUBMIT_DIR")}
	if a.JobID == "" {
		return a, errors.New("SLURM_JOB_ID is not set: run 'dpvm slurm' inside a Slurm allocation (sbatch or salloc)")
	}
	list := getenv("SLURM_JOB_NODELIST")
	if list == "" {
		list = getenv("SLURM_NODELIST")
	}
	nodes, err := expandHostlist(list)
	if err != nil {
		return a, fmt.Errorf("SLURM_JOB_NODELIST: %w", err)
	}
	a.Nodes = nodes
	// The CPUs of this node's step (srun sets SLURM_CPUS_ON_NODE per
	// node, from --cpus-per-task), else those of each task.
	for _, v := range []string{"SLURM_CPUS_ON_NODE", "SLURM_CPUS_PER_TASK"} {
		s := getenv(v)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1<<16 {
			return a, fmt.Errorf("%s=%q: want a positive count", v, s)
		}
		a.Cores = n
		break
	}
	if s := getenv("SLURM_CPUS_PER_TASK"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1<<16 {
			return a, fmt.Errorf("SLURM_CPUS_PER_TASK=%q: want a positive count", s)
		}
		a.CPUsPerTask = n
	}
	return a, nil
}

// srunArgs are the options of the job step that starts one daemon per
// node: the step is given the batch script's --cpus-per-task explicitly,
// since srun does not inherit it (Slurm 22.05 and later), so that each
// node's daemon sees, and reports, the cores it was allocated.
func (a slurmAlloc) srunArgs() []string {
	n := strconv.Itoa(len(a.Nodes))
	args := []string{"--nodes=" + n, "--ntasks=" + n, "--ntasks-per-node=1", "--kill-on-bad-exit=1"}
	if a.CPUsPerTask > 0 {
		args = append(args, "--cpus-per-task="+strconv.Itoa(a.CPUsPerTask))
	}
	return args
}

// slurmDirs resolves the shared and state directories.
func slurmDirs(shared, state string, a slurmAlloc) (string, string, error) {
	if shared == "" {
		base := a.SubmitDir
		if base == "" {
			base = "."
		}
		shared = filepath.Join(base, "dpvm-shared")
	}
	if state == "" {
		state = "slurm-" + a.JobID
	}
	if !filepath.IsAbs(state) {
		state = filepath.Join(shared, state)
	}
	state, err := filepath.Abs(state)
	if err != nil {
		return "", "", err
	}
	shared, err = filepath.Abs(shared)
	return shared, state, err
}

// slurmCreds is what the launcher and its daemons share: a credentials
// directory as 'dpvm keygen' writes (ca.pem, secret.pem, admin.pem), kept
// in the state directory (credentials/, mode 0700), made on the first run
// and found again by a requeued one (the job's checkpoint manifests are
// authenticated with the cluster secret), or the --credentials directory
// when given.
type slurmCreds struct {
	dir    string
	ca     *pki.CA
	secret *pki.Keyring
	admin  *pki.Credential
}

// node issues the credential of the daemon on the node named name, the
// master's if master. Each daemon issues its own in memory at start: the
// nodes of a requeued job are not known beforehand.
func (s *slurmCreds) node(name string, master bool) (*pki.Credential, error) {
	return s.ca.IssueHost(name, master, time.Now(), pki.DefaultHostLife)
}

// slurmKey returns the credentials the launcher and its daemons share (see
// slurmCreds). It is the one place the launcher handles credentials.
func slurmKey(given, stateDir string) (*slurmCreds, error) {
	dir := given
	if dir == "" {
		dir = filepath.Join(stateDir, "credentials")
		if _, err := os.Stat(filepath.Join(dir, pki.CAFile)); errors.Is(err, os.ErrNotExist) {
			cl, err := pki.NewCluster(time.Now(), "master", "admin")
			if err != nil {
				return nil, err
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, fmt.Errorf("credentials: %w", err)
			}
			if err := cl.WriteDir(dir); err != nil {
				return nil, fmt.Errorf("credentials: %w", err)
			}
		}
	}
	s := &slurmCreds{dir: dir}
	var err error
	if s.ca, err = pki.LoadCA(filepath.Join(dir, pki.CAFile)); err != nil {
		return nil, err
	}
	if s.secret, err = pki.LoadKeyring(filepath.Join(dir, pki.SecretFile)); err != nil {
		return nil, err
	}
	if s.admin, err = pki.LoadCredential(filepath.Join(dir, pki.AdminFile)); err != nil {
		return nil, err
	}
	return s, nil
}

// resumePoint is the newest complete checkpoint of a job in a state
// directory.
type resumePoint struct {
	JobDir   string
	SetDir   string
	Manifest *jobset.Manifest
}

// findResume looks for the newest complete, authentic checkpoint of any
// job under stateDir (job-NAME/ckpt-SEQ). ok is false when there is none;
// skipped names the sets passed over.
func findResume(stateDir string, key []byte) (rp resumePoint, ok bool, skipped []error, err error) {
	ents, err := os.ReadDir(stateDir)
	if err != nil {
		return rp, false, nil, err
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "job-") {
			continue
		}
		jobDir := filepath.Join(stateDir, e.Name())
		setDir, m, sk, err := jobset.Latest(jobDir, key)
		if err != nil {
			// err names the sets refused and why.
			skipped = append(skipped, err)
			continue
		}
		skipped = append(skipped, sk...)
		if !ok || m.Created.After(rp.Manifest.Created) {
			rp, ok = resumePoint{JobDir: jobDir, SetDir: setDir, Manifest: m}, true
		}
	}
	return rp, ok, skipped, nil
}

// slurmWork is what the launcher runs: an NPB kernel (with its report) or
// a registered program.
type slurmWork struct {
	what   string
	kernel string // NPB kernel, or "" for a program
	class  string
	np     int
	root   task.Task
}

func parseSlurmWork(args []string, out io.Writer) (slurmWork, error) {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	// "run PROGRAM" is PROGRAM, as in 'dpvm run'.
	if len(args) > 0 && args[0] == "run" {
		args = args[1:]
	}
	if len(args) == 0 {
		return slurmWork{}, fmt.Errorf("no program named; give PROGRAM [flags] (one of %s) or npb KERNEL [--class C] [--np N]", programNames())
	}
	if args[0] == "npb" {
		fs := flag.NewFlagSet("dpvm slurm npb", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		class := fs.String("class", "S", "problem class")
		np := fs.Int("np", 1, "number of worker tasks")
		if len(args) < 2 {
			return slurmWork{}, errors.New("npb: name a kernel: " + strings.Join(npb.Kernels, ", "))
		}
		if err := fs.Parse(args[2:]); err != nil {
			return slurmWork{}, fmt.Errorf("npb %s: %w", args[1], err)
		}
		if fs.NArg() > 0 {
			return slurmWork{}, fmt.Errorf("npb %s: unexpected arguments %q", args[1], fs.Args())
		}
		root, err := npb.NewRoot(args[1], *class, *np)
		if err != nil {
			return slurmWork{}, fmt.Errorf("npb %s: %w", args[1], err)
		}
		root.Lines = true
		w := slurmWork{kernel: args[1], class: *class, np: *np, root: root}
		w.what = fmt.Sprintf("npb %s class %s np %d", args[1], strings.ToUpper(*class), *np)
		return w, nil
	}
	prog, ok := task.LookupProgram(args[0])
	if !ok {
		return slurmWork{}, fmt.Errorf("unknown program %q; known programs: %s", args[0], programNames())
	}
	root, err := setupProgram(prog, args[1:], out)
	if err != nil {
		return slurmWork{}, err
	}
	return slurmWork{what: strings.Join(args, " "), root: root}, nil
}

// slurmLaunch is the batch script's side: start the virtual machine, run or
// resume the job, stop everything.
func slurmLaunch(c *cli.Context) error {
	out := c.App.Writer
	fail := func(code int, format string, a ...any) error {
		return cli.Exit(fmt.Sprintf("slurm: "+format, a...), code)
	}
	work, err := parseSlurmWork(c.Args().Slice(), out)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return fail(2, "%v", err)
	}
	job, err := jobOptions(c)
	if err != nil {
		return fail(2, "%v", err)
	}
	if job.CheckpointEvery == 0 {
		return fail(2, "--checkpoint-every must be positive: a requeued job resumes from its periodic checkpoints")
	}
	if c.Int("port") < 1 || c.Int("port") > 65535 {
		return fail(2, "--port %d: want 1 to 65535", c.Int("port"))
	}
	alloc, err := readAllocation(os.Getenv)
	if err != nil {
		return fail(2, "%v", err)
	}
	_, stateDir, err := slurmDirs(c.String("shared-dir"), c.String("state-dir"), alloc)
	if err != nil {
		return fail(2, "%v", err)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return fail(1, "state directory: %v", err)
	}
	if c.String("cluster-key") != "" {
		return fail(2, "--cluster-key (DPVM_CLUSTER_KEY) is no longer taken: %v: %s", pki.ErrLegacyKey, pki.LegacyHint)
	}
	creds, err := slurmKey(c.String("credentials"), stateDir)
	if err != nil {
		return fail(2, "%v", err)
	}
	typ, state, err := task.EncodeState(work.root)
	if err != nil {
		return fail(2, "%v", err)
	}
	rp, resume, skipped, err := findResume(stateDir, creds.secret.Key("job-manifest"))
	if err != nil {
		return fail(1, "looking for a checkpoint: %v", err)
	}
	for _, e := range skipped {
		fmt.Fprintf(out, "dpvm slurm: passed over: %v\n", e)
	}
	if resume && rp.Manifest.Program != typ {
		return fail(2, "%s holds a checkpoint of %s, not of %s: give another --state-dir", stateDir, rp.Manifest.Program, typ)
	}

	masterHost := c.String("master-host")
	if masterHost == "" {
		masterHost = alloc.Nodes[0]
	}
	master := net.JoinHostPort(masterHost, strconv.Itoa(c.Int("port")))
	fmt.Fprintf(out, "dpvm slurm: Slurm job %s, %d nodes (%s), master on %s at %s, state in %s\n",
		alloc.JobID, len(alloc.Nodes), strings.Join(alloc.Nodes, " "), alloc.Nodes[0], master, stateDir)

	// One daemon per node, in one job step.
	self, err := os.Executable()
	if err != nil {
		return fail(1, "%v", err)
	}
	n := len(alloc.Nodes)
	srunArgs := append(alloc.srunArgs(),
		self, "--log-level", c.String("log-level"), "slurm", "--node", "--master-host", masterHost, "--port", strconv.Itoa(c.Int("port")),
		"--credentials", creds.dir, "--state-dir", stateDir, "--grace", c.Duration("grace").String(),
		"--join-timeout", c.Duration("join-timeout").String())
	srun := exec.Command(c.String("srun"), srunArgs...)
	srun.Stdout, srun.Stderr = c.App.ErrWriter, c.App.ErrWriter
	if err := srun.Start(); err != nil {
		return fail(1, "starting the daemons: %v", err)
	}
	srunDone := make(chan error, 1)
	go func() { srunDone <- srun.Wait() }()
	stopDaemons := func(cl *daemon.Client) {
		if cl != nil {
			hctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := cl.Halt(hctx); err != nil {
				fmt.Fprintf(c.App.ErrWriter, "dpvm slurm: halting the virtual machine: %v\n", err)
			}
			cancel()
		}
		select {
		case <-srunDone:
			return
		case <-time.After(c.Duration("grace")):
		}
		_ = srun.Process.Signal(syscall.SIGTERM)
		select {
		case <-srunDone:
		case <-time.After(10 * time.Second):
			_ = srun.Process.Kill()
			<-srunDone
		}
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)

	cl, err := waitJoined(c.Context, master, creds.admin, n, c.Duration("join-timeout"), srunDone, sigs)
	if err != nil {
		stopDaemons(nil)
		return fail(1, "%v", err)
	}
	defer cl.Close()
	fmt.Fprintf(out, "dpvm slurm: all %d daemons joined\n", n)

	if resume {
		m := rp.Manifest
		fmt.Fprintf(out, "dpvm slurm: resuming job %s from checkpoint %d (%s, taken %s)\n",
			m.Job, m.Seq, rp.SetDir, m.Created.Format(time.RFC3339))
	} else {
		fmt.Fprintf(out, "dpvm slurm: starting %s fresh (no checkpoint in %s)\n", work.what, stateDir)
	}

	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	done := make(chan error, 1)
	cl.OnJobNote(jobNoteTo(out)) // a rollback after a node was lost, or the job's loss
	go func() { done <- runSlurmWork(ctx, cl, n, work, typ, state, rp, resume, job, out) }()
	select {
	case err = <-done:
	case sig := <-sigs:
		fmt.Fprintf(out, "dpvm slurm: %v: checkpointing the job (grace %v)\n", sig, c.Duration("grace"))
		checkpointAll(cl, c.Duration("grace"), out)
		// Halt before cancelling the run: the client stays usable.
		stopDaemons(cl)
		cancel()
		<-done
		return cli.Exit("slurm: stopped by "+sig.String()+"; run the batch script again (or requeue) to resume", 143)
	}
	stopDaemons(cl)
	if err != nil {
		return exitFor("slurm "+work.what, err)
	}
	// A finished job leaves nothing to resume.
	if ents, err := os.ReadDir(stateDir); err == nil {
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), "job-") {
				_ = os.RemoveAll(filepath.Join(stateDir, e.Name()))
			}
		}
	}
	fmt.Fprintf(out, "dpvm slurm: %s finished; its checkpoints are removed\n", work.what)
	return nil
}

// runSlurmWork starts or resumes the job and follows it to its end.
func runSlurmWork(ctx context.Context, cl *daemon.Client, hosts int, w slurmWork, typ string, state []byte, rp resumePoint, resume bool, job daemon.JobOptions, out io.Writer) error {
	if w.kernel != "" {
		opts := npb.RunOptions{Output: out, Hosts: hosts}
		runner := cl.Runner(job)
		if resume {
			runner = task.RunnerFunc(func(ctx context.Context, _ task.Task, out io.Writer) error {
				info, err := cl.Restart(ctx, rp.JobDir, job, out)
				if err != nil {
					return err
				}
				return daemon.ExitError(info)
			})
		}
		rep, err := npb.Run(ctx, runner, w.kernel, w.class, w.np, opts)
		if err != nil {
			return err
		}
		if err := rep.WriteText(out); err != nil {
			return err
		}
		if !rep.Passed() {
			return fmt.Errorf("%s: verification %s", w.what, rep.Verified)
		}
		return nil
	}
	var info daemon.TaskInfo
	var err error
	if resume {
		info, err = cl.Restart(ctx, rp.JobDir, job, out)
	} else {
		info, err = cl.RunJob(ctx, typ, state, job, out)
	}
	if err == nil {
		err = daemon.ExitError(info)
	}
	return err
}

// waitJoined dials the master until it answers with want hosts, the
// daemons' step ends, a signal comes or timeout passes.
func waitJoined(ctx context.Context, master string, key *pki.Credential, want int, timeout time.Duration, srunDone <-chan error, sigs <-chan os.Signal) (*daemon.Client, error) {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var last error
	var cl *daemon.Client
	for {
		if cl == nil {
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			c, err := daemon.Dial(dctx, master, key)
			cancel()
			if err == nil {
				cl = c
			} else {
				last = err
			}
		}
		if cl != nil {
			hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			hosts, err := cl.Hosts(hctx)
			cancel()
			switch {
			case err != nil:
				last = err
			case len(hosts) >= want:
				return cl, nil
			default:
				last = fmt.Errorf("%d of %d daemons joined", len(hosts), want)
			}
		}
		if time.Now().After(deadline) {
			if cl != nil {
				cl.Close()
			}
			return nil, fmt.Errorf("daemons not ready after %v: %v", timeout, last)
		}
		select {
		case err := <-srunDone:
			if cl != nil {
				cl.Close()
			}
			return nil, fmt.Errorf("the daemons' job step ended before all joined (%v); last: %v", err, last)
		case sig := <-sigs:
			if cl != nil {
				cl.Close()
			}
			return nil, fmt.Errorf("%v while the daemons started", sig)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// checkpointAll takes a checkpoint of every running job within grace.
func checkpointAll(cl *daemon.Client, grace time.Duration, out io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	tasks, err := cl.Tasks(ctx, false)
	if err != nil {
		fmt.Fprintf(out, "dpvm slurm: no checkpoint: %v\n", err)
		return
	}
	seen := map[uint64]bool{}
	for _, t := range tasks {
		if t.Job == 0 || seen[t.Job] {
			continue
		}
		seen[t.Job] = true
		r, err := cl.Checkpoint(ctx, t.Job, "")
		if err != nil {
			fmt.Fprintf(out, "dpvm slurm: checkpoint of job %d failed (the periodic one stands): %v\n", t.Job, err)
			continue
		}
		fmt.Fprintf(out, "dpvm slurm: job %s checkpointed: checkpoint %d, %d tasks, %d bytes, %s\n", r.Name, r.Seq, r.Tasks, r.Bytes, r.Dir)
	}
}

// slurmNode runs one node's daemon, as srun starts it: the master on the
// allocation's first node (SLURM_PROCID 0), a host joining it elsewhere. On
// SIGTERM it keeps running for --grace, so that the launcher can checkpoint
// the job, and stops when the launcher halts the machine.
func slurmNode(c *cli.Context) error {
	rank := os.Getenv("SLURM_PROCID")
	name := os.Getenv("SLURMD_NODENAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	creds, err := slurmKey(c.String("credentials"), c.String("state-dir"))
	if err != nil {
		return cli.Exit("slurm node: "+err.Error(), 2)
	}
	cred, err := creds.node(name, rank == "0")
	if err != nil {
		return cli.Exit("slurm node: "+err.Error(), 2)
	}
	alloc := slurmAlloc{}
	if a, err := readAllocation(os.Getenv); err == nil {
		alloc = a
	}
	speed, err := load.ResolveSpeed(0, 200*time.Millisecond)
	if err != nil {
		return cli.Exit("slurm node: "+err.Error(), 2)
	}
	placer, err := daemon.NewPlacer("roundrobin", 1)
	if err != nil {
		return cli.Exit("slurm node: "+err.Error(), 2)
	}
	master := net.JoinHostPort(c.String("master-host"), strconv.Itoa(c.Int("port")))
	cfg := daemon.Config{
		Name: name, Credential: cred, Speed: 1 / speed.Alpha, Alpha: speed.Alpha, Cores: alloc.Cores,
		SharedDir: c.String("state-dir"), Placer: placer, Load: &load.Proc{},
		Logger: loggerFrom(c),
	}
	if rank == "0" {
		cfg.Master, cfg.Secret, cfg.Listen, cfg.Output = true, creds.secret, net.JoinHostPort("", strconv.Itoa(c.Int("port"))), c.App.ErrWriter
	} else {
		cfg.Join, cfg.Listen = master, ":0"
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt)
	defer stop()
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	defer signal.Stop(term)

	// The master may not listen yet when a host starts: try again until
	// the join timeout.
	deadline := time.Now().Add(c.Duration("join-timeout"))
	var d *daemon.Daemon
	for {
		d, err = daemon.Start(ctx, cfg)
		if err == nil || cfg.Master || time.Now().After(deadline) {
			break
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-term:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
	if err != nil {
		return cli.Exit(fmt.Sprintf("slurm node %s: %v", name, err), 1)
	}
	fmt.Fprintf(c.App.ErrWriter, "dpvm slurm: node %s: daemon %v listening on %s\n", name, d.HostID(), d.Addr())
	halt := func() {
		hctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Halt(hctx)
	}
	select {
	case <-d.Done():
	case <-ctx.Done():
		halt()
	case <-term:
		select {
		case <-d.Done():
		case <-time.After(c.Duration("grace")):
			halt()
		}
	}
	if err := d.Err(); err != nil {
		return cli.Exit("slurm node: "+err.Error(), 1)
	}
	return nil
}
