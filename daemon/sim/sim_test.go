package sim_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/sim"
	"github.com/dpvm/dpvm/daemon/sim/simtest" // registers simtest-forgetful
	_ "github.com/dpvm/dpvm/examples"         // registers the example programs
	_ "github.com/dpvm/dpvm/examples/pvm"     // and the PVM ports (pvm.spmd)
	"github.com/dpvm/dpvm/task"
)

var (
	simSeeds  = flag.Int("simseeds", 12, "seeds per program the simulation's tests run")
	simFirst  = flag.Uint64("simfirst", 1, "the first of those seeds")
	simRoutes = flag.String("simroutes", "demand", "how the master spreads routes in TestReplay, TestCheckpointCrash and TestSiblingsUnderFaults: broadcast or demand")
)

// routes is the protocol -simroutes names.
func routes(t *testing.T) sim.Routes {
	t.Helper()
	r, err := sim.ParseRoutes(*simRoutes)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func seeds(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = *simFirst + uint64(i)
	}
	return out
}

// examplePrograms are the examples the tests run: messages among several
// tasks (ring, squares, jacobi), spawns (hello, and every other), a
// communicator's collectives (pi, jacobi), receives by predicate and
// non-blocking ones (jacobi2d: task.Match, Irecv and Wait).
var examplePrograms = [][]string{
	{"ring", "-n", "5", "-laps", "20"},
	{"hello", "-n", "6"},
	{"squares", "-n", "100", "-workers", "4"},
	{"pi", "-samples", "2000", "-workers", "4"},
	{"jacobi", "-n", "16", "-workers", "3", "-iters", "60"},
	{"jacobi2d", "-n", "16", "-tasks", "4", "-iters", "60"},
}

func program(t *testing.T, args []string) sim.Program {
	t.Helper()
	p, err := sim.ProgramFromArgs(args[0], args[1:])
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// report logs a failed seed with what replays it.
func report(t *testing.T, args []string, cfg sim.Config, r sim.Result) {
	t.Helper()
	cfg.Seed = r.Seed
	t.Errorf("%v seed %d: %v\ntaken: %s\nreplay: %s\nlast events:\n%s", args, r.Seed, r.Err,
		strings.Join(r.Taken, "; "), sim.ReplayCommand("dpvm", cfg, args[0], args[1:]), strings.Join(r.Tail, "\n"))
}

// checkTwice runs seeds of the program args under cfg twice, each time
// with the fault-free run to compare with, and fails the test for every
// seed whose second run differs from its first (trace, events or
// result): the same seed is the same run, event for event. It returns
// the first report.
func checkTwice(t *testing.T, cfg sim.Config, args []string, seeds []uint64) *sim.Report {
	t.Helper()
	p := program(t, args)
	first, err := sim.Check(cfg, seeds, p, 0)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	again, err := sim.Check(cfg, seeds, p, 0)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	for i, r := range first.Seeds {
		if r2 := again.Seeds[i]; r2.TraceHash != r.TraceHash || r2.Events != r.Events || r2.Result != r.Result {
			t.Errorf("%v seed %d does not replay: %s (%d events, %s) then %s (%d events, %s)",
				args, r.Seed, r.TraceHash, r.Events, r.Result, r2.TraceHash, r2.Events, r2.Result)
		}
	}
	return first
}

// TestReplay runs every seed twice under the default faults and compares
// the whole trace's hash: the same seed is the same run, event for event.
// Every seed must also end with the fault-free run's result, and the
// seeds together must have taken moves (done and aborted), lost,
// duplicated and delayed messages, partitions and frozen hosts.
func TestReplay(t *testing.T) {
	cfg := sim.Config{Faults: sim.FaultDefault, Routes: routes(t)}
	kinds := map[string]int{}
	for _, args := range examplePrograms {
		hashes := map[string]bool{}
		for _, r := range checkTwice(t, cfg, args, seeds(*simSeeds)).Seeds {
			if !r.OK {
				report(t, args, cfg, r)
			}
			hashes[r.TraceHash] = true
			for _, l := range r.Taken {
				for _, k := range []string{"loss", "dup", "delay", "reorder", "partition", "freeze", "done", "ended: move aborted"} {
					if strings.Contains(l, " "+k) {
						kinds[k]++
					}
				}
			}
		}
		if *simSeeds > 1 && len(hashes) < 2 {
			t.Errorf("%v: every seed gave the same trace", args)
		}
	}
	t.Logf("faults and moves taken: %v", kinds)
	if *simSeeds >= 12 {
		for _, k := range []string{"loss", "dup", "delay", "reorder", "partition", "freeze", "done", "ended: move aborted"} {
			if kinds[k] == 0 {
				t.Errorf("no seed took %q", k)
			}
		}
	}
}

// TestCheckpointCrash runs seeds of three examples (messages, spawns and
// exits, collectives) under job checkpoints and a host crash, with every
// other fault, twice: the same seed replays the same run, rollbacks
// happen, and every seed ends with the fault-free run's result.
func TestCheckpointCrash(t *testing.T) {
	cfg := sim.Config{Faults: sim.FaultAll, Routes: routes(t)}
	rollbacks := 0
	for _, args := range [][]string{examplePrograms[0], examplePrograms[1], examplePrograms[4]} {
		for _, r := range checkTwice(t, cfg, args, seeds(*simSeeds)).Seeds {
			if !r.OK {
				report(t, args, cfg, r)
			}
			for _, l := range r.Taken {
				if strings.Contains(l, "rolled back to checkpoint") {
					rollbacks++
				}
			}
		}
	}
	if rollbacks == 0 {
		t.Error("no seed rolled back")
	}
	t.Logf("%d rollbacks", rollbacks)
}

// TestRestart runs seeds of every example under every fault, restarts
// included, twice, on both route protocols: the same seed replays the
// same run, every seed ends with the fault-free run's result, hosts
// crashed and came back as new incarnations after the master deemed them
// lost, and on both some moves went to a restarted host.
// What was in flight to an old incarnation reaching the new one's tasks
// fails the seed (shost.put, world.check).
func TestRestart(t *testing.T) {
	for _, rt := range []sim.Routes{sim.RoutesBroadcast, sim.RoutesDemand} {
		cfg := sim.Config{Faults: sim.FaultAll, Routes: rt}
		restarts, movesTo := 0, 0
		for _, args := range examplePrograms {
			for _, r := range checkTwice(t, cfg, args, seeds(*simSeeds)).Seeds {
				if !r.OK {
					report(t, args, cfg, r)
				}
				back := map[string]bool{}
				for _, l := range r.Taken {
					f := strings.Fields(l)
					switch {
					case len(f) >= 3 && f[1] == "restart":
						restarts++
						back[f[2]] = true
					case len(f) == 5 && f[1] == "move" && strings.Contains(f[4], "→"):
						if back[f[4][strings.Index(f[4], "→")+len("→"):]] {
							movesTo++
						}
					}
				}
			}
		}
		if restarts == 0 {
			t.Errorf("routes %v: no host restarted", rt)
		}
		if movesTo == 0 {
			t.Errorf("routes %v: no task moved to a restarted host", rt)
		}
		t.Logf("routes %v: %d restarts, %d moves to a restarted host", rt, restarts, movesTo)
	}
}

// TestMasterCrash runs seeds of every example under every fault and a
// crashed master, twice: the same seed replays the same run, no
// invariant breaks (no task in service twice, before the crash or after),
// and every seed ends either with the fault-free run's result (its root
// ended before the crash) or with the job lost with its master, the
// master's crash and the job's loss the last things it took.
func TestMasterCrash(t *testing.T) {
	cfg := sim.Config{Faults: sim.FaultAll | sim.FaultMaster, Routes: routes(t)}
	lost := 0
	for _, args := range examplePrograms {
		for _, r := range checkTwice(t, cfg, args, seeds(*simSeeds)).Seeds {
			if !r.OK {
				report(t, args, cfg, r)
				continue
			}
			if !r.LostWithMaster {
				continue
			}
			lost++
			n := len(r.Taken)
			if n < 2 || !strings.HasSuffix(r.Taken[n-1], " job lost with its master") ||
				!slices.ContainsFunc(r.Taken, func(l string) bool { return strings.HasSuffix(l, " crash master") }) {
				t.Errorf("%v seed %d lost with its master, but took: %s", args, r.Seed, strings.Join(r.Taken, "; "))
			}
			if r.Result != "job lost with its master" {
				t.Errorf("%v seed %d lost with its master: result %q", args, r.Seed, r.Result)
			}
		}
	}
	if lost == 0 {
		t.Error("no job was lost with its master")
	}
	t.Logf("%d seeds lost with the master", lost)
}

// TestSiblingsUnderFaults runs pvm.spmd, whose tasks pass a token around
// the ring c.Siblings gives them (pvm_siblings): under moves and the
// network's faults every seed ends as the fault-free run does, some after
// moving ring tasks (a moved task that lost its siblings would see a ring
// of one, print it and end). Rollbacks are daemon/siblings_test.go's.
func TestSiblingsUnderFaults(t *testing.T) {
	args := []string{"pvm.spmd", "-n", "8"}
	p := program(t, args)
	cfg := sim.Config{Faults: sim.FaultDefault, Routes: routes(t)}
	res, err := sim.Check(cfg, seeds(*simSeeds), p, 0)
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for _, r := range res.Seeds {
		if !r.OK {
			report(t, args, cfg, r)
		}
		for _, l := range r.Taken {
			if strings.Contains(l, " done") {
				moved++
			}
		}
	}
	if moved == 0 {
		t.Error("no seed moved a task")
	}
	t.Logf("%d moves", moved)
}

// TestBrokenProgramCaught: a program whose state forgets a field across
// a move gives a wrong result on some seed, which the check reports
// with the command that replays it; the replay fails the same way, with
// the same trace.
func TestBrokenProgramCaught(t *testing.T) {
	args := []string{simtest.Forgetful, "-n", "300"}
	p := program(t, args)
	cfg := sim.Config{Faults: sim.FaultMove}
	rep, err := sim.Check(cfg, seeds(max(*simSeeds, 12)), p, 0)
	if err != nil {
		t.Fatal(err)
	}
	var bad *sim.Result
	for i, r := range rep.Seeds {
		if !r.OK {
			bad = &rep.Seeds[i]
			break
		}
	}
	if bad == nil {
		t.Fatalf("no seed caught the forgotten field (fault-free result %s)", rep.Reference.Result)
	}
	if !errors.Is(bad.Err, sim.ErrWrongResult) {
		t.Fatalf("seed %d failed with %v, want %v", bad.Seed, bad.Err, sim.ErrWrongResult)
	}
	c := cfg
	c.Seed = bad.Seed
	cmd := sim.ReplayCommand("dpvm", c, args[0], args[1:])
	want := fmt.Sprintf("dpvm sim vm --first-seed %d --seeds 1 --hosts 4 --faults move simtest-forgetful -n 300", bad.Seed)
	if cmd != want {
		t.Errorf("replay command %q, want %q", cmd, want)
	}
	moved := false
	for _, l := range bad.Taken {
		moved = moved || strings.Contains(l, "move ") && strings.HasSuffix(l, " done")
	}
	if !moved {
		t.Errorf("seed %d failed with no move done: %v", bad.Seed, bad.Taken)
	}
	again, err := sim.Check(c, []uint64{bad.Seed}, p, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r := again.Seeds[0]; r.OK || r.TraceHash != bad.TraceHash || r.Result != bad.Result {
		t.Errorf("replay of seed %d: ok %v, %s %s; first %s %s", bad.Seed, r.OK, r.TraceHash, r.Result, bad.TraceHash, bad.Result)
	}
}

// TestShrink: a seed of the broken program that fails under the default
// faults still fails under fewer kinds, among them the moves that lose
// its field, and replays under them.
func TestShrink(t *testing.T) {
	args := []string{simtest.Forgetful, "-n", "300"}
	p := program(t, args)
	cfg := sim.Config{Faults: sim.FaultDefault}
	rep, err := sim.Check(cfg, seeds(max(*simSeeds, 12)), p, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Seeds {
		if r.OK {
			continue
		}
		c := cfg
		c.Seed = r.Seed
		small, res, err := sim.Shrink(c, p, rep.Reference)
		if err != nil {
			t.Fatal(err)
		}
		if res.OK || small.Faults&sim.FaultMove == 0 || small.Faults&^cfg.Faults != 0 {
			t.Fatalf("seed %d shrunk to %v: ok %v, %v", r.Seed, small.Faults, res.OK, res.Err)
		}
		again, err := sim.Check(small, []uint64{r.Seed}, p, 1)
		if err != nil {
			t.Fatal(err)
		}
		if a := again.Seeds[0]; a.OK || a.TraceHash != res.TraceHash {
			t.Errorf("seed %d under %v does not replay: %v %s, then %v %s", r.Seed, small.Faults, res.OK, res.TraceHash, a.OK, a.TraceHash)
		}
		t.Logf("seed %d: %v shrunk to %v", r.Seed, cfg.Faults, small.Faults)
		return
	}
	t.Fatal("no seed failed")
}

// TestRegressions replays the seeds in testdata/regressions.txt, each a
// run that once broke an invariant or gave a wrong result: each must
// pass now. A line reads
//
//	seed=S hosts=H faults=F [routes=R] PROGRAM [program flags]  # what it found
//
// (routes: demand, the default, or broadcast).
func TestRegressions(t *testing.T) {
	f, err := os.Open("testdata/regressions.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		cfg, args, err := parseRegression(fields)
		if err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		rep, err := sim.Check(cfg, []uint64{cfg.Seed}, program(t, args), 1)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if r := rep.Seeds[0]; !r.OK {
			report(t, args, cfg, r)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no regression seeds")
	}
}

// chatty's workers print a line at every step, each step a safe point:
// a rollback undoes lines printed after the checkpoint, and the
// restored workers print them again.
type chatty struct {
	N, Workers int
	Spawned    bool
	Got        int
}

type chattyWorker struct{ N, I int }

func init() {
	task.Register("simtest.chatty", &chatty{})
	task.Register("simtest.chatty.worker", &chattyWorker{})
	task.RegisterProgram(task.Program{
		Name:    "simtest-chatty",
		Summary: "workers that print a line at every step (the simulation's test)",
		Setup: func(fs *flag.FlagSet) func([]string) (task.Task, error) {
			n := fs.Int("n", 40, "steps of each worker")
			w := fs.Int("workers", 4, "workers")
			return func([]string) (task.Task, error) { return &chatty{N: *n, Workers: *w}, nil }
		},
	})
}

func (r *chatty) Run(c *task.Ctx) error {
	if !r.Spawned {
		if _, err := c.Spawn(&chattyWorker{N: r.N}, r.Workers); err != nil {
			return err
		}
		r.Spawned = true
	}
	for ; r.Got < r.Workers; r.Got++ {
		if _, err := c.Recv(task.AnyTask, 1, nil, task.Safe()); err != nil {
			return err
		}
	}
	c.Printf("%d workers done\n", r.Workers)
	return nil
}

func (w *chattyWorker) Run(c *task.Ctx) error {
	for w.I < w.N {
		c.Printf("%v step %d\n", c.MyTID(), w.I)
		w.I++ // the line printed is in the state the safe point saves
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	return c.Send(c.Parent(), 1, w.I)
}

// TestRollbackUndoesOutput: workers print a line at every step under job
// checkpoints and a host crash. Each seed ends with the fault-free
// result: what the incarnations a rollback undid printed after the
// checkpoint is taken out (Result.Undone), the lines the restored workers
// print again counted once; and some seed does undo output.
func TestRollbackUndoesOutput(t *testing.T) {
	args := []string{"simtest-chatty", "-n", "400", "-workers", "4"}
	cfg := sim.Config{Faults: sim.FaultCheckpoint | sim.FaultCrash}
	rep, err := sim.Check(cfg, seeds(max(*simSeeds, 12)), program(t, args), 0)
	if err != nil {
		t.Fatal(err)
	}
	undone := 0
	for _, r := range rep.Seeds {
		if !r.OK {
			report(t, args, cfg, r)
		}
		if r.Undone > 0 {
			undone++
		}
	}
	if undone == 0 {
		t.Fatalf("no seed of %d undid output; seed 1 took %v", len(rep.Seeds), rep.Seeds[0].Taken)
	}
	t.Logf("%d of %d seeds undid output; seed 1 took %v", undone, len(rep.Seeds), rep.Seeds[0].Taken)
}

func parseRegression(fields []string) (sim.Config, []string, error) {
	var cfg sim.Config
	for len(fields) > 0 {
		k, v, ok := strings.Cut(fields[0], "=")
		if !ok {
			break
		}
		var err error
		switch k {
		case "seed":
			cfg.Seed, err = strconv.ParseUint(v, 10, 64)
		case "hosts":
			cfg.Hosts, err = strconv.Atoi(v)
		case "faults":
			cfg.Faults, err = sim.ParseFaults(v)
		case "routes":
			cfg.Routes, err = sim.ParseRoutes(v)
		default:
			err = fmt.Errorf("unknown key %q", k)
		}
		if err != nil {
			return cfg, nil, err
		}
		fields = fields[1:]
	}
	if len(fields) == 0 {
		return cfg, nil, errors.New("no program")
	}
	return cfg, fields, nil
}

// TestFaultNames: the fault list parses and prints back.
func TestFaultNames(t *testing.T) {
	f, err := sim.ParseFaults("loss, move,dup")
	if err != nil || f != sim.FaultLoss|sim.FaultMove|sim.FaultDup || f.String() != "loss,dup,move" {
		t.Errorf("got %v (%v), %v", f, uint16(f), err)
	}
	if f, err := sim.ParseFaults("all"); err != nil || f != sim.FaultAll || f.String() != "all" {
		t.Errorf("all: %v, %v", f, err)
	}
	if f, err := sim.ParseFaults("default"); err != nil || f != sim.FaultDefault || f.String() != "default" || f&(sim.FaultCrash|sim.FaultRestart) != 0 {
		t.Errorf("default: %v, %v", f, err)
	}
	if f, err := sim.ParseFaults("default,crash"); err != nil || f != sim.FaultDefault|sim.FaultCrash {
		t.Errorf("default,crash: %v, %v", f, err)
	}
	if f, err := sim.ParseFaults("default,restart"); err != nil || f != sim.FaultDefault|sim.FaultRestart || f.String() != "loss,dup,reorder,delay,partition,freeze,move,restart" {
		t.Errorf("default,restart: %v, %v", f, err)
	}
	if f, err := sim.ParseFaults("all"); err != nil || f&sim.FaultRestart == 0 || f&sim.FaultMaster != 0 {
		t.Errorf("all: restart, and not master: %v, %v", f, err)
	}
	if f, err := sim.ParseFaults("all,master"); err != nil || f != sim.FaultAll|sim.FaultMaster || !strings.HasSuffix(f.String(), ",restart,master") {
		t.Errorf("all,master: %v, %v", f, err)
	}
	if f, err := sim.ParseFaults("none"); err != nil || f != 0 || f.String() != "none" {
		t.Errorf("none: %v, %v", f, err)
	}
	if _, err := sim.ParseFaults("loss,meteor"); !errors.Is(err, sim.ErrBadFault) {
		t.Errorf("meteor: %v", err)
	}
}

// goldenTraces pin the trace hashes of a few seeds: a run depends on the
// seed alone, not on the machine, GOMAXPROCS or the race detector. A
// deliberate change to what the simulator draws or traces changes them:
// then update them here (and check testdata/regressions.txt).
var goldenTraces = []struct {
	args   []string
	faults string
	routes sim.Routes
	seed   uint64
	hash   string
}{
	{[]string{"ring", "-n", "5", "-laps", "20"}, "default", sim.RoutesBroadcast, 1, "ee1bcb3c25e5f7e456c2a890526c06639d0721354cd77b943c8b08885e74c0eb"},
	{[]string{"jacobi", "-n", "16", "-workers", "3", "-iters", "60"}, "default,checkpoint,crash", sim.RoutesBroadcast, 3, "5cd4aead57a1b5838f12ebc39f1666bb08e4c595cefa6d1444984c5c6209afb4"},
	{[]string{"ring", "-n", "5", "-laps", "20"}, "default", sim.RoutesDemand, 1, "a874aa8c185e96768a32b4121497c633d85592db558fefcb1bad6bc73bf02634"},
	{[]string{"jacobi", "-n", "16", "-workers", "3", "-iters", "60"}, "default,checkpoint,crash", sim.RoutesDemand, 3, "241ae69ea03c23eec01cc973f4da633ac7cf7cd330e408b2ae4d7c38e654c9c5"},
}

// TestGoldenTraces: the pinned seeds give their pinned trace hashes; the
// trace written to Config.Trace is what was hashed, and the result's
// tail is its last lines.
func TestGoldenTraces(t *testing.T) {
	for _, g := range goldenTraces {
		f, err := sim.ParseFaults(g.faults)
		if err != nil {
			t.Fatal(err)
		}
		var trace bytes.Buffer
		rep, err := sim.Check(sim.Config{Faults: f, Routes: g.routes, Trace: &trace}, []uint64{g.seed}, program(t, g.args), 1)
		if err != nil {
			t.Fatal(err)
		}
		r := rep.Seeds[0]
		if r.TraceHash != g.hash {
			t.Errorf("%v --faults %s --routes %s seed %d: trace %s, want %s", g.args, g.faults, g.routes, g.seed, r.TraceHash, g.hash)
		}
		if sum := sha256.Sum256(trace.Bytes()); hex.EncodeToString(sum[:]) != r.TraceHash {
			t.Errorf("%v seed %d: the trace written hashes to %x, the result says %s", g.args, g.seed, sum, r.TraceHash)
		}
		lines := strings.Split(strings.TrimSuffix(trace.String(), "\n"), "\n")
		if len(lines) < r.Events || !slices.Equal(r.Tail, lines[len(lines)-40:]) {
			t.Errorf("%v seed %d: %d events, %d lines written; tail %q, last lines %q", g.args, g.seed, r.Events, len(lines), r.Tail, lines[max(0, len(lines)-40):])
		}
	}
}

// BenchmarkRun runs one seed of jacobi under the default faults per
// iteration: the simulation's cost per event (ns/event), its tasks'
// own work included.
func BenchmarkRun(b *testing.B) {
	p, err := sim.ProgramFromArgs("jacobi", []string{"-n", "16", "-workers", "3", "-iters", "60"})
	if err != nil {
		b.Fatal(err)
	}
	events := 0
	for b.Loop() {
		root, err := p()
		if err != nil {
			b.Fatal(err)
		}
		r := sim.Run(sim.Config{Seed: 3, Faults: sim.FaultDefault, Horizon: 50 * time.Millisecond}, root)
		if !r.OK {
			b.Fatal(r.Err)
		}
		events += r.Events
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
}

// TestRoutesOnDemand runs seeds of three examples (messages, spawns and
// exits, collectives) with routes on demand under every fault,
// checkpoints and a crash included, twice: every invariant holds (a task
// on at most one host, per-pair FIFO and exactly once, no route going
// back), every seed replays and ends with the fault-free run's result.
// The seeds together take the protocol's paths: hosts refused with the
// newest route they know and asked tasks' origins, origins answered, and
// a host asked the master for the task of a deleted origin.
func TestRoutesOnDemand(t *testing.T) {
	cfg := sim.Config{Faults: sim.FaultAll, Routes: sim.RoutesDemand}
	for _, args := range [][]string{examplePrograms[0], examplePrograms[1], examplePrograms[4]} {
		for _, r := range checkTwice(t, cfg, args, seeds(*simSeeds)).Seeds {
			if !r.OK {
				report(t, args, cfg, r)
			}
		}
	}
	// What the protocol did, from the traces of a few seeds.
	seen := map[string]int{}
	for _, args := range [][]string{examplePrograms[0], examplePrograms[4]} {
		p := program(t, args)
		for _, seed := range seeds(*simSeeds) {
			root, err := p()
			if err != nil {
				t.Fatal(err)
			}
			var trace bytes.Buffer
			c := cfg
			c.Seed, c.Trace, c.Horizon = seed, &trace, 20*time.Millisecond
			if r := sim.Run(c, root); !r.OK {
				t.Fatalf("%v seed %d: %v", args, seed, r.Err)
			}
			sc := bufio.NewScanner(&trace)
			for sc.Scan() {
				l := sc.Text()
				for _, k := range []string{"route ask", "route answer", "→master route ask", "host lost"} {
					if strings.Contains(l, k) {
						seen[k]++
					}
				}
			}
		}
	}
	t.Logf("on demand: %v", seen)
	if *simSeeds >= 12 {
		for _, k := range []string{"route ask", "route answer", "→master route ask", "host lost"} {
			if seen[k] == 0 {
				t.Errorf("no seed's trace has %q", k)
			}
		}
	}
}
