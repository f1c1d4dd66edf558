package sim

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// TestMM1 checks the model against queueing theory: with no load sharing,
// exponential arrivals and service and FCFS every node is an M/M/1 queue
// whose mean response time is 1/(μ−λ). Run lengths grow with utilisation so
// the batch-means estimate has a standard error near 1.2%: the asymptotic
// relative variance of the M/M/1 time average is about
// 2(1+ρ)/(ρ(1−ρ)²) per unit of node-time.
func TestMM1(t *testing.T) {
	for i := 1; i <= 9; i++ {
		rho := float64(i) / 10
		t.Run(fmt.Sprintf("util=%.1f", rho), func(t *testing.T) {
			t.Parallel()
			c := DefaultLoadShare()
			c.Policy, c.Sched, c.Util, c.Seed = NLS, FCFS, rho, 42
			nodeTime := 2 * (1 + rho) / (rho * (1 - rho) * (1 - rho)) / (0.012 * 0.012)
			c.Batches = 20
			c.BatchLength = math.Max(250, nodeTime/float64(c.Nodes)/float64(c.Batches))
			c.Warmup = 50 / ((1 - rho) * (1 - rho))
			r, err := RunLoadShare(c)
			if err != nil {
				t.Fatal(err)
			}
			want := 1 / (1 - rho)
			if dev := math.Abs(r.MeanResponse-want) / want; dev > 0.03 {
				t.Errorf("mean response %.4f ± %.4f, M/M/1 %.4f: off by %.1f%%", r.MeanResponse, r.CI95, want, 100*dev)
			}
			if math.Abs(r.MeasuredUtil-rho) > 0.02 {
				t.Errorf("measured utilisation %.4f, offered %.1f", r.MeasuredUtil, rho)
			}
			if r.TransferRate != 0 || r.ProbesPerJob != 0 {
				t.Errorf("no load sharing moved jobs: %+v", r)
			}
		})
	}
}

func short(p Policy, s Sched, util float64) LoadShareConfig {
	c := DefaultLoadShare()
	c.Policy, c.Sched, c.Util = p, s, util
	c.Warmup, c.Batches, c.BatchLength = 200, 10, 500
	return c
}

func TestDeterministic(t *testing.T) {
	t.Parallel()
	for _, p := range Policies {
		for _, s := range []Sched{FCFS, RR} {
			c := short(p, s, 0.8)
			c.Batches, c.BatchLength = 4, 100
			a, err := RunLoadShare(c)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := RunLoadShare(c)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("%s/%s: same seed, different results:\n%+v\n%+v", p, s, a, b)
			}
			c.Seed++
			d, _ := RunLoadShare(c)
			if d.MeanResponse == a.MeanResponse {
				t.Fatalf("%s/%s: a different seed gave the same mean %v", p, s, a.MeanResponse)
			}
		}
	}
	// A sweep gives the same results whatever the parallelism.
	cfgs := []LoadShareConfig{short(SI, FCFS, 0.5), short(RI, RR, 0.7), short(Index, FCFS, 0.9)}
	for i := range cfgs {
		cfgs[i].Batches, cfgs[i].BatchLength = 3, 100
	}
	one, err := Sweep(cfgs, 1)
	if err != nil {
		t.Fatal(err)
	}
	three, _ := Sweep(cfgs, 3)
	if !reflect.DeepEqual(one, three) {
		t.Fatal("sweep results depend on the number of workers")
	}
}

// disjoint reports whether a is below b with non-overlapping 95% intervals.
func below(a, b LoadShareResult) bool {
	return a.MeanResponse+a.CI95 < b.MeanResponse-b.CI95
}

func TestSenderInitiatedBeatsNoSharing(t *testing.T) {
	t.Parallel()
	for _, s := range []Sched{FCFS, RR} {
		nls, _ := RunLoadShare(short(NLS, s, 0.7))
		si, _ := RunLoadShare(short(SI, s, 0.7))
		if !below(si, nls) || si.MeanResponse > 0.7*nls.MeanResponse {
			t.Errorf("%s at 0.7: SI %.3f ± %.3f, NLS %.3f ± %.3f", s, si.MeanResponse, si.CI95, nls.MeanResponse, nls.CI95)
		}
		if si.TransferRate <= 0 || si.ProbesPerJob <= 0 {
			t.Errorf("%s: SI moved nothing: %+v", s, si)
		}
	}
}

func TestReceiverInitiatedBeatsSenderAtHighLoad(t *testing.T) {
	t.Parallel()
	si, _ := RunLoadShare(short(SI, FCFS, 0.95))
	for _, p := range []Policy{RI, RIReinit} {
		ri, _ := RunLoadShare(short(p, FCFS, 0.95))
		if !below(ri, si) {
			t.Errorf("at 0.95: %s %.3f ± %.3f, SI %.3f ± %.3f", p, ri.MeanResponse, ri.CI95, si.MeanResponse, si.CI95)
		}
	}
	// And the other way round at moderate load.
	si5, _ := RunLoadShare(short(SI, FCFS, 0.5))
	ri5, _ := RunLoadShare(short(RI, FCFS, 0.5))
	if !below(si5, ri5) {
		t.Errorf("at 0.5: SI %.3f ± %.3f, RI %.3f ± %.3f", si5.MeanResponse, si5.CI95, ri5.MeanResponse, ri5.CI95)
	}
}

func TestReinitiationHelpsWithBurstyArrivals(t *testing.T) {
	t.Parallel()
	c := short(RI, FCFS, 0.8)
	c.CA = 3
	ri, _ := RunLoadShare(c)
	c.Policy = RIReinit
	re, _ := RunLoadShare(c)
	if !below(re, ri) {
		t.Errorf("CA 3: RI %.3f ± %.3f, RI with reinitiation %.3f ± %.3f", ri.MeanResponse, ri.CI95, re.MeanResponse, re.CI95)
	}
}

func TestRoundRobinHelpsWithVariableService(t *testing.T) {
	t.Parallel()
	c := short(SI, FCFS, 0.8)
	c.CS = 4
	fc, _ := RunLoadShare(c)
	c.Sched = RR
	rr, _ := RunLoadShare(c)
	if !below(rr, fc) {
		t.Errorf("CS 4: SI-FCFS %.3f ± %.3f, SI-RR %.3f ± %.3f", fc.MeanResponse, fc.CI95, rr.MeanResponse, rr.CI95)
	}
}

func TestDistMoments(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for _, d := range []Dist{{2, 0}, {2, 0.5}, {1, 1}, {1, 2}, {3, 3}, {1, 4}} {
		s := d.sampler()
		const n = 1_000_000
		var sum, sq float64
		for i := 0; i < n; i++ {
			x := s.sample(r)
			if x < 0 {
				t.Fatalf("%+v drew %g", d, x)
			}
			sum += x
			sq += x * x
		}
		mean := sum / n
		cv := math.Sqrt(sq/n-mean*mean) / mean
		if math.Abs(mean-d.Mean)/d.Mean > 0.01 {
			t.Errorf("%+v: mean %.4f", d, mean)
		}
		if d.CV == 0 {
			if cv > 1e-6 {
				t.Errorf("%+v: CV %.4f", d, cv)
			}
		} else if math.Abs(cv-d.CV)/d.CV > 0.03 {
			t.Errorf("%+v: CV %.4f", d, cv)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	mods := map[string]func(*LoadShareConfig){
		"policy":    func(c *LoadShareConfig) { c.Policy = "magic" },
		"sched":     func(c *LoadShareConfig) { c.Sched = "lifo" },
		"nodes":     func(c *LoadShareConfig) { c.Nodes = 1 },
		"util 0":    func(c *LoadShareConfig) { c.Util = 0 },
		"util 1":    func(c *LoadShareConfig) { c.Util = 1 },
		"util NaN":  func(c *LoadShareConfig) { c.Util = math.NaN() },
		"cv":        func(c *LoadShareConfig) { c.CS = -1 },
		"threshold": func(c *LoadShareConfig) { c.Threshold = 0 },
		"probes":    func(c *LoadShareConfig) { c.ProbeLimit = 99 },
		"reinit":    func(c *LoadShareConfig) { c.Policy, c.Reinit = RIReinit, 0 },
		"quantum":   func(c *LoadShareConfig) { c.Sched, c.Quantum = RR, 0 },
		"transfer":  func(c *LoadShareConfig) { c.TransferMin, c.TransferMax = 2, 1 },
		"batches":   func(c *LoadShareConfig) { c.Batches = 1 },
		"length":    func(c *LoadShareConfig) { c.BatchLength = 0 },
		"index":     func(c *LoadShareConfig) { c.Policy, c.IndexEmitter = Index, 0.9 },
	}
	for name, mod := range mods {
		c := DefaultLoadShare()
		mod(&c)
		if _, err := RunLoadShare(c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: %v, want ErrBadConfig", name, err)
		}
	}
}

func TestParseValues(t *testing.T) {
	cases := map[string][]float64{
		"0.3,0.9":         {0.3, 0.9},
		"0.1:0.9:0.1":     {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9},
		"0:4:1, 0.5":      {0, 1, 2, 3, 4, 0.5},
		" 0.5 ":           {0.5},
		"0.85:0.95:0.05 ": {0.85, 0.9, 0.95},
	}
	for in, want := range cases {
		got, err := ParseValues(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseValues(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "1:2", "0.9:0.1:0.1", "0:1:0", "0:1e9:1e-9", "NaN", "1:2:x"} {
		if _, err := ParseValues(bad); !errors.Is(err, ErrBadConfig) {
			t.Errorf("ParseValues(%q): %v", bad, err)
		}
	}
}

func TestCrossover(t *testing.T) {
	x := []float64{0.5, 0.6, 0.7, 0.8}
	si := []float64{1, 2, 3, 4}
	ri := []float64{1.5, 2.5, 2.5, 3}
	got, ok := Crossover(x, si, ri)
	if !ok || math.Abs(got-0.65) > 1e-9 {
		t.Fatalf("crossover %v %v", got, ok)
	}
	if _, ok := Crossover(x, si, []float64{5, 5, 5, 5}); ok {
		t.Fatal("no crossover expected")
	}
}

func TestQueueOrder(t *testing.T) {
	var q eventQueue
	r := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < 1000; i++ {
		q.push(event{t: float64(r.IntN(50)), a: int32(i)})
	}
	last := event{t: -1}
	for q.len() > 0 {
		e := q.pop()
		if e.t < last.t || (e.t == last.t && e.a < last.a) {
			t.Fatalf("out of order: %+v after %+v", e, last)
		}
		last = e
	}
}

func TestRingFIFO(t *testing.T) {
	var r ring
	next, want := int32(0), int32(0)
	for round := 0; round < 100; round++ {
		for i := 0; i < round%13; i++ {
			r.push(next)
			next++
		}
		for i := 0; i < round%7 && r.len() > 0; i++ {
			if v := r.pop(); v != want {
				t.Fatalf("popped %d, want %d", v, want)
			}
			want++
		}
	}
}

// TestNoAllocationPerEvent checks that a ten times longer run allocates
// almost nothing more: the event core, queues and job pool reuse memory.
func TestNoAllocationPerEvent(t *testing.T) {
	for _, p := range []Policy{SI, RIReinit, Index} {
		c := short(p, FCFS, 0.8)
		c.Nodes, c.Batches, c.BatchLength, c.Warmup = 8, 2, 100, 10
		var ev1, ev2 int64
		a1 := testing.AllocsPerRun(1, func() { r, _ := RunLoadShare(c); ev1 = r.Events })
		c.BatchLength *= 10
		a2 := testing.AllocsPerRun(1, func() { r, _ := RunLoadShare(c); ev2 = r.Events })
		if per := (a2 - a1) / float64(ev2-ev1); per > 1e-3 {
			t.Errorf("%s: %.0f allocations for %d events, %.0f for %d: %.5f per event", p, a1, ev1, a2, ev2, per)
		}
	}
}

func TestWriteSVG(t *testing.T) {
	var b bytes.Buffer
	err := WriteSVG(&b, Chart{
		Title: "Figure <2.2>", XLabel: "utilisation", YLabel: "mean response time",
		Series: []Series{
			{Name: "SI & co", X: []float64{0.1, 0.5, 0.9}, Y: []float64{1, 1.4, 2.5}},
			{Name: "NLS", X: []float64{0.1, 0.5, 0.9}, Y: []float64{1.1, 2, math.NaN()}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(&b)
	lines, texts := 0, []string{}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			if v.Name.Local == "polyline" {
				lines++
			}
		case xml.CharData:
			texts = append(texts, string(v))
		}
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{"Figure <2.2>", "SI & co", "NLS", "utilisation", "0.5", "2.5"} {
		if !strings.Contains(all, want) {
			t.Errorf("missing text %q in %s", want, all)
		}
	}
	if lines != 2 {
		t.Errorf("%d lines, want 2", lines)
	}
	if err := WriteSVG(io.Discard, Chart{Series: []Series{{X: []float64{1}, Y: nil}}}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("mismatched series: %v", err)
	}
	if err := WriteSVG(io.Discard, Chart{}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("empty chart: %v", err)
	}
}

// BenchmarkEvents measures the event rate of the load-sharing model on one
// core (sender-initiated sharing, FCFS, utilisation 0.8).
func BenchmarkEvents(b *testing.B) {
	for _, s := range []Sched{FCFS, RR} {
		b.Run(string(s), func(b *testing.B) {
			c := short(SI, s, 0.8)
			c.Batches, c.BatchLength, c.Warmup = 10, 200, 0
			b.ReportAllocs()
			var events int64
			for i := 0; i < b.N; i++ {
				c.Seed = uint64(i + 1)
				r, err := RunLoadShare(c)
				if err != nil {
					b.Fatal(err)
				}
				events += r.Events
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// Points with an interval get a bar from Y-Err to Y+Err, and the y axis
// takes the bars in; points without one (Err 0) get none.
func TestWriteSVGIntervals(t *testing.T) {
	var b bytes.Buffer
	err := WriteSVG(&b, Chart{Series: []Series{
		{Name: "mean ±95%", X: []float64{1, 2, 3}, Y: []float64{10, 20, 30}, Err: []float64{2, 0, 50}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(&b)
	bars, top := 0, 0.0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		if v, ok := tok.(xml.StartElement); ok {
			for _, a := range v.Attr {
				if a.Name.Local == "class" && a.Value == "interval" {
					bars++
				}
			}
		}
		if v, ok := tok.(xml.CharData); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(string(v)), 64); err == nil {
				top = math.Max(top, f)
			}
		}
	}
	if bars != 2 {
		t.Errorf("%d interval bars, want 2 (the point with Err 0 has none)", bars)
	}
	if top < 80 {
		t.Errorf("the y axis reaches %g, below the last interval's top (80)", top)
	}
	if err := WriteSVG(io.Discard, Chart{Series: []Series{{X: []float64{1, 2}, Y: []float64{1, 2}, Err: []float64{1}}}}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("intervals of another length: %v", err)
	}
}
