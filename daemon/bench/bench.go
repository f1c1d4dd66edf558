package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Modes name what a Result measured. They are the "mode" field of the JSON
// output.
const (
	ModeRemote = "remote" // two tasks on two daemons, over QUIC
	ModeLocal  = "local"  // two tasks on one daemon
	ModeQUIC   = "quic"   // raw quic-go: one connection, one stream
)

// DefaultSizes are the message sizes of the latency table.
var DefaultSizes = []int{8, 1 << 10, 64 << 10, 1 << 20}

// Limits on options.
const (
	// MaxSize is the largest message size measured (the daemons' frame
	// limit is 64 MiB).
	MaxSize = 16 << 20
	// RateSize is the size of the messages of the rate stream.
	RateSize = 8
	// SpawnTasks is how many tasks the spawn measurement starts.
	SpawnTasks = 32
	// BarrierTasks is how many tasks take part in the barrier measurement.
	BarrierTasks = 8
	// minTimed is the fewest timed round trips per size, whatever the
	// time cap.
	minTimed = 10
)

// Errors.
var (
	// ErrOptions: an option is out of range.
	ErrOptions = errors.New("bench: bad option")
	// ErrEcho: an echo differed from what was sent, or a receiver counted
	// a different number of messages than were sent.
	ErrEcho = errors.New("bench: echo differs from what was sent")
)

// Options bounds a run. The zero value asks for the defaults.
type Options struct {
	// Sizes are the message sizes of the latency table (default
	// DefaultSizes), each 1..MaxSize bytes, without repeats.
	Sizes []int
	// Reps is the upper bound of timed round trips for every size
	// (default: 4000 up to 1 KiB, 600 up to 64 KiB, 120 above).
	Reps int
	// Warmup is how many untimed round trips precede the timed ones
	// (default: a tenth of the size's Reps, at least 5).
	Warmup int
	// WarmTime is how long, at least, each size's warm-up lasts (default
	// 300ms), after its Warmup round trips, bounded by 50 times the size's
	// Reps. Counted round trips alone are not enough: in the first tenths
	// of a second after a virtual machine starts (or a size changes) Go's
	// scheduler often bounces the two tasks between threads, and 400 round
	// trips of 1 KiB measured 25-29 µs one-way where the steady state is
	// 20 µs (on one daemon: 6 µs against 0.65 µs).
	WarmTime time.Duration
	// MaxTime stops a size's timed round trips early once it has passed
	// (default 2s; at least 10 round trips are always timed).
	MaxTime time.Duration
	// RateMsgs and RateTime bound the 8-byte stream (defaults 1,000,000
	// messages and 1s); RateWindow is how many messages the receiving task
	// acknowledges at once, the sender keeping at most two windows
	// unacknowledged (default 65536; raw quic-go relies on QUIC's flow
	// control instead).
	RateMsgs   int
	RateTime   time.Duration
	RateWindow int
	// SpawnReps is how many times SpawnTasks tasks are spawned and heard
	// from, after one untimed time (default 5); BarrierRounds is how many
	// barriers are timed, after 10 untimed ones (default 1000).
	SpawnReps     int
	BarrierRounds int
	// Timeout bounds the whole run (default 5m).
	Timeout time.Duration
	// NoBulk keeps every message between daemons on QUIC: the bulk lane
	// (daemon.Config.BulkThreshold) is off.
	NoBulk bool
	// SmallBulk sends messages under the bulk threshold on the bulk lane
	// too once it is open (daemon.Config.BulkSmall).
	SmallBulk bool
	// Metrics makes the daemons of a run between tasks keep their metrics
	// (package daemon/metrics), as `dpvm daemon --metrics-listen` does; the
	// run then scrapes them once, at its end (Result.MetricsMessages).
	Metrics bool
}

// WithDefaults returns o with its zero fields set to their defaults, and
// an error wrapping ErrOptions when a field is out of range.
func (o Options) WithDefaults() (Options, error) {
	bad := func(format string, a ...any) (Options, error) {
		return o, fmt.Errorf("%w: %s", ErrOptions, fmt.Sprintf(format, a...))
	}
	if len(o.Sizes) == 0 {
		o.Sizes = slices.Clone(DefaultSizes)
	}
	seen := map[int]bool{}
	for _, s := range o.Sizes {
		if s < 1 || s > MaxSize {
			return bad("message size %d is outside 1..%d bytes", s, MaxSize)
		}
		if seen[s] {
			return bad("message size %d is given twice", s)
		}
		seen[s] = true
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
		max  int
	}{
		{"reps", &o.Reps, 0, 10_000_000},
		{"warm-up", &o.Warmup, 0, 1_000_000},
		{"rate messages", &o.RateMsgs, 1_000_000, 100_000_000},
		{"rate window", &o.RateWindow, 65536, 1 << 24},
		{"spawn repetitions", &o.SpawnReps, 5, 10_000},
		{"barrier rounds", &o.BarrierRounds, 1000, 10_000_000},
	} {
		if *f.v < 0 || *f.v > f.max {
			return bad("%s %d is outside 0..%d", f.name, *f.v, f.max)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"max time", &o.MaxTime, 2 * time.Second},
		{"warm-up time", &o.WarmTime, DefaultWarmTime},
		{"rate time", &o.RateTime, time.Second},
		{"timeout", &o.Timeout, 5 * time.Minute},
	} {
		if *f.v < 0 {
			return bad("%s %v is negative", f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	return o, nil
}

// repsFor is the upper bound of timed round trips for size.
func (o *Options) repsFor(size int) int {
	switch {
	case o.Reps > 0:
		return o.Reps
	case size <= 1<<10:
		return 4000
	case size <= 64<<10:
		return 600
	}
	return 120
}

// DefaultWarmTime is how long, at least, each size's warm-up lasts by
// default (Options.WarmTime).
const DefaultWarmTime = 300 * time.Millisecond

// warmUp makes the untimed round trips that precede reps timed ones of
// size: counted of them, then more (at most 50×reps) until d has passed,
// since counted round trips alone do not outlast the first tenths of a
// second after a start or a change of size, when Go's scheduler often
// bounces the two tasks between threads (Options.WarmTime).
func warmUp(ctx context.Context, p Pair, size, reps, counted int, d time.Duration) error {
	if _, err := p.RoundTrips(ctx, size, counted, 0); err != nil {
		return fmt.Errorf("warm-up at %s: %w", FormatSize(size), err)
	}
	if _, err := p.RoundTrips(ctx, size, 50*reps, d); err != nil {
		return fmt.Errorf("warm-up at %s: %w", FormatSize(size), err)
	}
	return nil
}

// warmFor is the number of untimed round trips before reps timed ones.
func (o *Options) warmFor(reps int) int {
	if o.Warmup > 0 {
		return o.Warmup
	}
	return max(reps/10, 5)
}

// SizeResult is one row of the latency table.
type SizeResult struct {
	Size int `json:"size"`
	// OnewayUS is half the median round trip, in microseconds.
	OnewayUS float64 `json:"oneway_us"`
	// MBps is Size divided by the one-way latency, in 10^6 bytes per
	// second.
	MBps float64 `json:"mbps"`
	// Reps is the number of timed round trips.
	Reps int `json:"reps"`
	// CPUSPerGB is the CPU time (user and system, of the whole process:
	// both ends) spent during the timed round trips, in seconds per 10^9
	// bytes carried (a round trip carries the size both ways).
	CPUSPerGB float64 `json:"cpu_s_per_gb,omitempty"`
}

// Result is what one run measured. Its JSON form is what `dpvm bench
// pingpong --json` prints.
type Result struct {
	Mode    string       `json:"mode"`
	Results []SizeResult `json:"results"`
	// RateMsgsPerS is the one-way rate of 8-byte messages; RateMsgs is how
	// many were sent.
	RateMsgsPerS float64 `json:"rate_msgs_per_s"`
	RateMsgs     int     `json:"rate_msgs"`
	// Spawn32MS is the median time to spawn SpawnTasks tasks (on the other
	// daemon; on the same one in ModeLocal) and hear a hello from each, in
	// milliseconds. Zero for raw quic-go.
	Spawn32MS float64 `json:"spawn32_ms,omitempty"`
	// Barrier8US is the mean time of one barrier of BarrierTasks tasks
	// (half on each daemon; all on one in ModeLocal), in microseconds: the
	// median over the tasks of their mean. Zero for raw quic-go.
	Barrier8US float64 `json:"barrier8_us,omitempty"`
	// Rounds is how many runs the figures are medians of (1 or more).
	Rounds int `json:"rounds"`
	// MetricsMessages is, with Options.Metrics, the task messages the
	// daemons' metrics counted, sent and received, from a scrape of every
	// daemon at the end of the run (the median over rounds).
	MetricsMessages float64 `json:"metrics_messages,omitempty"`
}

// Size returns the row of the given message size.
func (r *Result) Size(size int) (SizeResult, bool) {
	for _, s := range r.Results {
		if s.Size == size {
			return s, true
		}
	}
	return SizeResult{}, false
}

// Stream is the outcome of a one-way stream of small messages.
type Stream struct {
	Messages int
	Elapsed  time.Duration
}

// Rate is the stream's messages per second.
func (s Stream) Rate() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Messages) / s.Elapsed.Seconds()
}

// Pair is two endpoints that exchange messages: a pinger and its echo.
type Pair interface {
	// RoundTrips sends n messages of size bytes one at a time, waiting for
	// each echo, and returns each round trip's time. With maxTime > 0 it
	// stops once maxTime has passed since the first, after at least 10
	// (or n, if fewer). An echo that differs from what was sent is an
	// error wrapping ErrEcho.
	RoundTrips(ctx context.Context, size, n int, maxTime time.Duration) ([]time.Duration, error)
	// Stream sends at most n messages of RateSize bytes without waiting
	// for each, for at most maxTime, then waits for the receiver's count,
	// with at most 2*window messages unacknowledged where the pair
	// acknowledges in windows.
	Stream(ctx context.Context, n, window int, maxTime time.Duration) (Stream, error)
	// Close stops the pair.
	Close() error
}

// Measure runs the latency table and the message rate on p, as o says (o
// must have its defaults set).
func Measure(ctx context.Context, p Pair, mode string, o Options) (*Result, error) {
	res := &Result{Mode: mode, Rounds: 1}
	for _, size := range o.Sizes {
		reps := o.repsFor(size)
		if err := warmUp(ctx, p, size, reps, o.warmFor(reps), o.WarmTime); err != nil {
			return nil, err
		}
		cpu0 := processCPU()
		rtts, err := p.RoundTrips(ctx, size, reps, o.MaxTime)
		if err != nil {
			return nil, fmt.Errorf("round trips of %s: %w", FormatSize(size), err)
		}
		row := sizeResult(size, Median(rtts)/2, len(rtts))
		if cpu := processCPU() - cpu0; cpu > 0 && len(rtts) > 0 {
			row.CPUSPerGB = cpu.Seconds() / (float64(2*size*len(rtts)) / 1e9)
		}
		res.Results = append(res.Results, row)
	}
	st, err := p.Stream(ctx, o.RateMsgs, o.RateWindow, o.RateTime)
	if err != nil {
		return nil, fmt.Errorf("message stream: %w", err)
	}
	res.RateMsgsPerS, res.RateMsgs = st.Rate(), st.Messages
	return res, nil
}

func sizeResult(size int, oneway time.Duration, reps int) SizeResult {
	r := SizeResult{Size: size, OnewayUS: micros(oneway), Reps: reps}
	if oneway > 0 {
		r.MBps = float64(size) / oneway.Seconds() / 1e6
	}
	return r
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// Median returns the median of xs (the mean of the middle two for an even
// count; 0 for none). It does not change xs.
func Median[T ~int64 | ~float64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// MedianResult combines rounds of one mode into one Result: per size, the
// median one-way latency (the bandwidth follows from it) and the total of
// timed round trips; the median of the rates, spawn and barrier times.
// The rounds must measure the same sizes in the same order.
func MedianResult(rounds []*Result) (*Result, error) {
	if len(rounds) == 0 {
		return nil, fmt.Errorf("%w: no rounds to combine", ErrOptions)
	}
	first := rounds[0]
	out := &Result{Mode: first.Mode, Rounds: len(rounds)}
	for i, sr := range first.Results {
		var ows, cpus []float64
		reps := 0
		for _, r := range rounds {
			if r.Mode != first.Mode || len(r.Results) != len(first.Results) || r.Results[i].Size != sr.Size {
				return nil, fmt.Errorf("%w: rounds measured different things", ErrOptions)
			}
			ows = append(ows, r.Results[i].OnewayUS)
			cpus = append(cpus, r.Results[i].CPUSPerGB)
			reps += r.Results[i].Reps
		}
		ow := Median(ows)
		row := SizeResult{Size: sr.Size, OnewayUS: ow, Reps: reps, CPUSPerGB: Median(cpus)}
		if ow > 0 {
			row.MBps = float64(sr.Size) / ow
		}
		out.Results = append(out.Results, row)
	}
	pick := func(f func(*Result) float64) float64 {
		var xs []float64
		for _, r := range rounds {
			xs = append(xs, f(r))
		}
		return Median(xs)
	}
	out.RateMsgsPerS = pick(func(r *Result) float64 { return r.RateMsgsPerS })
	out.RateMsgs = int(pick(func(r *Result) float64 { return float64(r.RateMsgs) }))
	out.Spawn32MS = pick(func(r *Result) float64 { return r.Spawn32MS })
	out.Barrier8US = pick(func(r *Result) float64 { return r.Barrier8US })
	out.MetricsMessages = pick(func(r *Result) float64 { return r.MetricsMessages })
	return out, nil
}

// ParseSizes reads a comma-separated list of message sizes: numbers of
// bytes with an optional suffix K, KiB, M or MiB (powers of 1024) or B,
// such as "8,1K,64KiB,1M".
func ParseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			return nil, fmt.Errorf("%w: empty size in %q", ErrOptions, s)
		}
		num, mul := f, 1
		u := strings.ToUpper(f)
		for _, suf := range []struct {
			s string
			m int
		}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"K", 1 << 10}, {"M", 1 << 20}, {"B", 1}} {
			if strings.HasSuffix(u, suf.s) {
				num, mul = strings.TrimSpace(f[:len(f)-len(suf.s)]), suf.m
				break
			}
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || n > MaxSize/mul {
			return nil, fmt.Errorf("%w: size %q is not a number of bytes in 1..%d (suffixes K, M)", ErrOptions, f, MaxSize)
		}
		out = append(out, n*mul)
	}
	return out, nil
}

// FormatSize prints a size in bytes as "8 B", "1 KiB", "1 MiB" or, when it
// is not a whole number of those, in bytes.
func FormatSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + " KiB"
	}
	return strconv.Itoa(n) + " B"
}
