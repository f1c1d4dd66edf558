package load

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func fixtureProc() *Proc {
	return &Proc{
		StatPath:    "testdata/proc/stat",
		MeminfoPath: "testdata/proc/meminfo",
		LoadavgPath: "testdata/proc/loadavg",
		SelfTaskDir: "testdata/proc/task",
		UtmpPath:    "testdata/utmp-glibc",
		UtmpOrder:   binary.LittleEndian,
		Window:      -1,
	}
}

func TestParseStatFixture(t *testing.T) {
	data, err := os.ReadFile("testdata/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ParseStat(data)
	if err != nil {
		t.Fatal(err)
	}
	if want := (StatInfo{ProcsRunning: 7, ProcsBlocked: 1, CPUs: 4}); st != want {
		t.Errorf("got %+v, want %+v", st, want)
	}
}

func TestParseStatErrors(t *testing.T) {
	for name, in := range map[string]string{
		"empty":          "",
		"no running":     "cpu 1 2 3\nprocs_blocked 0\n",
		"negative":       "procs_running -1\n",
		"not a number":   "procs_running x\n",
		"extra field":    "procs_running 1 2\n",
		"missing value":  "procs_running\n",
		"too large":      "procs_running 99999999999\n",
		"bad blocked":    "procs_running 1\nprocs_blocked 1.5\n",
		"float running":  "procs_running 1.5\n",
		"huge line only": "intr " + string(make([]byte, 10)) + "\n",
	} {
		if _, err := ParseStat([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
}

func TestParseMeminfo(t *testing.T) {
	for _, c := range []struct {
		file string
		want float64
	}{
		{"testdata/proc/meminfo", 23993200.0 / 1024},
		{"testdata/proc/meminfo-old", (512000.0 + 102400 + 409600) / 1024}, // no MemAvailable
	} {
		data, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		m, err := ParseMeminfo(data)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if got := m.AvailableMiB(); got != c.want {
			t.Errorf("%s: available %g MiB, want %g", c.file, got, c.want)
		}
	}
	for name, in := range map[string]string{
		"empty":       "",
		"no free":     "MemTotal: 100 kB\nCached: 5 kB\n",
		"no unit":     "MemAvailable: 100\n",
		"wrong unit":  "MemFree: 100 MB\n",
		"bad number":  "MemFree: 1e5 kB\n",
		"negative":    "MemFree: -3 kB\n",
		"beyond 1EiB": "MemFree: 99999999999999999 kB\n",
	} {
		if _, err := ParseMeminfo([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
}

func TestParseLoadavg(t *testing.T) {
	if v, err := ParseLoadavg([]byte("1.28 1.78 2.14 3/105 15575\n")); err != nil || v != 1.28 {
		t.Errorf("got %g, %v; want 1.28", v, err)
	}
	for _, in := range []string{"", "   \n", "x 1 2", "-1 0 0", "NaN 0 0", "Inf 1 1", "1e300 1 1"} {
		if _, err := ParseLoadavg([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: err %v, want ErrMalformed", in, err)
		}
	}
}

func TestParseTaskState(t *testing.T) {
	for in, want := range map[string]byte{
		"1 (init) S 0 1":             'S',
		"103 (a (weird) R name) D 1": 'D',
		"7 () R 1":                   'R',
		"8 (x) Z":                    'Z',
	} {
		if got, err := ParseTaskState([]byte(in)); err != nil || got != want {
			t.Errorf("%q: got %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1 (init)", "1 (init) ", "1 (init)S", "1 (init) 5", "no paren R"} {
		if _, err := ParseTaskState([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: err %v, want ErrMalformed", in, err)
		}
	}
}

func TestRunningThreads(t *testing.T) {
	n, err := RunningThreads("testdata/proc/task")
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("running threads = %d, want 2 (101 and 104)", n)
	}
	if _, err := RunningThreads("testdata/none"); err == nil {
		t.Error("missing task directory: no error")
	}
}

func TestProcSampleFixtures(t *testing.T) {
	p := fixtureProc()
	now := time.Date(2025, 11, 22, 10, 0, 0, 0, time.UTC)
	s, err := p.Sample(now)
	if err != nil {
		t.Fatal(err)
	}
	want := Sample{
		Time:       now,
		External:   5, // procs_running 7 minus the 2 running threads of the daemon
		LoadAvg1:   1.28,
		CPUs:       4,
		MemFreeMiB: 23993200.0 / 1024,
		Users:      2,
		Source:     "proc",
	}
	if !equalSample(s, want) {
		t.Errorf("got  %+v\nwant %+v", s, want)
	}
	if err := s.Validate(); err != nil {
		t.Error(err)
	}
	s.Tasks = 3
	if s.Load() != 8 {
		t.Errorf("load with 3 tasks = %g, want 8", s.Load())
	}

	// No utmp file: no users.
	p.UtmpPath = "testdata/no-such-utmp"
	if s, err := p.Sample(now); err != nil || s.Users != 0 {
		t.Errorf("missing utmp: users %d, err %v; want 0, nil", s.Users, err)
	}
	// Any other file missing or malformed is an error naming it.
	for _, f := range []func(*Proc){
		func(p *Proc) { p.StatPath = "testdata/proc/meminfo" },
		func(p *Proc) { p.MeminfoPath = "testdata/proc/stat" },
		func(p *Proc) { p.LoadavgPath = "testdata/none" },
		func(p *Proc) { p.SelfTaskDir = "testdata/none" },
	} {
		q := fixtureProc()
		f(q)
		if _, err := q.Sample(now); err == nil {
			t.Errorf("%+v: no error", q)
		}
	}
}

func TestProcSmoothing(t *testing.T) {
	dir := t.TempDir()
	stat := filepath.Join(dir, "stat")
	p := fixtureProc()
	p.StatPath = stat
	p.SelfTaskDir = filepath.Join(dir, "task") // empty: no thread of the daemon runs
	if err := os.Mkdir(p.SelfTaskDir, 0o755); err != nil {
		t.Fatal(err)
	}
	p.Window = 10 * time.Second
	t0 := time.Unix(1000, 0)
	want := 0.0
	for i, c := range []struct {
		running int
		at      time.Duration
	}{
		{6, 0},                     // first reading taken as is
		{1, 10 * time.Second},      // one window later: weight 1 − 1/e
		{1, 10 * time.Second},      // same instant: weight 0
		{3, 15 * time.Second},      // half a window
		{2, 5 * time.Second},       // the clock went back: reading as is
		{4, 5*time.Second + 1},     // a nanosecond later: almost no weight
		{0, 5*time.Second + 1<<40}, // ages later: almost all weight
	} {
		if err := os.WriteFile(stat, []byte("cpu0 1 2 3\nprocs_running "+strconv.Itoa(c.running)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := p.Sample(t0.Add(c.at))
		if err != nil {
			t.Fatal(err)
		}
		x := float64(c.running)
		switch i {
		case 0, 4:
			want = x
		case 1:
			want = 6 + (1-1/math.E)*(1-6)
		case 2:
		case 3:
			want += (1 - math.Exp(-0.5)) * (3 - want)
		case 5:
			want += (1 - math.Exp(-1e-10)) * (4 - want)
		case 6:
			want += (1 - math.Exp(-float64(1<<40)/1e10)) * (0 - want)
		}
		if math.Abs(s.External-want) > 1e-12 {
			t.Errorf("reading %d (%d running at %v): external %.15g, want %.15g", i, c.running, c.at, s.External, want)
		}
	}
	if got := Smooth(2, 8, time.Second, 0); got != 8 {
		t.Errorf("Smooth without window = %g, want 8", got)
	}
}

func equalSample(a, b Sample) bool {
	if !a.Time.Equal(b.Time) || len(a.TaskMem) != len(b.TaskMem) {
		return false
	}
	for i := range a.TaskMem {
		if a.TaskMem[i] != b.TaskMem[i] {
			return false
		}
	}
	a.Time, b.Time, a.TaskMem, b.TaskMem = time.Time{}, time.Time{}, nil, nil
	return a.Source == b.Source && a.Emulated == b.Emulated && a.Tasks == b.Tasks && a.External == b.External &&
		a.EmulatedLoad == b.EmulatedLoad && a.LoadAvg1 == b.LoadAvg1 && a.CPUs == b.CPUs &&
		a.MemFreeMiB == b.MemFreeMiB && a.Users == b.Users
}
