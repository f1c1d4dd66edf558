package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/metrics"
)

// Pingpong measures two tasks in mode (ModeRemote or ModeLocal): the
// latency table, the message rate, the spawn of SpawnTasks tasks and the
// barrier of BarrierTasks tasks.
func Pingpong(ctx context.Context, mode string, o Options) (*Result, error) {
	o, err := o.WithDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var cfg daemon.Config
	if o.Metrics {
		cfg.Metrics = metrics.New(metrics.Options{})
	}
	if o.NoBulk {
		cfg.BulkThreshold = -1
	}
	cfg.BulkSmall = o.SmallBulk
	p, err := startPair(ctx, mode, cfg)
	if err != nil {
		return nil, err
	}
	res, err := pingpong(ctx, p, o)
	if err == nil && o.Metrics {
		res.MetricsMessages, err = p.scrapeMessages()
	}
	if cerr := p.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("bench pingpong %s: %w", mode, err)
	}
	return res, nil
}

func pingpong(ctx context.Context, p *TaskPair, o Options) (*Result, error) {
	res, err := Measure(ctx, p, p.Mode(), o)
	if err != nil {
		return nil, err
	}
	if _, err := p.Spawn(ctx, SpawnTasks); err != nil { // untimed: warms the spawn path
		return nil, fmt.Errorf("spawn: %w", err)
	}
	var spawns []time.Duration
	for range o.SpawnReps {
		d, err := p.Spawn(ctx, SpawnTasks)
		if err != nil {
			return nil, fmt.Errorf("spawn: %w", err)
		}
		spawns = append(spawns, d)
	}
	res.Spawn32MS = float64(Median(spawns)) / float64(time.Millisecond)
	per, err := p.Barrier(ctx, BarrierTasks, 10, o.BarrierRounds)
	if err != nil {
		return nil, fmt.Errorf("barrier: %w", err)
	}
	res.Barrier8US = micros(per)
	return res, nil
}

// QUIC measures the raw quic-go baseline: the latency table and the rate
// of pipelined 8-byte writes on one stream.
func QUIC(ctx context.Context, o Options) (*Result, error) {
	o, err := o.WithDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	q, err := StartQUIC(ctx)
	if err != nil {
		return nil, err
	}
	res, err := Measure(ctx, q, ModeQUIC, o)
	if cerr := q.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("bench quic: %w", err)
	}
	return res, nil
}

// Ratio compares dpvm with raw quic-go at one message size.
type Ratio struct {
	Size int `json:"size"`
	// Latency is dpvm's one-way latency over raw quic-go's (1 is as fast,
	// more is slower); Bandwidth is dpvm's bandwidth over raw quic-go's
	// (less than 1 is slower).
	Latency   float64 `json:"latency"`
	Bandwidth float64 `json:"bandwidth"`
}

// Comparison is dpvm and raw quic-go measured in alternating rounds of one
// run. The ratios are the medians of each round's ratios.
type Comparison struct {
	DPVM   *Result `json:"dpvm"`
	QUIC   *Result `json:"quic"`
	Ratios []Ratio `json:"ratios"`
	// RateRatio is dpvm's message rate over raw quic-go's pipelined
	// writes.
	RateRatio float64 `json:"rate_ratio"`
	Rounds    int     `json:"rounds"`
}

// Rounds runs f rounds times and combines the results with MedianResult.
func Rounds(rounds int, f func() (*Result, error)) (*Result, error) {
	if rounds < 1 {
		return nil, fmt.Errorf("%w: %d rounds", ErrOptions, rounds)
	}
	var rs []*Result
	for range rounds {
		r, err := f()
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	return MedianResult(rs)
}

// Compare measures dpvm in mode and raw quic-go rounds times, alternating
// which goes first, and returns the medians and the ratios.
func Compare(ctx context.Context, mode string, o Options, rounds int) (*Comparison, error) {
	if rounds < 1 {
		return nil, fmt.Errorf("%w: %d rounds", ErrOptions, rounds)
	}
	if _, err := o.WithDefaults(); err != nil {
		return nil, err
	}
	var ds, qs []*Result
	for i := range rounds {
		var d, q *Result
		var err error
		if i%2 == 0 {
			if d, err = Pingpong(ctx, mode, o); err == nil {
				q, err = QUIC(ctx, o)
			}
		} else {
			if q, err = QUIC(ctx, o); err == nil {
				d, err = Pingpong(ctx, mode, o)
			}
		}
		if err != nil {
			return nil, err
		}
		ds, qs = append(ds, d), append(qs, q)
	}
	return combine(ds, qs)
}

// combine builds a Comparison from paired rounds.
func combine(ds, qs []*Result) (*Comparison, error) {
	if len(ds) != len(qs) || len(ds) == 0 {
		return nil, errors.New("bench: rounds of dpvm and raw quic-go do not pair up")
	}
	c := &Comparison{Rounds: len(ds)}
	var err error
	if c.DPVM, err = MedianResult(ds); err != nil {
		return nil, err
	}
	if c.QUIC, err = MedianResult(qs); err != nil {
		return nil, err
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	for i, sr := range c.DPVM.Results {
		var lat, bw []float64
		for k := range ds {
			q, ok := qs[k].Size(sr.Size)
			if !ok {
				return nil, fmt.Errorf("bench: raw quic-go did not measure %s", FormatSize(sr.Size))
			}
			d := ds[k].Results[i]
			lat = append(lat, ratio(d.OnewayUS, q.OnewayUS))
			bw = append(bw, ratio(d.MBps, q.MBps))
		}
		c.Ratios = append(c.Ratios, Ratio{Size: sr.Size, Latency: Median(lat), Bandwidth: Median(bw)})
	}
	var rr []float64
	for k := range ds {
		rr = append(rr, ratio(ds[k].RateMsgsPerS, qs[k].RateMsgsPerS))
	}
	c.RateRatio = Median(rr)
	return c, nil
}

// scrapeMessages gathers the metrics of the pair's daemons, as a scrape
// would, and returns the task messages they counted sent and received.
func (p *TaskPair) scrapeMessages() (float64, error) {
	ds := []*daemon.Daemon{p.d}
	if p.vm != nil {
		ds = p.vm.Daemons
	}
	var n float64
	for _, d := range ds {
		fams, err := d.Metrics().Registry().Gather()
		if err != nil {
			return 0, fmt.Errorf("bench: scrape %s: %w", d.Name(), err)
		}
		for _, f := range fams {
			if f.GetName() != "dpvm_messages_sent_total" && f.GetName() != "dpvm_messages_received_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n, nil
}

// MetricsComparison is dpvm measured without and with metrics in
// alternating rounds of one run: the cost of keeping them. The ratios are
// the medians of each round's ratios, on over off.
type MetricsComparison struct {
	Off *Result `json:"off"`
	On  *Result `json:"on"`
	// Ratios: latency on/off (more than 1 is slower with metrics),
	// bandwidth on/off (less than 1 is slower).
	Ratios []Ratio `json:"ratios"`
	// RateRatio is the message rate with metrics over without.
	RateRatio float64 `json:"rate_ratio"`
	Rounds    int     `json:"rounds"`
}

// CompareMetrics measures dpvm in mode without and with metrics, rounds
// times each, alternating which goes first.
func CompareMetrics(ctx context.Context, mode string, o Options, rounds int) (*MetricsComparison, error) {
	if rounds < 1 {
		return nil, fmt.Errorf("%w: %d rounds", ErrOptions, rounds)
	}
	off, on := o, o
	off.Metrics, on.Metrics = false, true
	var offs, ons []*Result
	for i := range rounds {
		first, second := off, on
		if i%2 == 1 {
			first, second = on, off
		}
		a, err := Pingpong(ctx, mode, first)
		if err != nil {
			return nil, err
		}
		b, err := Pingpong(ctx, mode, second)
		if err != nil {
			return nil, err
		}
		if i%2 == 1 {
			a, b = b, a
		}
		offs, ons = append(offs, a), append(ons, b)
	}
	c, err := combine(ons, offs)
	if err != nil {
		return nil, err
	}
	return &MetricsComparison{Off: c.QUIC, On: c.DPVM, Ratios: c.Ratios, RateRatio: c.RateRatio, Rounds: c.Rounds}, nil
}
