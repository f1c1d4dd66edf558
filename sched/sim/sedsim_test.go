package sim

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/dpvm/dpvm/sched"
)

func TestTraceRoundTrip(t *testing.T) {
	c := DefaultSynthetic()
	c.Hosts, c.Days = 5, 1
	tr, err := SyntheticTrace(c)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteTrace(&b, tr); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "dpvm-trace 1\nstep 180\nstart thu 00:00:00\nhost ws01 1 1\n") {
		t.Fatalf("header:\n%.200s", b.String())
	}
	back, err := ReadTrace(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tr, back) {
		t.Fatal("trace changed through write and read")
	}
}

func TestReadTraceOrderAndComments(t *testing.T) {
	in := `dpvm-trace 1   # format
# a pool of two
step 60
start sun 23:59
host a 1 0
host b 2.5 1

1 b 0.5 100 2
0 a 0 512 0
1 a 1.25 300 1
0 b 3 0 0
`
	tr, err := ReadTrace(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Steps() != 2 || tr.Samples[1][1] != (Sample{0.5, 100, 2}) || tr.Samples[0][0] != (Sample{0, 512, 0}) {
		t.Fatalf("%+v", tr.Samples)
	}
	if d, h := tr.Clock(1); d != 0 || h != 0 {
		t.Fatalf("step 1 is day %d hour %g, want Monday 00:00", d, h)
	}
}

func TestReadTraceErrors(t *testing.T) {
	head := "dpvm-trace 1\nstep 60\nhost a 1 0\n"
	cases := map[string]string{
		"no header":     "step 60\n",
		"version":       "dpvm-trace 2\n",
		"empty":         "",
		"no step":       "dpvm-trace 1\nhost a 1 0\n0 a 0 0 0\n",
		"bad step":      "dpvm-trace 1\nstep -1\n",
		"bad alpha":     "dpvm-trace 1\nstep 60\nhost a 0 0\n",
		"dup host":      head + "host a 1 0\n",
		"unknown host":  head + "0 b 0 0 0\n",
		"missing":       head + "host b 1 0\n0 a 0 0 0\n",
		"duplicate":     head + "0 a 0 0 0\n0 a 1 1 1\n1 a 0 0 0\n",
		"negative load": head + "0 a -1 0 0\n",
		"nan":           head + "0 a NaN 0 0\n",
		"fields":        head + "0 a 0 0\n",
		"start":         "dpvm-trace 1\nstep 60\nstart xyz 00:00\n",
		"time":          "dpvm-trace 1\nstep 60\nstart mon 25:00\n",
		"late host":     head + "0 a 0 0 0\nhost b 1 0\n",
		"no samples":    head,
	}
	for name, in := range cases {
		if _, err := ReadTrace(strings.NewReader(in)); !errors.Is(err, ErrBadTrace) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func FuzzReadTrace(f *testing.F) {
	f.Add("dpvm-trace 1\nstep 60\nstart mon 00:00\nhost a 1 0\n0 a 0.5 100 1\n")
	f.Add("dpvm-trace 1\nstep 1e300\nhost a 1e-300 9\n0 a 3.4e38 0 65535\n")
	f.Add("dpvm-trace 1\nstep 60\nhost a 1 0\nhost b 1 0\n0 a 0 0 0\n0 b 0 0 0\n1 b 0 0 0\n1 a 0 0 0\n")
	f.Fuzz(func(t *testing.T, in string) {
		tr, err := ReadTrace(strings.NewReader(in))
		if err != nil {
			if !errors.Is(err, ErrBadTrace) {
				t.Fatalf("error %v does not wrap ErrBadTrace", err)
			}
			return
		}
		if err := tr.Validate(); err != nil {
			t.Fatalf("accepted an invalid trace: %v", err)
		}
		var b bytes.Buffer
		if err := WriteTrace(&b, tr); err != nil {
			t.Fatal(err)
		}
		back, err := ReadTrace(&b)
		if err != nil || back.Steps() != tr.Steps() || len(back.Hosts) != len(tr.Hosts) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func TestSyntheticPatterns(t *testing.T) {
	tr, err := SyntheticTrace(DefaultSynthetic())
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Hosts) != 28 || tr.Steps() != 5*480 {
		t.Fatalf("%d hosts, %d steps", len(tr.Hosts), tr.Steps())
	}
	// Mean users per host: weekday office hours ≫ nights and weekend days.
	users := func(pred func(day int, hour float64) bool) float64 {
		var sum, n float64
		for i := 0; i < tr.Steps(); i++ {
			d, h := tr.Clock(i)
			if !pred(d, h) {
				continue
			}
			for _, s := range tr.Samples[i] {
				sum += float64(s.Users)
				n++
			}
		}
		return sum / n
	}
	office := users(func(d int, h float64) bool { return d < 5 && h >= 10 && h < 17 })
	night := users(func(d int, h float64) bool { return h >= 1 && h < 6 })
	weekend := users(func(d int, h float64) bool { return d >= 5 && h >= 10 && h < 17 })
	if !(office > 0.4 && night < 0.1 && weekend < office/2) {
		t.Errorf("users per host: office %.2f, night %.2f, weekend days %.2f", office, night, weekend)
	}
	again, _ := SyntheticTrace(DefaultSynthetic())
	if !reflect.DeepEqual(tr, again) {
		t.Fatal("synthetic trace not deterministic")
	}
	if _, err := SyntheticTrace(SyntheticConfig{}); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("zero config: %v", err)
	}
	if s := StartAt(tr, 16); s != 320 {
		t.Fatalf("16:00 is step %d, want 320", s)
	}
}

func TestSEDExperiment(t *testing.T) {
	tr, _ := SyntheticTrace(DefaultSynthetic())
	for _, hour := range []float64{0, 16} {
		cfg := DefaultSEDConfig("x", StartAt(tr, hour), tr.Step)
		r, err := RunSED(tr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r.Hours != 96 || len(r.Apps) != 3 {
			t.Fatalf("%+v", r)
		}
		g, a70, a50 := r.Apps[0], r.Apps[1], r.Apps[2]
		if !(g.Size >= a70.Size && a70.Size >= a50.Size && a50.Size >= 1) {
			t.Errorf("sizes %d %d %d", g.Size, a70.Size, a50.Size)
		}
		for _, a := range r.Apps {
			delta := sched.DefaultClasses()[a.Class-1].Delta
			if math.Abs(a.EDT-delta/float64(a.Size)) > 1e-12 || math.Abs(a.MDT-a.MDC/float64(a.Size)) > 1e-12 {
				t.Errorf("%s: EDT %g MDT %g", a.App.Name, a.EDT, a.MDT)
			}
			sum := 0
			for _, n := range a.PerHour {
				sum += n
			}
			if sum != a.Migrations || len(a.PerHour) != 96 || math.Abs(a.MeanPerHour-float64(sum)/96) > 1e-12 {
				t.Errorf("%s: per-hour counts %v do not add up to %d", a.App.Name, a.PerHour, a.Migrations)
			}
		}
		again, _ := RunSED(tr, cfg)
		if !reflect.DeepEqual(r, again) {
			t.Fatal("not deterministic")
		}
	}
}

// TestSEDUserArrival: two idle reference hosts; SED maps the application
// onto class 1 (two nodes, EDT 1/2, which ties class 4's 4/8 and is
// faster). A second user logs in on one host and stays; after c²max checks
// its process goes to the other host (user-free, below d_max) and stays.
func TestSEDUserArrival(t *testing.T) {
	tr := &Trace{Step: 180, Hosts: []TraceHost{{"a", 1, 1}, {"b", 1, 1}}}
	for i := 0; i < 40; i++ {
		users := uint16(0)
		if i >= 10 {
			users = 2
		}
		tr.Samples = append(tr.Samples, []Sample{{0, 4096, users}, {0, 4096, 0}})
	}
	cfg := DefaultSEDConfig("x", 0, tr.Step)
	cfg.Apps = []SEDApp{{"A", 1}}
	r, err := RunSED(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := r.Apps[0]
	if a.Size != 2 || a.Class != 1 || a.EDT != 0.5 {
		t.Fatalf("mapping: %+v", a)
	}
	// c²max = 4: a candidate at steps 10..13, moved at step 13 (minute 39).
	if a.Migrations != 1 || a.PerHour[0] != 1 || a.PerHour[1] != 0 {
		t.Fatalf("migrations %d per hour %v", a.Migrations, a.PerHour)
	}
	if _, err := RunSED(tr, SEDConfig{Classes: cfg.Classes, Params: cfg.Params, Apps: cfg.Apps, Start: 40, Steps: 1}); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("start beyond the trace: %v", err)
	}
}
