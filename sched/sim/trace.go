package sim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// ErrBadTrace is returned (wrapped, with the line number) for a trace that
// cannot be read.
var ErrBadTrace = errors.New("sim: invalid trace")

// TraceHost is one workstation of a trace.
type TraceHost struct {
	Name string
	// Alpha is the speed factor α (1 for the reference machine, larger is
	// slower).
	Alpha float64
	// MaxUsers is how many interactive users the host tolerates before its
	// parallel processes become migration candidates.
	MaxUsers int
}

// Sample is one host's state during one time step, as monitored without
// any parallel application: runnable processes, free memory in MiB and
// interactive users.
type Sample struct {
	Load    float32
	MemFree float32
	Users   uint16
}

// Trace is the load of a workstation pool over time: for each time step
// and each host, a Sample. Samples[t][h] belongs to step t and Hosts[h].
type Trace struct {
	// Step is the length of one time step in seconds.
	Step float64
	// StartDay (0 = Monday … 6 = Sunday) and StartSecond (seconds after
	// midnight) date step 0.
	StartDay    int
	StartSecond float64
	Hosts       []TraceHost
	Samples     [][]Sample
}

// Steps is the number of time steps.
func (t *Trace) Steps() int { return len(t.Samples) }

// Clock returns the weekday (0 = Monday) and the hour of day (fractional) of
// step i.
func (t *Trace) Clock(i int) (day int, hour float64) {
	s := t.StartSecond + float64(i)*t.Step
	d := int(math.Floor(s / 86400))
	return ((t.StartDay+d)%7 + 7) % 7, (s - float64(d)*86400) / 3600
}

// Validate reports an inconsistent trace.
func (t *Trace) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrBadTrace}, a...)...) }
	if !(t.Step > 0) || math.IsInf(t.Step, 0) {
		return bad("step %g s (> 0)", t.Step)
	}
	if t.StartDay < 0 || t.StartDay > 6 || !(t.StartSecond >= 0 && t.StartSecond < 86400) {
		return bad("start day %d (0..6), second %g (0..86399)", t.StartDay, t.StartSecond)
	}
	if len(t.Hosts) == 0 {
		return bad("no hosts")
	}
	seen := map[string]bool{}
	for _, h := range t.Hosts {
		if h.Name == "" || strings.ContainsAny(h.Name, " \t\n#") || seen[h.Name] {
			return bad("host name %q (non-empty, unique, no spaces)", h.Name)
		}
		seen[h.Name] = true
		if !(h.Alpha > 0) || math.IsInf(h.Alpha, 0) || h.MaxUsers < 0 {
			return bad("host %q: alpha %g (> 0), max users %d (≥ 0)", h.Name, h.Alpha, h.MaxUsers)
		}
	}
	if len(t.Samples) == 0 {
		return bad("no samples")
	}
	for i, row := range t.Samples {
		if len(row) != len(t.Hosts) {
			return bad("step %d has %d samples for %d hosts", i, len(row), len(t.Hosts))
		}
		for h, s := range row {
			if !(s.Load >= 0) || !(s.MemFree >= 0) || math.IsInf(float64(s.Load), 0) || math.IsInf(float64(s.MemFree), 0) {
				return bad("step %d host %q: load %g, free memory %g (finite, ≥ 0)", i, t.Hosts[h].Name, s.Load, s.MemFree)
			}
		}
	}
	return nil
}

var dayNames = []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}

// WriteTrace writes t in dpvm's text trace format:
//
//	dpvm-trace 1
//	step 180
//	start thu 00:00:00
//	host ws01 1 0          (name, alpha, max users)
//	...
//	0 ws01 0.12 5120 0     (step, host, load, free MiB, users)
//	...
//
// Blank lines and text after '#' are ignored on reading.
func WriteTrace(w io.Writer, t *Trace) error {
	if err := t.Validate(); err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	s := int(t.StartSecond)
	fmt.Fprintf(bw, "dpvm-trace 1\nstep %s\nstart %s %02d:%02d:%02d\n", fmtFloat(t.Step), dayNames[t.StartDay], s/3600, s/60%60, s%60)
	for _, h := range t.Hosts {
		fmt.Fprintf(bw, "host %s %s %d\n", h.Name, fmtFloat(h.Alpha), h.MaxUsers)
	}
	for i, row := range t.Samples {
		for h, x := range row {
			fmt.Fprintf(bw, "%d %s %s %s %d\n", i, t.Hosts[h].Name, fmtFloat32(x.Load), fmtFloat32(x.MemFree), x.Users)
		}
	}
	return bw.Flush()
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func fmtFloat32(v float32) string { return strconv.FormatFloat(float64(v), 'g', -1, 32) }

// MaxTraceSamples bounds the samples ReadTrace accepts (steps × hosts).
const MaxTraceSamples = 20_000_000

// ReadTrace parses the text trace format written by WriteTrace. Every host
// must have exactly one sample for every step from 0 to the last; samples
// may come in any order.
func ReadTrace(r io.Reader) (*Trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	t := &Trace{}
	hostIdx := map[string]int{}
	type rec struct {
		step, host int
		s          Sample
	}
	var recs []rec
	maxStep := -1
	line := 0
	header, haveStep, haveStart := false, false, false
	bad := func(f string, a ...any) error {
		return fmt.Errorf("%w: line %d: "+f, append([]any{ErrBadTrace, line}, a...)...)
	}
	num := func(s string) (float64, error) {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, fmt.Errorf("bad number %q", s)
		}
		return v, nil
	}
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		if !header {
			if len(f) != 2 || f[0] != "dpvm-trace" || f[1] != "1" {
				return nil, bad("want header \"dpvm-trace 1\", got %q", text)
			}
			header = true
			continue
		}
		switch f[0] {
		case "step":
			if len(f) != 2 || haveStep {
				return nil, bad("want one \"step SECONDS\"")
			}
			v, err := num(f[1])
			if err != nil || !(v > 0) {
				return nil, bad("step: %v", orPositive(err, v))
			}
			t.Step, haveStep = v, true
		case "start":
			if len(f) != 3 || haveStart {
				return nil, bad("want one \"start DAY HH:MM[:SS]\"")
			}
			d := -1
			for i, n := range dayNames {
				if strings.EqualFold(f[1], n) {
					d = i
				}
			}
			if d < 0 {
				return nil, bad("unknown day %q (mon..sun)", f[1])
			}
			p := strings.Split(f[2], ":")
			if len(p) < 2 || len(p) > 3 {
				return nil, bad("time %q is not HH:MM[:SS]", f[2])
			}
			var hms [3]int
			lim := [3]int{24, 60, 60}
			for i, x := range p {
				n, err := strconv.Atoi(x)
				if err != nil || n < 0 || n >= lim[i] {
					return nil, bad("time %q is not HH:MM[:SS]", f[2])
				}
				hms[i] = n
			}
			t.StartDay, t.StartSecond, haveStart = d, float64(hms[0]*3600+hms[1]*60+hms[2]), true
		case "host":
			if len(f) != 4 {
				return nil, bad("want \"host NAME ALPHA MAXUSERS\"")
			}
			if _, dup := hostIdx[f[1]]; dup {
				return nil, bad("host %q declared twice", f[1])
			}
			if len(recs) > 0 {
				return nil, bad("host %q declared after samples", f[1])
			}
			a, err := num(f[2])
			if err != nil || !(a > 0) {
				return nil, bad("host %q alpha: %v", f[1], orPositive(err, a))
			}
			mu, err := strconv.Atoi(f[3])
			if err != nil || mu < 0 || mu > 1<<16 {
				return nil, bad("host %q max users %q", f[1], f[3])
			}
			hostIdx[f[1]] = len(t.Hosts)
			t.Hosts = append(t.Hosts, TraceHost{Name: f[1], Alpha: a, MaxUsers: mu})
		default:
			if len(f) != 5 {
				return nil, bad("want \"STEP HOST LOAD FREE_MIB USERS\", got %d fields", len(f))
			}
			st, err := strconv.Atoi(f[0])
			if err != nil || st < 0 {
				return nil, bad("step %q", f[0])
			}
			h, ok := hostIdx[f[1]]
			if !ok {
				return nil, bad("unknown host %q", f[1])
			}
			ld, err1 := num(f[2])
			mf, err2 := num(f[3])
			us, err3 := strconv.Atoi(f[4])
			if err1 != nil || err2 != nil || err3 != nil || ld < 0 || mf < 0 || us < 0 || us > math.MaxUint16 || ld > math.MaxFloat32 || mf > math.MaxFloat32 {
				return nil, bad("sample %q", text)
			}
			if len(recs) >= MaxTraceSamples {
				return nil, bad("more than %d samples", MaxTraceSamples)
			}
			recs = append(recs, rec{st, h, Sample{Load: float32(ld), MemFree: float32(mf), Users: uint16(us)}})
			maxStep = max(maxStep, st)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: line %d: %v", ErrBadTrace, line+1, err)
	}
	if !header || !haveStep {
		return nil, fmt.Errorf("%w: missing header or step", ErrBadTrace)
	}
	if len(t.Hosts) == 0 || len(recs) == 0 {
		return nil, fmt.Errorf("%w: no hosts or no samples", ErrBadTrace)
	}
	steps := maxStep + 1
	if steps*len(t.Hosts) != len(recs) {
		return nil, fmt.Errorf("%w: %d samples for %d steps of %d hosts: every host needs one sample per step", ErrBadTrace, len(recs), steps, len(t.Hosts))
	}
	seen := make([]bool, len(recs))
	t.Samples = make([][]Sample, steps)
	flat := make([]Sample, len(recs))
	for i := range t.Samples {
		t.Samples[i] = flat[i*len(t.Hosts) : (i+1)*len(t.Hosts)]
	}
	for _, r := range recs {
		k := r.step*len(t.Hosts) + r.host
		if seen[k] {
			return nil, fmt.Errorf("%w: step %d host %q sampled twice", ErrBadTrace, r.step, t.Hosts[r.host].Name)
		}
		seen[k] = true
		t.Samples[r.step][r.host] = r.s
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

func orPositive(err error, v float64) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("%g must be positive", v)
}

// SyntheticConfig describes a synthetic workstation pool.
type SyntheticConfig struct {
	Hosts int
	Days  int
	// Step is the sampling period in seconds (the scheduler's δT).
	Step float64
	// StartDay is the weekday of the first midnight (0 = Monday).
	StartDay int
	// MemoryMiB is each host's memory.
	MemoryMiB float64
	Seed      uint64
}

// DefaultSynthetic returns the pool of Schnor and Gehrke's experiment: 28
// workstations, sampled every 3 minutes for 5 days starting on a Thursday
// at midnight, so that a 4-day run starting at midnight or at 16:00 spans a
// weekend.
func DefaultSynthetic() SyntheticConfig {
	return SyntheticConfig{Hosts: 28, Days: 5, Step: 180, StartDay: 3, MemoryMiB: 8192, Seed: 1}
}

// presence is the probability that a workstation's owner is at it, by hour,
// on a weekday; weekends use a quarter of it.
var presence = [24]float64{
	0.03, 0.02, 0.02, 0.01, 0.01, 0.01, 0.02, 0.05, 0.25, 0.55, 0.75, 0.80,
	0.60, 0.70, 0.80, 0.80, 0.75, 0.60, 0.40, 0.25, 0.15, 0.10, 0.07, 0.05,
}

// SyntheticTrace generates a workstation pool with day/night and weekday
// patterns. Hosts are a mix of speeds (a seventh with α = 1, two sevenths
// with α = 2, the rest α = 3 to 4); each has an owner whose presence follows
// an office-hours profile (lunch dip, quiet weekends), with sessions
// modelled as a Markov chain of mean length three hours. A present owner
// adds interactive load (light: 0.05 plus an exponential of mean 0.15, with
// compile or simulation bursts of one or two runnable processes about once
// every three hours, lasting 3 to 20 minutes) and uses memory;
// idle hosts carry background daemons and, now and then at night, a batch
// job. Remote logins (mean half an hour) appear at any hour. Every host
// tolerates one interactive user (max users 1): its owner, for whom the
// availability vector reserves load_reserv and mem_reserv; a second user
// makes the parallel processes leave.
func SyntheticTrace(c SyntheticConfig) (*Trace, error) {
	if c.Hosts < 1 || c.Hosts > 10000 || c.Days < 1 || c.Days > 366 || !(c.Step >= 1 && c.Step <= 86400) || c.StartDay < 0 || c.StartDay > 6 || !(c.MemoryMiB >= 256) || math.IsInf(c.MemoryMiB, 0) {
		return nil, fmt.Errorf("%w: synthetic trace: hosts %d (1..10000), days %d (1..366), step %g s (1..86400), start day %d (0..6), memory %g MiB (≥ 256)",
			ErrBadConfig, c.Hosts, c.Days, c.Step, c.StartDay, c.MemoryMiB)
	}
	steps := int(float64(c.Days) * 86400 / c.Step)
	if steps*c.Hosts > MaxTraceSamples {
		return nil, fmt.Errorf("%w: synthetic trace of %d samples (at most %d)", ErrBadConfig, steps*c.Hosts, MaxTraceSamples)
	}
	t := &Trace{Step: c.Step, StartDay: c.StartDay}
	for i := 0; i < c.Hosts; i++ {
		a := 3.0 + float64(i%2)
		switch {
		case i%7 == 0:
			a = 1
		case i%7 == 1 || i%7 == 4:
			a = 2
		}
		t.Hosts = append(t.Hosts, TraceHost{Name: fmt.Sprintf("ws%02d", i+1), Alpha: a, MaxUsers: 1})
	}
	t.Samples = make([][]Sample, steps)
	flat := make([]Sample, steps*c.Hosts)
	for i := range t.Samples {
		t.Samples[i] = flat[i*c.Hosts : (i+1)*c.Hosts]
	}
	stepH := c.Step / 3600
	for h := range t.Hosts {
		r := rand.New(rand.NewPCG(c.Seed, uint64(h)+7))
		diligence := 0.6 + 0.8*r.Float64() // owners differ in how much they are around
		present, remote := false, false
		burst := 0.0   // remaining hours of a CPU burst
		burstLd := 0.0 // its runnable processes
		batch := 0.0   // remaining hours of a night batch job
		appMem := 0.0
		background := 0.02 + 0.08*r.Float64()
		for i := 0; i < steps; i++ {
			day, hour := t.Clock(i)
			p := presence[int(hour)%24] * diligence
			if day >= 5 {
				p *= 0.25
			}
			p = math.Min(p, 0.95)
			// A two-state chain whose stationary on-probability is p and
			// whose sessions last about three hours.
			leave := stepH / 3.0
			arrive := math.Min(1, leave*p/(1-p))
			if present {
				present = r.Float64() >= leave
			} else {
				present = r.Float64() < arrive
			}
			if remote {
				remote = r.Float64() >= stepH/0.5
			} else {
				remote = r.Float64() < 0.02*stepH
			}
			load := background * (0.5 + r.Float64())
			mem := c.MemoryMiB * (0.55 + 0.1*r.Float64())
			users := 0
			if present {
				users++
				load += 0.05 + 0.15*r.ExpFloat64()
				if burst <= 0 && r.Float64() < 0.3*stepH {
					burst = 0.05 + 0.25*r.ExpFloat64()
					burstLd = float64(1 + r.IntN(2))
				}
				if appMem == 0 || r.Float64() < 0.5*stepH {
					appMem = c.MemoryMiB * (0.15 + 0.35*r.Float64())
				}
				mem -= appMem
			} else {
				appMem = 0
			}
			if remote {
				users++
				load += 0.2 * r.ExpFloat64()
			}
			if burst > 0 {
				load += burstLd
				mem -= 300 * burstLd
				burst -= stepH
			}
			if batch <= 0 && (hour >= 22 || hour < 5) && r.Float64() < 0.03*stepH {
				batch = 1 + 3*r.Float64()
			}
			if batch > 0 {
				load++
				mem -= 1024
				batch -= stepH
			}
			t.Samples[i][h] = Sample{Load: float32(load), MemFree: float32(math.Max(64, mem)), Users: uint16(users)}
		}
	}
	return t, nil
}
