package load

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/sched/sim"
)

// smallTrace generates a seeded synthetic pool and passes it through the
// trace file format, as a daemon would read it.
func smallTrace(t *testing.T) (*sim.Trace, string) {
	t.Helper()
	tr, err := sim.SyntheticTrace(sim.SyntheticConfig{Hosts: 3, Days: 1, Step: 180, StartDay: 0, MemoryMiB: 4096, Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pool.trace")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.WriteTrace(f, tr); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return tr, path
}

func TestTraceReplay(t *testing.T) {
	tr, path := smallTrace(t)
	start := time.Date(2025, 11, 22, 9, 0, 0, 0, time.UTC)
	// Speed-up 60: one 180 s step of the trace lasts 3 s of the daemon's clock.
	r, err := OpenTrace(path, TraceConfig{Host: "ws02", Start: start, Speedup: 60})
	if err != nil {
		t.Fatal(err)
	}
	if h := r.Host(); h != tr.Hosts[1] {
		t.Errorf("host %+v, want %+v", h, tr.Hosts[1])
	}
	n := tr.Steps()
	rng := rand.New(rand.NewPCG(7, 11))
	for range 200 {
		step := rng.IntN(n)
		at := start.Add(time.Duration(step)*3*time.Second + time.Duration(rng.Int64N(int64(3*time.Second))))
		s, err := r.Sample(at)
		if err != nil {
			t.Fatal(err)
		}
		x := tr.Samples[step][1]
		if s.External != float64(x.Load) || s.EmulatedLoad != s.External || s.MemFreeMiB != float64(x.MemFree) || s.Users != int(x.Users) {
			t.Fatalf("at step %d: got %+v, want %+v", step, s, x)
		}
		if !s.Emulated || !strings.HasPrefix(s.Source, "trace ws02 step ") || !s.Time.Equal(at) {
			t.Fatalf("labels: %+v", s)
		}
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	// Before the start the replay waits at step 0; after the end the last
	// step stays, marked as ended.
	if i, ended := r.Step(start.Add(-time.Hour)); i != 0 || ended {
		t.Errorf("before start: step %d ended %v", i, ended)
	}
	if i, ended := r.Step(start.Add(time.Duration(n-1) * 3 * time.Second)); i != n-1 || ended {
		t.Errorf("last step: step %d ended %v", i, ended)
	}
	end := start.Add(time.Duration(n) * 3 * time.Second)
	s, _ := r.Sample(end.Add(time.Hour))
	if !strings.HasSuffix(s.Source, "(ended)") || s.External != float64(tr.Samples[n-1][1].Load) {
		t.Errorf("after the end: %+v", s)
	}
}

func TestTraceLoopAndOffset(t *testing.T) {
	tr, _ := smallTrace(t)
	n := tr.Steps()
	start := time.Unix(0, 0)
	// Start at 12:00 of the trace (step 240), real time, looping.
	r, err := NewTrace(tr, TraceConfig{Host: "ws03", Start: start, Offset: 12 * time.Hour, Loop: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		after time.Duration
		step  int
	}{
		{0, 240},
		{179 * time.Second, 240},
		{180 * time.Second, 241},
		{12 * time.Hour, 0},
		{12*time.Hour + 5*180*time.Second + 1, 5},
		{36 * time.Hour, 0},
	} {
		if i, ended := r.Step(start.Add(c.after)); i != c.step || ended {
			t.Errorf("after %v: step %d (ended %v), want %d", c.after, i, ended, c.step)
		}
	}
	if n != 480 {
		t.Fatalf("trace of %d steps, the cases above assume 480", n)
	}
}

func TestTraceErrors(t *testing.T) {
	tr, path := smallTrace(t)
	if _, err := NewTrace(tr, TraceConfig{Host: "nope"}); !errors.Is(err, ErrUnknownHost) {
		t.Errorf("unknown host: %v", err)
	}
	for _, c := range []TraceConfig{
		{Host: "ws01", Speedup: -1},
		{Host: "ws01", Speedup: math.NaN()},
		{Host: "ws01", Speedup: math.Inf(1)},
		{Host: "ws01", Speedup: 2e6},
		{Host: "ws01", Offset: -time.Second},
	} {
		if _, err := NewTrace(tr, c); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: err %v, want ErrInvalid", c, err)
		}
	}
	if _, err := NewTrace(nil, TraceConfig{Host: "ws01"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil trace: %v", err)
	}
	bad := *tr
	bad.Step = 0
	if _, err := NewTrace(&bad, TraceConfig{Host: "ws01"}); !errors.Is(err, sim.ErrBadTrace) {
		t.Errorf("inconsistent trace: %v", err)
	}
	if _, err := OpenTrace(filepath.Join(filepath.Dir(path), "missing"), TraceConfig{Host: "ws01"}); err == nil {
		t.Error("missing file: no error")
	}
	garbage := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(garbage, []byte("not a trace\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenTrace(garbage, TraceConfig{Host: "ws01"}); !errors.Is(err, sim.ErrBadTrace) {
		t.Errorf("garbage file: %v", err)
	}
}
