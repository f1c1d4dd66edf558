package share

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

func rng(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 1)) }

func uniform(tasks ...int) []Host {
	hs := make([]Host, len(tasks))
	for i, t := range tasks {
		hs[i] = Host{Name: string(rune('a' + i)), Speed: 1, Cores: 1, Tasks: t}
	}
	return hs
}

func TestNewKnowsEveryName(t *testing.T) {
	for _, n := range Names() {
		p, err := New(n)
		if err != nil {
			t.Fatalf("New(%q): %v", n, err)
		}
		if p.Name() != n {
			t.Errorf("New(%q).Name() = %q", n, p.Name())
		}
		if _, err := p.Place(0, uniform(0, 0), rng(1)); err != nil {
			t.Errorf("%s: Place: %v", n, err)
		}
	}
	if _, err := New("nope"); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("New(nope) = %v, want ErrUnknownPolicy", err)
	}
}

func TestPlaceRejectsBadInput(t *testing.T) {
	for _, n := range Names() {
		p, _ := New(n)
		if _, err := p.Place(0, nil, rng(1)); !errors.Is(err, ErrNoHosts) {
			t.Errorf("%s: empty snapshot: %v", n, err)
		}
		if _, err := p.Place(3, uniform(0), rng(1)); !errors.Is(err, ErrBadOrigin) {
			t.Errorf("%s: bad origin: %v", n, err)
		}
		if _, err := p.Place(0, []Host{{Speed: 0, Cores: 1}}, rng(1)); !errors.Is(err, ErrBadHost) {
			t.Errorf("%s: zero speed: %v", n, err)
		}
	}
	if _, err := (SenderInitiated{Threshold: 0, ProbeLimit: 3}).Place(0, uniform(0), rng(1)); !errors.Is(err, ErrBadParam) {
		t.Errorf("si threshold 0: %v", err)
	}
	if _, err := (IndexPolicy{RecipientThreshold: 0.3, EmitterThreshold: 0.4, Candidates: 3}).Place(0, uniform(0), rng(1)); !errors.Is(err, ErrBadParam) {
		t.Errorf("index thresholds inverted: %v", err)
	}
}

func TestSenderInitiated(t *testing.T) {
	p := DefaultSenderInitiated()
	// Below the threshold the task stays local.
	d, _ := p.Place(0, uniform(1, 0, 0), rng(1))
	if d.Host != 0 || d.Probes != 0 {
		t.Fatalf("below threshold: %+v", d)
	}
	// A sender finds the only receiver when it probes every other host.
	p.ProbeLimit = 3
	d, _ = p.Place(0, uniform(5, 2, 3, 0), rng(2))
	if d.Host != 3 {
		t.Fatalf("sender: %+v, want host 3", d)
	}
	// No receiver: the task stays local after P_l probes.
	d, _ = p.Place(0, uniform(5, 2, 3, 2, 2, 2), rng(3))
	if d.Host != 0 || d.Probes != 3 {
		t.Fatalf("no receiver: %+v", d)
	}
}

type countProber struct {
	seen map[int]int
}

func (c *countProber) Probe(h int) bool { c.seen[h]++; return false }

func TestProbeRandomDistinctAndNeverSelf(t *testing.T) {
	r := rng(7)
	for i := 0; i < 1000; i++ {
		c := &countProber{seen: map[int]int{}}
		_, n := ProbeRandom(r, 5, 2, 3, c)
		if n != 3 || len(c.seen) != 3 || c.seen[2] != 0 {
			t.Fatalf("probes %d, seen %v", n, c.seen)
		}
	}
	// A limit beyond the other hosts probes each once.
	c := &countProber{seen: map[int]int{}}
	if _, n := ProbeRandom(r, 4, 0, 10, c); n != 3 {
		t.Fatalf("limit clipped to %d probes", n)
	}
	if allocs := testing.AllocsPerRun(100, func() { ProbeRandom(r, 32, 0, 3, noProber{}) }); allocs != 0 {
		t.Fatalf("ProbeRandom allocates %v times", allocs)
	}
}

type noProber struct{}

func (noProber) Probe(int) bool { return false }

func TestReceiverInitiated(t *testing.T) {
	p := DefaultReceiverInitiated()
	d, _ := p.Place(0, uniform(1, 1), rng(1))
	if d.Host != 0 || d.Hold {
		t.Fatalf("admitted: %+v", d)
	}
	d, _ = p.Place(0, uniform(2, 1, 0), rng(1))
	if d.Host != 2 || d.Hold {
		t.Fatalf("idle receiver: %+v", d)
	}
	d, _ = p.Place(0, uniform(2, 1, 1), rng(1))
	if d.Host != 0 || !d.Hold {
		t.Fatalf("no receiver: %+v", d)
	}
	hs := uniform(0, 2, 2, 2)
	hs[2].Waiting = 1
	donor, probes, err := p.PullFrom(0, hs, rng(4))
	if err != nil || donor != 2 || probes < 1 || probes > 3 {
		t.Fatalf("pull: donor %d probes %d err %v", donor, probes, err)
	}
}

func TestRoundRobinCycles(t *testing.T) {
	rr := &RoundRobin{}
	var got []int
	for i := 0; i < 5; i++ {
		d, _ := rr.Place(0, uniform(0, 0, 0), nil)
		got = append(got, d.Host)
	}
	if !reflect.DeepEqual(got, []int{0, 1, 2, 0, 1}) {
		t.Fatalf("round robin %v", got)
	}
}

// table1 is the heterogeneous cluster of Bosque et al., Table 1.
func table1() []Host {
	return []Host{
		{"c0-0", 669.02, 2, 0, 0, 0}, {"c0-1", 664.64, 2, 0, 0, 0},
		{"c0-9", 628.57, 4, 0, 0, 0}, {"c0-10", 666.86, 4, 0, 0, 0},
		{"c0-11", 669.08, 4, 0, 0, 0}, {"c0-14", 772.84, 4, 0, 0, 0},
		{"c2-32", 1201.67, 8, 0, 0, 0}, {"c2-33", 1198.34, 8, 0, 0, 0},
		{"c2-34", 1203.87, 8, 0, 0, 0}, {"c2-35", 1205.68, 8, 0, 0, 0},
	}
}

func TestLoadIndexMatchesPaper(t *testing.T) {
	// "for node C0-1 the load index goes down from 0.555 to 0.368 whenever it
	// gets an additional task": 2 tasks → 3 tasks on a 2-core host.
	hs := table1()
	pmax := 1205.68
	if got := LoadIndex(hs[0].Speed, pmax, 2, 1); got < 0.55 || got > 0.56 {
		t.Errorf("c0-0 with 1 task: %.3f", got)
	}
	if got := LoadIndex(hs[0].Speed, pmax, 2, 2); got < 0.365 || got > 0.372 {
		t.Errorf("c0-0 with 2 tasks: %.3f", got)
	}
	p := DefaultIndexPolicy()
	cases := []struct {
		host, tasks int
		want        State
	}{
		{0, 1, Recipient}, // free core
		{0, 2, Emitter},   // 0.370 < 0.4
		{5, 4, Neutral},   // 0.641·4/5 = 0.513
		{9, 10, Recipient},
		{9, 11, Neutral}, // 8/12 = 0.667
		{2, 9, Emitter},
	}
	for _, c := range cases {
		if got := p.Classify(hs[c.host].Speed, pmax, hs[c.host].Cores, c.tasks); got != c.want {
			t.Errorf("%s with %d tasks: %v, want %v", hs[c.host].Name, c.tasks, got, c.want)
		}
	}
	if c := p.Capacity(1205.68, pmax, 8, 0); c != 11 {
		t.Errorf("capacity of an idle fast host: %d, want 11", c)
	}
}

func TestRecipientQueueOnlyOnRecipientChanges(t *testing.T) {
	q := NewRecipientQueue(4)
	if !q.Update(2, Neutral, Recipient) || !q.Update(0, Emitter, Recipient) || !q.Update(3, Neutral, Recipient) {
		t.Fatal("becoming a recipient must be broadcast")
	}
	if q.Update(1, Neutral, Emitter) {
		t.Fatal("neutral→emitter must not change the queue")
	}
	if !reflect.DeepEqual(q.Members(), []int{2, 0, 3}) {
		t.Fatalf("members %v", q.Members())
	}
	q.Update(0, Recipient, Neutral)
	if !reflect.DeepEqual(q.Members(), []int{2, 3}) || q.Contains(0) || !q.Contains(3) {
		t.Fatalf("after removal %v", q.Members())
	}
	got := q.Sample(rng(1), 3, 2, nil)
	if !reflect.DeepEqual(got, []int{3}) {
		t.Fatalf("sample excluding 2: %v", got)
	}
}

func TestIndexPlaceAndDistribute(t *testing.T) {
	p := DefaultIndexPolicy()
	hs := table1()
	hs[0].Tasks = 2 // emitter
	d, err := p.Place(0, hs, rng(5))
	if err != nil || d.Host == 0 || d.Probes != 3 {
		t.Fatalf("emitter placement %+v %v", d, err)
	}
	hs[0].Tasks = 1
	if d, _ := p.Place(0, hs, rng(5)); d.Host != 0 {
		t.Fatalf("recipient keeps its task: %+v", d)
	}
	hs[0].Tasks = 0
	counts, held, err := p.Distribute(0, 100, hs, rng(9))
	if err != nil {
		t.Fatal(err)
	}
	// Each host takes tasks until it turns neutral: 2+2 on the 2-core hosts,
	// 4 on each 4-core host and 11 on each 8-core host = 64; the rest is held.
	want := []int{0, 2, 4, 4, 4, 4, 11, 11, 11, 11}
	want[0] = 2 + held
	if !reflect.DeepEqual(counts, want) || held != 36 {
		t.Fatalf("distribute: counts %v held %d", counts, held)
	}
	if p.Active(hs) {
		t.Fatal("an idle cluster has no emitter: balancing must be off")
	}
	hs[0].Tasks = 5
	if !p.Active(hs) {
		t.Fatal("an emitter beside recipients must switch balancing on")
	}
}

func TestWAL(t *testing.T) {
	w := DefaultWAL()
	hs := uniform(3, 0, 1)
	hs[0].LoadIO = 2
	d, err := w.PlaceJob(0, hs, Demand{CPU: 1, IO: 0.5})
	if err != nil || d.Host != 1 {
		t.Fatalf("overloaded origin: %+v %v", d, err)
	}
	// Not overloaded: stays.
	d, _ = w.PlaceJob(1, hs, Demand{CPU: 1})
	if d.Host != 1 {
		t.Fatalf("light origin moved: %+v", d)
	}
	// Overloaded but the discrepancy does not exceed the job's load.
	d, _ = w.PlaceJob(0, uniform(3, 3, 3), Demand{CPU: 1})
	if d.Host != 0 {
		t.Fatalf("balanced cluster moved: %+v", d)
	}
	if _, err := w.PlaceJob(0, hs, Demand{CPU: -1}); !errors.Is(err, ErrBadParam) {
		t.Fatalf("negative demand: %v", err)
	}
	// The I/O weight decides between a CPU-heavy and an I/O-heavy host.
	hs = uniform(4, 2, 0)
	hs[0].LoadIO = 3
	hs[2].LoadIO = 3
	if d, _ := (WAL{WIO: 0.1, Overload: 1}).PlaceJob(0, hs, Demand{CPU: 1}); d.Host != 2 {
		t.Fatalf("CPU-weighted: %+v", d)
	}
	if d, _ := (WAL{WIO: 0.9, Overload: 1}).PlaceJob(0, hs, Demand{CPU: 1}); d.Host != 1 {
		t.Fatalf("I/O-weighted: %+v", d)
	}
}

func TestControllerFollowsSlowdown(t *testing.T) {
	c, err := NewController(ControllerConfig{History: 4})
	if err != nil {
		t.Fatal(err)
	}
	w0 := c.WIO()
	c.Observe(10)          // avg == s: hold
	w1, b1 := c.Observe(5) // avg 7.5 > 5: improved, keep going up
	if w1 <= w0 || b1 <= 0.25 {
		t.Fatalf("improvement should continue upward: %g %g", w1, b1)
	}
	w2, _ := c.Observe(20) // avg 11.7 < 20: worse, reverse
	if w2 >= w1 {
		t.Fatalf("worsening should reverse: %g after %g", w2, w1)
	}
	w3, _ := c.Observe(1) // improved: keep going down
	if w3 >= w2 {
		t.Fatalf("improvement should keep the direction: %g after %g", w3, w2)
	}
	for i := 0; i < 100; i++ {
		c.Observe(float64(100 - i))
	}
	if c.WIO() < 0.05 || c.WIO() > 0.95 || c.Buffer() < 0.05 || c.Buffer() > 0.6 {
		t.Fatalf("out of bounds: %g %g", c.WIO(), c.Buffer())
	}
	if _, err := NewController(ControllerConfig{WIO: 2}); !errors.Is(err, ErrBadParam) {
		t.Fatalf("bad weight: %v", err)
	}
}

func TestControllerRecentSmoothing(t *testing.T) {
	c, err := NewController(ControllerConfig{History: 6, Recent: 3})
	if err != nil {
		t.Fatal(err)
	}
	w0 := c.WIO()
	c.Observe(1)
	c.Observe(100)
	if c.WIO() != w0 {
		t.Fatal("acted before Recent observations")
	}
	// Third observation: mean of {1, 100, 1} = 34 equals s_avg: hold.
	c.Observe(1)
	if c.WIO() != w0 {
		t.Fatalf("no signal should hold: %g", c.WIO())
	}
	// Next three are all lower than the history mean: improvement, step up.
	c.Observe(0.5)
	c.Observe(0.5)
	if w, _ := c.Observe(0.5); w <= w0 {
		t.Fatalf("improvement should step W_IO up: %g", w)
	}
}
