package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/metrics"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/sched"
	"github.com/dpvm/dpvm/task"
)

// ScaleOptions configure `dpvm bench scale`: virtual machines of N hosts
// and M idle tasks on this one machine, for every N of Hosts and M of
// Tasks.
//
// The master runs in a process of its own (Binary, started as `dpvm
// daemon --master`), so that its CPU and memory are measured apart; the N
// host daemons share this process, each with its own UDP socket, and talk
// to the master and to each other over QUIC on loopback.
type ScaleOptions struct {
	Hosts []int
	Tasks []int
	// Binary is the dpvm binary the master runs (default: this
	// executable). InProcessMaster runs the master in this process
	// instead, for tests: its CPU and memory are then not measured apart.
	Binary          string
	InProcessMaster bool
	// Heartbeat is every daemon's heartbeat period (default 1s, the
	// daemons' default).
	Heartbeat time.Duration
	// SchedPeriod is the master's δT (default 50ms; 0 keeps the
	// default, negative turns the scheduler off).
	SchedPeriod time.Duration
	// Idle is how long the master's idle CPU is measured (default 3s).
	Idle time.Duration
	// Moves is how many moves are timed (default 5).
	Moves int
	// Recover also kills the master and measures how long a new one,
	// started with --recover at its address, takes to take back every
	// host and task.
	Recover bool
	// JoinParallel is how many hosts start at once (default 64).
	JoinParallel int
	// Wait bounds each wait for the virtual machine: every host joined,
	// the barrier, the recovery (default 5 minutes).
	Wait time.Duration
	// Logger receives the daemons' logs (default: discarded), and
	// MasterLogLevel is the master process's --log-level (default error),
	// its logs on this process's standard error; Progress, if set, a line
	// per phase.
	Logger         *slog.Logger
	MasterLogLevel string
	Progress       io.Writer
	// MasterPprof, if set, is the loopback address where the master
	// process serves Go's profiles (its --pprof), to profile it while it
	// idles.
	MasterPprof string
	// Detector is every daemon's failure detector, daemon.DetectorSwim
	// (the default, as the daemon's) or daemon.DetectorMaster
	// (Config.Detector).
	Detector string
}

func (o *ScaleOptions) setDefaults() {
	if o.Heartbeat <= 0 {
		o.Heartbeat = time.Second
	}
	if o.SchedPeriod == 0 {
		o.SchedPeriod = 50 * time.Millisecond
	}
	if o.Idle <= 0 {
		o.Idle = 3 * time.Second
	}
	if o.Moves <= 0 {
		o.Moves = 5
	}
	if o.JoinParallel <= 0 {
		o.JoinParallel = 64
	}
	if o.Wait <= 0 {
		o.Wait = 5 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MasterLogLevel == "" {
		o.MasterLogLevel = "error"
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Detector == "" {
		o.Detector = daemon.DetectorSwim
	}
}

// ScaleRow is one virtual machine's figures. A figure that could not be
// measured (the master's CPU and memory with an in-process master, a
// recovery not asked for) is negative.
type ScaleRow struct {
	Hosts int `json:"hosts"`
	Tasks int `json:"tasks"`
	// Detector is the daemons' failure detector (master or swim).
	Detector string `json:"detector"`
	// JoinSeconds: from the first host's start until the master lists
	// every host. RecoverSeconds: from a new master's start (--recover)
	// until it lists every host and task again.
	JoinSeconds    float64 `json:"join_seconds"`
	RecoverSeconds float64 `json:"recover_seconds"`
	// SpawnSeconds is one spawn of Tasks idle tasks placed round-robin on
	// the hosts, answered once every task runs; SpawnRate is tasks per
	// second.
	SpawnSeconds float64 `json:"spawn_seconds"`
	SpawnRate    float64 `json:"spawn_per_second"`
	// BarrierSeconds: from the spawn's answer until the barrier of all
	// Tasks tasks (every one joined one group) released its instance 0.
	BarrierSeconds float64 `json:"barrier_seconds"`
	// MoveMS is the median of Moves moves of an idle task between two
	// hosts, neither the master (request to commit, as the master
	// reports it).
	MoveMS float64 `json:"move_ms"`
	// MasterCPU is the master's CPU time per second of wall time while
	// the machine idles (heartbeats, load reports, scheduler checks at
	// SchedMS), in cores.
	MasterCPU float64 `json:"master_cpu_cores"`
	SchedMS   float64 `json:"sched_period_ms"`
	// MasterPacketsPerSecond is the QUIC packets the master received per
	// second over its connections to the hosts in the same idle spell
	// (its metric dpvm_quic_received_packets_total summed over the
	// peers): the heartbeats, load reports and listing replies that reach
	// it, and the acknowledgements of what it sends; -1 if a connection
	// was replaced meanwhile.
	MasterPacketsPerSecond float64 `json:"master_packets_per_second"`
	// MasterRSSMiB is the master's resident memory when idle with every
	// host and task; MasterPerHostKiB and MasterPerTaskKiB its growth per
	// host (before the tasks) and per task.
	MasterRSSMiB     float64 `json:"master_rss_mib"`
	MasterPerHostKiB float64 `json:"master_per_host_kib"`
	MasterPerTaskKiB float64 `json:"master_per_task_kib"`
	// HostPerHostKiB and HostPerTaskKiB: the growth of this process's
	// memory (heap and goroutine stacks, after a collection) per host
	// daemon and per idle task.
	HostPerHostKiB float64 `json:"host_per_host_kib"`
	HostPerTaskKiB float64 `json:"host_per_task_kib"`
	// ListMS and StepMS are the master's last listing check: listing
	// every host's processes, and sched.Step on the result.
	ListMS float64 `json:"list_ms"`
	StepMS float64 `json:"step_ms"`
	// ListedHosts is how many hosts that listing called (those whose
	// processes changed, and in turn a tenth of the others).
	ListedHosts int `json:"listed_hosts"`
	// ChecksPerSecond is how many scheduler checks the master made per
	// second while idle, and CheckCPUMS the master's CPU per check: all
	// its CPU in that spell divided by its checks, an upper bound (it
	// includes the heartbeats); -1 without checks.
	ChecksPerSecond float64 `json:"checks_per_second"`
	CheckCPUMS      float64 `json:"check_cpu_ms"`
	// StepAllocs and StepAllocMiB are sched.Step's allocations on a
	// snapshot of the same size, measured in this process.
	StepAllocs   float64 `json:"step_allocs"`
	StepAllocMiB float64 `json:"step_alloc_mib"`
}

// ScaleGrowth is how one cost grows along hosts or tasks: the exponent k
// of a least-squares fit cost ∝ x^k over the measured points, and its
// class.
type ScaleGrowth struct {
	Cost     string  `json:"cost"`
	Along    string  `json:"along"` // "hosts" (tasks fixed) or "tasks" (hosts fixed)
	Fixed    int     `json:"fixed"` // the other dimension's value
	Exponent float64 `json:"exponent"`
	Class    string  `json:"class"` // constant, sublinear, linear, worse
}

// ScaleReport is the whole benchmark.
type ScaleReport struct {
	Setup  string        `json:"setup"`
	Rows   []ScaleRow    `json:"rows"`
	Growth []ScaleGrowth `json:"growth"`
}

// GrowthClass names an exponent: constant below 0.2, sublinear below 0.8,
// linear up to 1.25, worse above.
func GrowthClass(k float64) string {
	switch {
	case math.IsNaN(k):
		return "unknown"
	case k < 0.2:
		return "constant"
	case k < 0.8:
		return "sublinear"
	case k <= 1.25:
		return "linear"
	}
	return "worse"
}

// FitExponent fits y = c·x^k by least squares on log-log axes and returns
// k; NaN with fewer than two usable points (positive x and y, two
// distinct x).
func FitExponent(xs, ys []float64) float64 {
	var lx, ly []float64
	for i := range xs {
		if i < len(ys) && xs[i] > 0 && ys[i] > 0 {
			lx, ly = append(lx, math.Log(xs[i])), append(ly, math.Log(ys[i]))
		}
	}
	if len(lx) < 2 {
		return math.NaN()
	}
	var mx, my float64
	for i := range lx {
		mx += lx[i]
		my += ly[i]
	}
	mx /= float64(len(lx))
	my /= float64(len(ly))
	var sxy, sxx float64
	for i := range lx {
		sxy += (lx[i] - mx) * (ly[i] - my)
		sxx += (lx[i] - mx) * (lx[i] - mx)
	}
	if sxx == 0 {
		return math.NaN()
	}
	return sxy / sxx
}

// scaleCosts names the costs whose growth is reported, and reads each
// from a row.
var scaleCosts = []struct {
	name string
	get  func(ScaleRow) float64
}{
	{"join_seconds", func(r ScaleRow) float64 { return r.JoinSeconds }},
	{"recover_seconds", func(r ScaleRow) float64 { return r.RecoverSeconds }},
	{"spawn_seconds", func(r ScaleRow) float64 { return r.SpawnSeconds }},
	{"barrier_seconds", func(r ScaleRow) float64 { return r.BarrierSeconds }},
	{"move_ms", func(r ScaleRow) float64 { return r.MoveMS }},
	{"master_cpu_cores", func(r ScaleRow) float64 { return r.MasterCPU }},
	{"master_rss_mib", func(r ScaleRow) float64 { return r.MasterRSSMiB }},
	{"list_ms", func(r ScaleRow) float64 { return r.ListMS }},
	{"step_ms", func(r ScaleRow) float64 { return r.StepMS }},
	{"step_allocs", func(r ScaleRow) float64 { return r.StepAllocs }},
	{"check_cpu_ms", func(r ScaleRow) float64 { return r.CheckCPUMS }},
}

// Growths fits every cost along hosts (for each task count measured with
// two or more host counts) and along tasks (likewise).
func Growths(rows []ScaleRow) []ScaleGrowth {
	var out []ScaleGrowth
	along := func(name string, key func(ScaleRow) int, x func(ScaleRow) int) {
		groups := map[int][]ScaleRow{}
		var keys []int
		for _, r := range rows {
			k := key(r)
			if _, ok := groups[k]; !ok {
				keys = append(keys, k)
			}
			groups[k] = append(groups[k], r)
		}
		slices.Sort(keys)
		for _, k := range keys {
			g := groups[k]
			if len(g) < 2 {
				continue
			}
			for _, c := range scaleCosts {
				var xs, ys []float64
				for _, r := range g {
					xs, ys = append(xs, float64(x(r))), append(ys, c.get(r))
				}
				e := FitExponent(xs, ys)
				if math.IsNaN(e) {
					continue
				}
				out = append(out, ScaleGrowth{Cost: c.name, Along: name, Fixed: k, Exponent: e, Class: GrowthClass(e)})
			}
		}
	}
	along("hosts", func(r ScaleRow) int { return r.Tasks }, func(r ScaleRow) int { return r.Hosts })
	along("tasks", func(r ScaleRow) int { return r.Hosts }, func(r ScaleRow) int { return r.Tasks })
	return out
}

// Scale runs the benchmark for every (hosts, tasks) pair of o. On an
// error the report holds the virtual machines measured before it.
func Scale(ctx context.Context, o ScaleOptions) (*ScaleReport, error) {
	o.setDefaults()
	if len(o.Hosts) == 0 || len(o.Tasks) == 0 {
		return nil, errors.New("bench scale: give at least one host count and one task count")
	}
	for _, n := range o.Hosts {
		if n < 2 {
			return nil, fmt.Errorf("bench scale: %d hosts: a move needs at least 2 hosts besides the master", n)
		}
	}
	if err := checkScaleDetector(o.Detector); err != nil {
		return nil, err
	}
	if !o.InProcessMaster && o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("bench scale: cannot find the dpvm binary to run the master: %w", err)
		}
		o.Binary = exe
	}
	rep := &ScaleReport{Setup: "master: " + masterSetup(o) + "; hosts: daemons in this process, each on its own UDP socket, QUIC over loopback; detector: " + o.Detector}
	for _, m := range o.Tasks {
		for _, n := range o.Hosts {
			fmt.Fprintf(o.Progress, "bench scale: %d hosts, %d tasks\n", n, m)
			row, err := scaleOnce(ctx, o, n, m)
			if err != nil {
				rep.Growth = Growths(rep.Rows)
				return rep, fmt.Errorf("bench scale: %d hosts, %d tasks: %w", n, m, err)
			}
			rep.Rows = append(rep.Rows, row)
		}
	}
	rep.Growth = Growths(rep.Rows)
	return rep, nil
}

// checkScaleDetector refuses a detector other than master and swim.
func checkScaleDetector(s string) error {
	if s != daemon.DetectorMaster && s != daemon.DetectorSwim {
		return fmt.Errorf("%w: detector %q: want %s or %s", ErrOptions, s, daemon.DetectorMaster, daemon.DetectorSwim)
	}
	return nil
}

func masterSetup(o ScaleOptions) string {
	if o.InProcessMaster {
		return "in this process (its CPU and memory are not measured apart)"
	}
	return "a process of its own (" + filepath.Base(o.Binary) + " daemon --master --no-tasks)"
}

// Task types of the benchmark: an idle task that joins one group, passes
// its barrier, tells an observer when it was instance 0, then waits at a
// safe point; the observer waits for that word.
type (
	scaleIdle struct {
		Group    string
		Size     int
		Observer task.TID
		Passed   bool
	}
	scaleObserver struct{}
)

const tagScaleReleased = 1

func init() {
	task.Register("bench.scale.idle", &scaleIdle{})
	task.Register("bench.scale.observer", &scaleObserver{})
}

// Run implements task.Task.
func (t *scaleIdle) Run(c *task.Ctx) error {
	if !t.Passed {
		inst, err := c.Join(t.Group)
		if err != nil {
			return err
		}
		if err := c.Barrier(t.Group, t.Size); err != nil {
			return err
		}
		t.Passed = true
		if inst == 0 {
			if err := c.Send(t.Observer, tagScaleReleased, nil); err != nil {
				return err
			}
		}
	}
	for {
		if _, err := c.Recv(task.AnyTask, task.AnyTag, nil, task.Safe()); err != nil {
			return err
		}
	}
}

// Run implements task.Task.
func (*scaleObserver) Run(c *task.Ctx) error {
	_, err := c.Recv(task.AnyTask, tagScaleReleased, nil)
	return err
}

// scaleMaster is the master under measurement.
type scaleMaster struct {
	addr string
	pid  int // 0 in process
	cmd  *exec.Cmd
	done chan error
	d    *daemon.Daemon
	// metricsURL is the master process's /metrics (its --metrics-listen);
	// met the in-process master's metrics.
	metricsURL string
	met        *metrics.Metrics
}

var (
	listeningRE = regexp.MustCompile(`listening on (\S+)`)
	metricsRE   = regexp.MustCompile(`metrics on (http://\S+)`)
)

func startScaleMaster(ctx context.Context, o ScaleOptions, credDir string, cl *pki.Cluster, listen string, recover bool) (*scaleMaster, error) {
	if o.InProcessMaster {
		met := metrics.New(metrics.Options{})
		cfg := daemon.Config{Master: true, Listen: listen, Credential: cl.Master, Secret: cl.Secret, Heartbeat: o.Heartbeat, Logger: o.Logger,
			MasterNoTasks: true, Recover: recover, Detector: o.Detector, Metrics: met}
		if o.SchedPeriod > 0 {
			cfg.Sched.Period = o.SchedPeriod
		}
		d, err := daemon.Start(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return &scaleMaster{addr: d.Addr(), d: d, met: met}, nil
	}
	args := []string{"--log-level", o.MasterLogLevel, "daemon", "--master", "--listen", listen,
		"--credential", filepath.Join(credDir, pki.MasterFile), "--secret", filepath.Join(credDir, pki.SecretFile), "--no-tasks",
		"--heartbeat", o.Heartbeat.String(), "--detector", o.Detector, "--metrics-listen", "127.0.0.1:0"}
	if o.SchedPeriod > 0 {
		args = append(args, "--sched-period", o.SchedPeriod.String())
	}
	if o.MasterPprof != "" {
		args = append(args, "--pprof", o.MasterPprof)
	}
	if recover {
		args = append(args, "--recover")
	}
	cmd := exec.Command(o.Binary, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the master: %w", err)
	}
	m := &scaleMaster{pid: cmd.Process.Pid, cmd: cmd, done: make(chan error, 1)}
	addr, murl := make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent, msent := false, false
		for sc.Scan() {
			if mm := metricsRE.FindStringSubmatch(sc.Text()); mm != nil && !msent {
				murl <- mm[1]
				msent = true
				continue
			}
			if mm := listeningRE.FindStringSubmatch(sc.Text()); mm != nil && !sent {
				addr <- mm[1]
				sent = true
				continue
			}
			fmt.Fprintln(os.Stderr, "master:", sc.Text())
		}
		m.done <- cmd.Wait()
	}()
	select {
	case m.addr = <-addr:
		// The metrics line comes before the listening line.
		select {
		case m.metricsURL = <-murl:
		default:
		}
		return m, nil
	case err := <-m.done:
		return nil, fmt.Errorf("the master exited before listening: %v", err)
	case <-time.After(30 * time.Second):
		m.kill()
		return nil, errors.New("the master did not listen within 30s")
	case <-ctx.Done():
		m.kill()
		return nil, ctx.Err()
	}
}

// kill stops the master at once, as a crash would.
func (m *scaleMaster) kill() {
	if m.d != nil {
		haltQuickly(m.d)
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.done
}

// haltQuickly stops a daemon of the benchmark, its tasks with it.
func haltQuickly(d *daemon.Daemon) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = d.Halt(ctx)
}

// cpu is the master's CPU time so far (-1 in process).
func (m *scaleMaster) cpu() float64 {
	if m.pid == 0 {
		return -1
	}
	s, err := procCPUSeconds(strconv.Itoa(m.pid))
	if err != nil {
		return -1
	}
	return s
}

// packetsIn is the QUIC packets the master has received on its current
// connections to peers (-1 if its metrics cannot be read).
func (m *scaleMaster) packetsIn() float64 {
	name := metrics.Namespace + "_quic_received_packets_total"
	if m.met != nil {
		fams, err := m.met.Registry().Gather()
		if err != nil {
			return -1
		}
		var sum float64
		for _, f := range fams {
			if f.GetName() == name {
				for _, x := range f.GetMetric() {
					sum += x.GetCounter().GetValue()
				}
			}
		}
		return sum
	}
	if m.metricsURL == "" {
		return -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.metricsURL, nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return -1
	}
	sum, err := sumCounter(io.LimitReader(resp.Body, 64<<20), name)
	if err != nil {
		return -1
	}
	return sum
}

// sumCounter sums the samples of the metric name in Prometheus' text
// format.
func sumCounter(r io.Reader, name string) (float64, error) {
	var sum float64
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) < 1 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %q: %w", name, line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// rssMiB is the master's resident memory (-1 in process).
func (m *scaleMaster) rssMiB() float64 {
	if m.pid == 0 {
		return -1
	}
	kib, err := procStatusKiB(strconv.Itoa(m.pid), "VmRSS")
	if err != nil {
		return -1
	}
	return float64(kib) / 1024
}

// procStatusKiB reads a "Name:   N kB" line of /proc/<pid>/status.
func procStatusKiB(pid, name string) (int64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name+":"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("/proc/%s/status has no %s", pid, name)
}

// heapBytes is this process's heap and goroutine stacks in use, after a
// collection.
func heapBytes() float64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapInuse + ms.StackInuse)
}

// waitUntil polls cond every 50 ms until it holds or the deadline passes.
func waitUntil(ctx context.Context, limit time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("%s: not within %v: %w", what, limit, err)
			}
			return fmt.Errorf("%s: not within %v", what, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func scaleOnce(ctx context.Context, o ScaleOptions, n, m int) (row ScaleRow, err error) {
	row = ScaleRow{Hosts: n, Tasks: m, Detector: o.Detector, RecoverSeconds: -1, MasterPacketsPerSecond: -1, MasterCPU: -1, MasterRSSMiB: -1, MasterPerHostKiB: -1, MasterPerTaskKiB: -1,
		SchedMS: float64(max(o.SchedPeriod, 0)) / 1e6}
	dir, err := os.MkdirTemp("", "dpvm-scale")
	if err != nil {
		return row, err
	}
	defer os.RemoveAll(dir)
	key, err := pki.NewCluster(time.Now(), "h1", "admin")
	if err != nil {
		return row, err
	}
	keyFile := filepath.Join(dir, "creds")
	if err := key.WriteDir(keyFile); err != nil {
		return row, err
	}
	master, err := startScaleMaster(ctx, o, keyFile, key, "127.0.0.1:0", false)
	if err != nil {
		return row, err
	}
	var hosts []*daemon.Daemon
	var hmu sync.Mutex
	defer func() {
		// The master first: hosts stopping one by one would each be
		// reported lost by it.
		master.kill()
		hmu.Lock()
		defer hmu.Unlock()
		var wg sync.WaitGroup
		for _, h := range hosts {
			wg.Go(func() { haltQuickly(h) })
		}
		wg.Wait()
	}()
	cl, err := daemon.Dial(ctx, master.addr, key.Admin)
	if err != nil {
		return row, fmt.Errorf("dial the master: %w", err)
	}
	defer func() { cl.Close() }()
	hostCount := func(want int) func() (bool, error) {
		return func() (bool, error) {
			hs, err := cl.Hosts(ctx)
			return err == nil && len(hs) >= want, err
		}
	}
	// Let the master settle before its first figures.
	if err := waitUntil(ctx, 10*time.Second, "master", hostCount(1)); err != nil {
		return row, err
	}
	masterRSS0 := master.rssMiB()
	heap0 := heapBytes()

	// Join.
	fmt.Fprintf(o.Progress, "  %d hosts join\n", n)
	start := time.Now()
	sem := make(chan struct{}, o.JoinParallel)
	var joinErr error
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cred, err := key.Host(fmt.Sprintf("s%d", i+2))
			if err != nil {
				hmu.Lock()
				joinErr = errors.Join(joinErr, err)
				hmu.Unlock()
				return
			}
			h, err := daemon.Start(ctx, daemon.Config{Join: master.addr, Listen: "127.0.0.1:0", Credential: cred,
				Heartbeat: o.Heartbeat, Logger: o.Logger, Detector: o.Detector})
			hmu.Lock()
			defer hmu.Unlock()
			if err != nil {
				joinErr = errors.Join(joinErr, err)
				return
			}
			hosts = append(hosts, h)
		})
	}
	wg.Wait()
	if joinErr != nil {
		return row, fmt.Errorf("hosts joining: %w", joinErr)
	}
	if err := waitUntil(ctx, o.Wait, "every host listed", hostCount(n+1)); err != nil {
		return row, err
	}
	row.JoinSeconds = time.Since(start).Seconds()
	heap1 := heapBytes()
	masterRSS1 := master.rssMiB()
	row.HostPerHostKiB = (heap1 - heap0) / float64(n) / 1024
	if masterRSS0 > 0 && masterRSS1 > 0 {
		row.MasterPerHostKiB = (masterRSS1 - masterRSS0) * 1024 / float64(n)
	}

	// Spawn and barrier.
	fmt.Fprintf(o.Progress, "  spawn %d tasks\n", m)
	obs, err := cl.Spawn(ctx, "bench.scale.observer", nil, 1, "")
	if err != nil {
		return row, fmt.Errorf("spawn the observer: %w", err)
	}
	_, state, err := task.EncodeState(&scaleIdle{Group: "bench.scale", Size: m, Observer: obs[0]})
	if err != nil {
		return row, err
	}
	start = time.Now()
	tids, err := cl.Spawn(ctx, "bench.scale.idle", state, m, "")
	if err != nil {
		return row, fmt.Errorf("spawn %d tasks: %w", m, err)
	}
	row.SpawnSeconds = time.Since(start).Seconds()
	row.SpawnRate = float64(m) / row.SpawnSeconds
	fmt.Fprintf(o.Progress, "  spawned in %.2f s (%.0f tasks/s); barrier\n", row.SpawnSeconds, row.SpawnRate)
	start = time.Now()
	wctx, cancel := context.WithTimeout(ctx, o.Wait)
	info, err := cl.Wait(wctx, obs[0])
	cancel()
	if err != nil || info.State != daemon.Exited || info.Status != 0 {
		return row, fmt.Errorf("barrier of %d tasks: %v (observer %v, status %d)", m, err, info.State, info.Status)
	}
	row.BarrierSeconds = time.Since(start).Seconds()
	heap2 := heapBytes()
	masterRSS2 := master.rssMiB()
	row.HostPerTaskKiB = (heap2 - heap1) / float64(m) / 1024
	if masterRSS1 > 0 && masterRSS2 > 0 {
		row.MasterPerTaskKiB = (masterRSS2 - masterRSS1) * 1024 / float64(m)
	}

	// Moves: one task back and forth between two hosts, neither the master.
	fmt.Fprintf(o.Progress, "  %d moves\n", o.Moves)
	hs, err := cl.Hosts(ctx)
	if err != nil {
		return row, err
	}
	var names []string
	for _, h := range hs {
		if !h.Master {
			names = append(names, h.Name)
		}
	}
	var moves []float64
	tid := tids[0]
	for i := range o.Moves {
		to := names[i%2]
		if tid.Host() == hostIDOf(hs, to) && i == 0 {
			to = names[1]
		}
		r, err := cl.Migrate(ctx, tid, to, daemon.Direct)
		if err != nil {
			return row, fmt.Errorf("move %d of %v to %s: %w", i+1, tid, to, err)
		}
		moves = append(moves, r.Seconds*1000)
	}
	row.MoveMS = Median(moves)

	// The master idle: heartbeats, load reports, quiet checks.
	fmt.Fprintf(o.Progress, "  master idle for %v\n", o.Idle)
	var checks0 int
	if st, err := cl.SchedStatus(ctx); err == nil {
		checks0 = st.Checks
	}
	c0, p0 := master.cpu(), master.packetsIn()
	t0 := time.Now()
	select {
	case <-time.After(o.Idle):
	case <-ctx.Done():
		return row, ctx.Err()
	}
	spell := time.Since(t0).Seconds()
	if c1 := master.cpu(); c0 >= 0 && c1 >= 0 {
		row.MasterCPU = (c1 - c0) / spell
	}
	if p1 := master.packetsIn(); p0 >= 0 && p1 >= p0 {
		row.MasterPacketsPerSecond = (p1 - p0) / spell
	}
	row.MasterRSSMiB = master.rssMiB()
	row.CheckCPUMS = -1
	if st, err := cl.SchedStatus(ctx); err == nil {
		row.ListMS, row.StepMS, row.ListedHosts = st.ListSeconds*1000, st.StepSeconds*1000, st.ListedHosts
		row.ChecksPerSecond = float64(st.Checks-checks0) / spell
		if row.ChecksPerSecond > 0 && row.MasterCPU >= 0 {
			row.CheckCPUMS = row.MasterCPU / row.ChecksPerSecond * 1000
		}
	}
	row.StepAllocs, row.StepAllocMiB = stepAllocs(n, m)

	if o.Recover {
		fmt.Fprintf(o.Progress, "  master killed, a new one recovers\n")
		addr := master.addr
		master.kill()
		cl.Close()
		start = time.Now()
		nm, err := startScaleMaster(ctx, o, keyFile, key, addr, true)
		if err != nil {
			return row, fmt.Errorf("recovering master: %w", err)
		}
		master = nm
		if cl, err = daemon.Dial(ctx, master.addr, key.Admin); err != nil {
			return row, fmt.Errorf("dial the recovering master: %w", err)
		}
		var seenHosts, seenTasks int
		err = waitUntil(ctx, o.Wait, "every host and task back", func() (bool, error) {
			hs, err := cl.Hosts(ctx)
			if err != nil {
				return false, err
			}
			seenHosts, seenTasks = len(hs), 0
			for _, h := range hs {
				seenTasks += h.Tasks
			}
			// The observer has exited: the idle tasks are all there is.
			return seenHosts == n+1 && seenTasks >= m, nil
		})
		if err != nil {
			err = fmt.Errorf("%w (%d hosts of %d, %d tasks of %d)", err, seenHosts, n+1, seenTasks, m)
		}
		if err != nil {
			return row, err
		}
		row.RecoverSeconds = time.Since(start).Seconds()
	}
	return row, nil
}

func hostIDOf(hs []daemon.HostInfo, name string) task.HostID {
	for _, h := range hs {
		if h.Name == name {
			return h.ID
		}
	}
	return 0
}

// stepAllocs measures sched.Step's allocations on a snapshot of n hosts
// and m processes spread evenly, every process in class 1 on idle hosts:
// the shape of the benchmark's own check.
func stepAllocs(n, m int) (allocs, mib float64) {
	snap := &sched.Snapshot{Classes: sched.DefaultClasses(), Params: sched.DefaultParams()}
	for i := range n {
		// Host i holds the processes i, i+n, i+2n, …: its load counts them.
		snap.Hosts = append(snap.Hosts, sched.Host{Name: fmt.Sprintf("s%d", i+2), Alpha: 1, MemFree: math.Inf(1),
			Load: float64((m - i + n - 1) / n)})
	}
	for i := range m {
		snap.Processes = append(snap.Processes, sched.Process{TID: fmt.Sprintf("t%d", i), Host: snap.Hosts[i%n].Name, Class: 1, Mem: 1})
	}
	const rounds = 3
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range rounds {
		if _, err := sched.Step(snap); err != nil {
			return -1, -1
		}
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / rounds, float64(after.TotalAlloc-before.TotalAlloc) / rounds / (1 << 20)
}
