package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/examples/npb"
)

// The NPB runs of examples/npb on embedded virtual machines: they need the
// daemon, which examples never import.
//
// The benchmarks run class A (the class the performance targets name) once
// per iteration and report the kernel's own Mop/s through the runtime at
// np = 1 and 2 (the serial baseline is examples/npb's BenchmarkSerial). Run
// them one at a time on a quiet machine, e.g.
//
//	go test -run '^$' -bench 'RuntimeNP1/mg' -benchtime 3x ./integration/examples

// npbRun runs an NPB kernel on an embedded virtual machine of opts.Hosts
// daemons (at least one).
func npbRun(ctx context.Context, kernel, class string, np int, opts npb.RunOptions) (*npb.Report, error) {
	opts.Local = true
	opts.Hosts = max(opts.Hosts, 1)
	return npb.Run(ctx, daemon.LocalRunner(daemon.RunOptions{Hosts: opts.Hosts}), kernel, class, np, opts)
}

// TestRunS runs every kernel's class S through the task runtime at np = 1,
// 2 and 4 and checks the reports.
func TestRunS(t *testing.T) {
	for _, k := range npb.Kernels {
		for _, np := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("%s/np%d", k, np), func(t *testing.T) {
				t.Parallel()
				var prog []npb.Progress
				r, err := npbRun(context.Background(), k, "S", np, npb.RunOptions{Progress: func(p npb.Progress) { prog = append(prog, p) }})
				if err != nil {
					t.Fatal(err)
				}
				if r.Verified != npb.Successful || r.Kernel != k || r.Class != "S" || r.NP != np || r.Hosts != 1 {
					t.Fatalf("report %+v", r)
				}
				if len(prog) == 0 || prog[len(prog)-1].Done != prog[len(prog)-1].Total {
					t.Fatalf("progress %v does not end complete", prog)
				}
			})
		}
	}
}

// TestRunW runs class W of every kernel on two tasks.
func TestRunW(t *testing.T) {
	for _, k := range npb.Kernels {
		t.Run(k, func(t *testing.T) {
			t.Parallel()
			r, err := npbRun(context.Background(), k, "W", 2, npb.RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Verified != npb.Successful {
				t.Fatalf("%s class W np 2: %s, values %+v", k, r.Verified, r.Values)
			}
		})
	}
}

func TestRunBadParameters(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		kernel, class string
		np            int
		want          error
	}{
		{"xx", "S", 1, npb.ErrUnknownKernel},
		{"ep", "Q", 1, npb.ErrUnknownClass},
		{"ep", "S", 0, npb.ErrBadNP},
		{"mg", "S", 3, npb.ErrBadNP},
		{"mg", "S", 32, npb.ErrBadNP},
		{"ft", "S", 6, npb.ErrBadNP},
		{"is", "S", 5, npb.ErrBadNP},
		{"cg", "S", 1401, npb.ErrBadNP},
	}
	for _, c := range cases {
		if _, err := npbRun(ctx, c.kernel, c.class, c.np, npb.RunOptions{}); !errors.Is(err, c.want) {
			t.Errorf("npbRun(%s, %s, %d) = %v, want %v", c.kernel, c.class, c.np, err, c.want)
		}
	}
}

// TestRunTwoHosts spreads class S over a two-host embedded machine, so the
// kernels' messages cross hosts.
func TestRunTwoHosts(t *testing.T) {
	for _, k := range npb.Kernels {
		t.Run(k, func(t *testing.T) {
			r, err := npbRun(context.Background(), k, "S", 4, npb.RunOptions{Hosts: 2})
			if err != nil {
				t.Fatal(err)
			}
			if r.Verified != npb.Successful || r.Hosts != 2 {
				t.Fatalf("%s class S np 4 on 2 hosts: %s, hosts %d, values %+v", k, r.Verified, r.Hosts, r.Values)
			}
		})
	}
}

// TestRunOddNP runs the kernels whose decomposition takes any np on three
// tasks.
func TestRunOddNP(t *testing.T) {
	for _, k := range []string{"ep", "cg"} {
		t.Run(k, func(t *testing.T) {
			t.Parallel()
			r, err := npbRun(context.Background(), k, "S", 3, npb.RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Verified != npb.Successful || r.NP != 3 {
				t.Fatalf("%s class S np 3: %+v", k, r)
			}
		})
	}
}

// TestRunRefusesWithoutMemory: a run that needs more than is available is
// refused before it starts, with an error naming both figures; when the
// available memory is unknown, or the check is off, the run goes ahead.
func TestRunRefusesWithoutMemory(t *testing.T) {
	ctx := context.Background()
	four := func() (int64, error) { return 4 << 30, nil }
	_, err := npbRun(ctx, "ft", "C", 2, npb.RunOptions{MemAvailable: four})
	if !errors.Is(err, npb.ErrNoMemory) {
		t.Fatalf("FT class C np 2 with 4 GiB: %v, want npb.ErrNoMemory", err)
	}
	need, _ := npb.MemoryNeed("ft", "C", 2, 0)
	for _, s := range []string{"FT class C np 2: needs about " + strconv.FormatFloat(float64(need)/(1<<30), 'f', 1, 64) + " GiB", "reports 4.0 GiB available"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	unknown := func() (int64, error) { return 0, errors.New("no meminfo here") }
	tiny := func() (int64, error) { return 1, nil }
	for _, opts := range []npb.RunOptions{{MemAvailable: unknown}, {MemAvailable: tiny, NoMemoryCheck: true}} {
		r, err := npbRun(ctx, "is", "S", 2, opts)
		if err != nil || r.Verified != npb.Successful {
			t.Fatalf("IS class S np 2: %v, %+v", err, r)
		}
	}
	if _, err := npbRun(ctx, "is", "S", 2, npb.RunOptions{MemAvailable: tiny}); !errors.Is(err, npb.ErrNoMemory) {
		t.Fatalf("IS class S np 2 with 1 byte: %v, want npb.ErrNoMemory", err)
	}
}

// TestKernelsVerifyUnderMigration runs every kernel on a virtual machine of
// three daemons while a seeded mover migrates their worker tasks among the
// hosts, directly and indirectly: the results must still verify.
func TestKernelsVerifyUnderMigration(t *testing.T) {
	for i, kernel := range kernelsUnderTest() {
		root, err := npb.NewRoot(kernel, "S", 4)
		if err != nil {
			t.Fatal(err)
		}
		root.Lines = true
		sink := &reportSink{}
		// EP's, CG's and IS's workers can be moved in every wait, so the
		// mover moves them hundreds of times (a CG run under the race
		// detector takes some 35 s): a generous deadline.
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
		vm, err := daemon.StartLocalVM(ctx, 3, daemon.Config{Output: sink, SharedDir: t.TempDir(), MoveTimeout: 5 * time.Second, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		m := vm.Master()
		rootTID, err := m.SpawnTask(root)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		moves := make(chan int, 1)
		go func() { moves <- m.Shuffle(ctx, done, uint64(i), daemon.KeepTask(rootTID)) }()
		info, err := m.Wait(ctx, rootTID)
		if err != nil {
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			ts, _ := m.AllTasks(sctx, false)
			scancel()
			for _, ti := range ts {
				t.Logf("%v %s on %s %v queued %d", ti.TID, ti.Type, ti.Host, ti.State, ti.Queued)
			}
		}
		close(done)
		made := <-moves
		vm.Halt(10 * time.Second)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if err := daemon.ExitError(info); err != nil {
			t.Fatalf("%s: %v", kernel, err)
		}
		if sink.Report() == nil || sink.Report().Verified != npb.Successful {
			t.Fatalf("%s under migration: report %+v", kernel, sink.Report())
		}
		// Bit for bit the result of a run where nothing moves.
		still, err := npbRun(context.Background(), kernel, "S", 4, npb.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		moved, _ := json.Marshal(sink.Report().Values)
		unmoved, _ := json.Marshal(still.Values)
		if string(moved) != string(unmoved) {
			t.Fatalf("%s: values under migration %s differ from a run without moves %s", kernel, moved, unmoved)
		}
		// EP, FT and IS at class S can finish before the mover catches a
		// worker on a fast machine; CG and MG run long enough.
		if made == 0 && (kernel == "cg" || kernel == "mg") {
			t.Errorf("%s: no worker was moved while it ran", kernel)
		}
		t.Logf("%s class S np 4: %s with %d moves", kernel, sink.Report().Verified, made)
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("NPB_DEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func kernelsUnderTest() []string {
	if k := os.Getenv("NPB_KERNELS"); k != "" {
		return strings.Split(k, ",")
	}
	return []string{"cg", "mg", "ep", "ft", "is"}
}

func benchRun(b *testing.B, kernel, class string, np int) {
	var mops float64
	for b.Loop() {
		r, err := npbRun(context.Background(), kernel, class, np, npb.RunOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if r.Verified == npb.Unsuccessful {
			b.Fatalf("%s class %s np %d did not verify", kernel, class, np)
		}
		mops = max(mops, r.Mops)
	}
	b.ReportMetric(mops, "Mop/s")
}

func BenchmarkRuntimeNP1(b *testing.B) {
	for _, k := range npb.Kernels {
		b.Run(k, func(b *testing.B) { benchRun(b, k, "A", 1) })
	}
}

func BenchmarkRuntimeNP2(b *testing.B) {
	for _, k := range npb.Kernels {
		b.Run(k, func(b *testing.B) { benchRun(b, k, "A", 2) })
	}
}

// BenchmarkOverheadNP1 alternates the serial form and the runtime at np = 1
// on class A, so both see the same machine load, and reports the runtime's
// overhead on the kernel's own timed region: the best runtime time against
// the best serial time, in percent (negative is noise). Taking the best of
// several runs discards those that another process descheduled.
func BenchmarkOverheadNP1(b *testing.B) {
	for _, k := range npb.Kernels {
		b.Run(k, func(b *testing.B) {
			ts, tr := math.Inf(1), math.Inf(1)
			for b.Loop() {
				// Collect the previous run's arrays first, so neither
				// run pays for the other's garbage.
				runtime.GC()
				s, err := npb.RunSerial(k, "A", nil)
				if err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				r, err := npbRun(context.Background(), k, "A", 1, npb.RunOptions{})
				if err != nil {
					b.Fatal(err)
				}
				ts = min(ts, s.TimeS)
				tr = min(tr, r.TimeS)
			}
			b.ReportMetric(100*(tr/ts-1), "%overhead")
		})
	}
}

// reportSink collects a run's output and picks out its report line.
type reportSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *reportSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// Report is the run's report, or nil.
func (s *reportSink) Report() *npb.Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range strings.Split(s.buf.String(), "\n") {
		if rest, ok := strings.CutPrefix(l, "npb-report "); ok {
			if r, err := npb.ParseReport([]byte(rest)); err == nil {
				return r
			}
		}
	}
	return nil
}
