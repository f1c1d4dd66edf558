package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// small bounds a run so that a test finishes in a second or two, even
// under the race detector.
var small = Options{
	Sizes:         []int{8, 64 << 10},
	Reps:          20,
	Warmup:        2,
	RateMsgs:      3000,
	RateWindow:    256,
	SpawnReps:     1,
	BarrierRounds: 5,
	Timeout:       time.Minute,
}

// checkShape checks that r measured what small asks for, with plausible
// (positive, finite, consistent) figures.
func checkShape(t *testing.T, r *Result, mode string, tasks bool) {
	t.Helper()
	if r.Mode != mode || r.Rounds != 1 {
		t.Errorf("mode %q rounds %d, want %q 1", r.Mode, r.Rounds, mode)
	}
	if len(r.Results) != len(small.Sizes) {
		t.Fatalf("%d rows, want %d: %+v", len(r.Results), len(small.Sizes), r.Results)
	}
	for i, s := range r.Results {
		if s.Size != small.Sizes[i] || s.OnewayUS <= 0 || s.Reps < 1 || s.Reps > small.Reps {
			t.Errorf("row %d: %+v", i, s)
		}
		// The bandwidth follows from the latency.
		if want := float64(s.Size) / s.OnewayUS; s.MBps < want*0.999 || s.MBps > want*1.001 {
			t.Errorf("row %d: %v MB/s, want size/one-way = %v", i, s.MBps, want)
		}
	}
	if r.RateMsgs < 1 || r.RateMsgs > small.RateMsgs || r.RateMsgsPerS <= 0 {
		t.Errorf("rate: %d messages at %v/s", r.RateMsgs, r.RateMsgsPerS)
	}
	if tasks != (r.Spawn32MS > 0) || tasks != (r.Barrier8US > 0) {
		t.Errorf("spawn %v ms, barrier %v µs (tasks: %v)", r.Spawn32MS, r.Barrier8US, tasks)
	}
}

func TestPingpongRemote(t *testing.T) {
	r, err := Pingpong(context.Background(), ModeRemote, small)
	if err != nil {
		t.Fatal(err)
	}
	checkShape(t, r, ModeRemote, true)
}

func TestPingpongLocal(t *testing.T) {
	r, err := Pingpong(context.Background(), ModeLocal, small)
	if err != nil {
		t.Fatal(err)
	}
	checkShape(t, r, ModeLocal, true)
}

func TestQUIC(t *testing.T) {
	r, err := QUIC(context.Background(), small)
	if err != nil {
		t.Fatal(err)
	}
	checkShape(t, r, ModeQUIC, false)
}

func TestCompare(t *testing.T) {
	o := small
	o.Sizes = []int{8}
	c, err := Compare(context.Background(), ModeLocal, o, 2)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rounds != 2 || c.DPVM.Mode != ModeLocal || c.QUIC.Mode != ModeQUIC || c.DPVM.Rounds != 2 || c.QUIC.Rounds != 2 {
		t.Errorf("rounds %d, modes %q %q", c.Rounds, c.DPVM.Mode, c.QUIC.Mode)
	}
	if len(c.Ratios) != 1 || c.Ratios[0].Size != 8 || c.Ratios[0].Latency <= 0 || c.Ratios[0].Bandwidth <= 0 || c.RateRatio <= 0 {
		t.Errorf("ratios %+v, rate ratio %v", c.Ratios, c.RateRatio)
	}
	if r := c.DPVM.Results[0]; r.Reps < 2 || r.Reps > 2*o.Reps {
		t.Errorf("reps over two rounds: %d", r.Reps)
	}
	var out bytes.Buffer
	if err := WriteComparison(&out, c); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"dpvm (local: two tasks on one daemon) against raw quic-go, 2 alternating round(s)", "8 B", "targets:", "8 B one-way"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("comparison lacks %q:\n%s", want, out.String())
		}
	}
}

// TestTaskPairReuse runs several measurements on one pair, and checks a
// closed pair refuses more.
func TestTaskPairReuse(t *testing.T) {
	ctx := context.Background()
	p, err := StartTasks(ctx, ModeLocal)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{1, 8, 1000} {
		rtts, err := p.RoundTrips(ctx, size, 3, 0)
		if err != nil || len(rtts) != 3 {
			t.Fatalf("size %d: %d round trips, %v", size, len(rtts), err)
		}
	}
	// Windows that divide the count, and one that does not.
	for _, w := range []int{1, 7, 100} {
		st, err := p.Stream(ctx, 700, w, time.Minute)
		if err != nil || st.Messages != 700 {
			t.Fatalf("window %d: %+v, %v", w, st, err)
		}
	}
	if _, err := p.Spawn(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Barrier(ctx, 3, 1, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := p.RoundTrips(ctx, 0, 1, 0); !errors.Is(err, ErrOptions) {
		t.Errorf("size 0: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.RoundTrips(ctx, 8, 1, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

// TestCancel checks that a measurement gives up when its context ends.
func TestCancel(t *testing.T) {
	p, err := StartTasks(context.Background(), ModeLocal)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.RoundTrips(ctx, 8, 1000, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled round trips: %v", err)
	}
	q, err := StartQUIC(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.RoundTrips(ctx, 8, 1000, 0); err == nil {
		t.Error("cancelled raw round trips succeeded")
	}
}

func TestStartTasksBadMode(t *testing.T) {
	if _, err := StartTasks(context.Background(), "quic"); !errors.Is(err, ErrOptions) {
		t.Errorf("got %v", err)
	}
}

func TestWithDefaults(t *testing.T) {
	o, err := Options{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Sizes) != 4 || o.MaxTime != 2*time.Second || o.RateMsgs != 1_000_000 || o.RateWindow != 65536 ||
		o.SpawnReps != 5 || o.BarrierRounds != 1000 || o.Timeout != 5*time.Minute || o.WarmTime != 300*time.Millisecond {
		t.Errorf("defaults: %+v", o)
	}
	if o.repsFor(8) != 4000 || o.repsFor(1024) != 4000 || o.repsFor(64<<10) != 600 || o.repsFor(1<<20) != 120 {
		t.Error("default reps per size")
	}
	if o.warmFor(4000) != 400 || o.warmFor(20) != 5 {
		t.Error("default warm-up")
	}
	for _, bad := range []Options{
		{Sizes: []int{0}}, {Sizes: []int{MaxSize + 1}}, {Sizes: []int{8, 8}}, {Reps: -1},
		{RateMsgs: -5}, {RateWindow: 1 << 25}, {MaxTime: -time.Second}, {Timeout: -1}, {BarrierRounds: -1}, {WarmTime: -1},
	} {
		if _, err := bad.WithDefaults(); !errors.Is(err, ErrOptions) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	if _, err := Pingpong(context.Background(), ModeLocal, Options{Reps: -1}); !errors.Is(err, ErrOptions) {
		t.Errorf("Pingpong with bad options: %v", err)
	}
}

func TestParseSizes(t *testing.T) {
	got, err := ParseSizes("8, 1K,64KiB,1m,3B,100")
	if err != nil {
		t.Fatal(err)
	}
	want := []int{8, 1024, 65536, 1 << 20, 3, 100}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	for _, bad := range []string{"", "8,", "x", "0", "-1", "17M", "1KK", "1.5K", "99999999999999999999"} {
		if _, err := ParseSizes(bad); !errors.Is(err, ErrOptions) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func FuzzParseSizes(f *testing.F) {
	for _, s := range []string{"8,1K,64K,1M", "1MiB", "0", "x,y", "16M"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sizes, err := ParseSizes(s)
		if err != nil {
			return
		}
		for _, n := range sizes {
			if n < 1 || n > MaxSize {
				t.Fatalf("%q gave size %d", s, n)
			}
		}
	})
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int]string{8: "8 B", 1024: "1 KiB", 65536: "64 KiB", 1 << 20: "1 MiB", 1500: "1500 B", 3 << 20: "3 MiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("%d: %q, want %q", n, got, want)
		}
	}
}

func TestMedian(t *testing.T) {
	if Median[time.Duration](nil) != 0 {
		t.Error("empty")
	}
	ds := []time.Duration{5, 1, 3}
	if Median(ds) != 3 || ds[0] != 5 {
		t.Error("odd count, or the input changed")
	}
	if Median([]time.Duration{4, 1, 3, 2}) != 2 { // (2+3)/2 in integer nanoseconds
		t.Error("even count")
	}
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestMedianResult(t *testing.T) {
	mk := func(ow, rate float64) *Result {
		return &Result{Mode: ModeRemote, Rounds: 1, RateMsgsPerS: rate, RateMsgs: 10, Spawn32MS: ow, Barrier8US: ow,
			Results: []SizeResult{{Size: 100, OnewayUS: ow, MBps: 100 / ow, Reps: 7}}}
	}
	r, err := MedianResult([]*Result{mk(10, 5), mk(2, 1), mk(4, 9)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Rounds != 3 || r.Results[0].OnewayUS != 4 || r.Results[0].MBps != 25 || r.Results[0].Reps != 21 ||
		r.RateMsgsPerS != 5 || r.Spawn32MS != 4 || r.Barrier8US != 4 || r.RateMsgs != 10 {
		t.Errorf("%+v", r)
	}
	other := mk(1, 1)
	other.Results[0].Size = 8
	if _, err := MedianResult([]*Result{mk(1, 1), other}); !errors.Is(err, ErrOptions) {
		t.Errorf("mismatched rounds: %v", err)
	}
	if _, err := MedianResult(nil); !errors.Is(err, ErrOptions) {
		t.Errorf("no rounds: %v", err)
	}
}

func TestCombineAndTargets(t *testing.T) {
	d := &Result{Mode: ModeRemote, Rounds: 1, RateMsgsPerS: 2e6, Spawn32MS: 6, Barrier8US: 50,
		Results: []SizeResult{{Size: 8, OnewayUS: 30, MBps: 8.0 / 30}, {Size: 1 << 20, OnewayUS: 5000, MBps: float64(1<<20) / 5000}}}
	q := &Result{Mode: ModeQUIC, Rounds: 1, RateMsgsPerS: 4e6,
		Results: []SizeResult{{Size: 8, OnewayUS: 20, MBps: 8.0 / 20}, {Size: 1 << 20, OnewayUS: 5000, MBps: float64(1<<20) / 5000}}}
	c, err := combine([]*Result{d}, []*Result{q})
	if err != nil {
		t.Fatal(err)
	}
	if c.Ratios[0].Latency != 1.5 || c.Ratios[1].Latency != 1 || c.Ratios[1].Bandwidth != 1 || c.RateRatio != 0.5 {
		t.Errorf("%+v rate %v", c.Ratios, c.RateRatio)
	}
	met := map[string]bool{}
	for _, tg := range Targets(c) {
		met[tg.What] = tg.Met
	}
	want := map[string]bool{
		"latency 8 B / raw quic-go": false, "latency 1 MiB / raw quic-go": true, "bandwidth 1 MiB / raw quic-go": true,
		"message rate": true, "spawn 32 on another daemon": false, "barrier of 8 over 2 daemons": true,
	}
	for k, v := range want {
		if got, ok := met[k]; !ok || got != v {
			t.Errorf("target %q: met %v (present %v), want %v", k, got, ok, v)
		}
	}
	if _, err := combine([]*Result{d}, nil); err == nil {
		t.Error("unpaired rounds combined")
	}
	b, err := json.Marshal(c)
	if err != nil || !bytes.Contains(b, []byte(`"ratios":[{"size":8,"latency":1.5,"bandwidth":`)) {
		t.Errorf("%s %v", b, err)
	}
}

func TestWriteText(t *testing.T) {
	r := &Result{Mode: ModeRemote, Rounds: 3, RateMsgsPerS: 1.5e6, RateMsgs: 1000, Spawn32MS: 1.25, Barrier8US: 80,
		Results: []SizeResult{{Size: 1 << 20, OnewayUS: 1000, MBps: 1048.576, Reps: 120}}}
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"remote: two tasks on two daemons, QUIC over loopback (medians of 3 rounds)\n",
		"1 MiB  1000.00 µs  1.05 GB/s",
		"message rate (one-way 8 B stream): 1.50 M/s (1000 messages)\n",
		"spawn 32 tasks on the other daemon and hear from each: 1.25 ms\n",
		"barrier of 8 tasks over 2 daemons: 80.0 µs per barrier\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("lacks %q:\n%s", want, b.String())
		}
	}
}

// rawMsg builds one message of the raw protocol.
func rawMsg(kind byte, body []byte) []byte { return rawMessage(kind, body) }

// rw is a reader of fixed input and a writer that collects.
type rw struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (x *rw) Read(p []byte) (int, error)  { return x.in.Read(p) }
func (x *rw) Write(p []byte) (int, error) { return x.out.Write(p) }

func TestEchoServe(t *testing.T) {
	var in []byte
	in = append(in, rawMsg(rawPing, []byte("hello"))...)
	for range 3 {
		in = append(in, rawMsg(rawRate, make([]byte, 8))...)
	}
	in = append(in, rawMsg(rawRateEnd, nil)...)
	x := &rw{in: bytes.NewReader(in)}
	if err := echoServe(x); err != nil {
		t.Fatal(err)
	}
	want := rawMsg(rawPong, []byte("hello"))
	fin := make([]byte, 8)
	binary.LittleEndian.PutUint64(fin, 3)
	want = append(want, rawMsg(rawRateFin, fin)...)
	if !bytes.Equal(x.out.Bytes(), want) {
		t.Errorf("got %x\nwant %x", x.out.Bytes(), want)
	}
	for name, bad := range map[string][]byte{
		"unknown kind": rawMsg(9, nil),
		"truncated":    rawMsg(rawPing, []byte("abc"))[:6],
		"too large":    {rawPing, 0xff, 0xff, 0xff, 0x7f},
	} {
		if err := echoServe(&rw{in: bytes.NewReader(bad)}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func FuzzEchoServe(f *testing.F) {
	f.Add(rawMsg(rawPing, []byte("x")))
	f.Add(append(rawMsg(rawRate, make([]byte, 8)), rawMsg(rawRateEnd, nil)...))
	f.Add([]byte{rawPing, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, b []byte) {
		x := &rw{in: bytes.NewReader(b)}
		_ = echoServe(x)
		if x.out.Len() > 2*len(b)+64 {
			t.Fatalf("%d bytes out for %d in", x.out.Len(), len(b))
		}
	})
}
