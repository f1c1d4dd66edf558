package sim

import (
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// ParseValues parses a list of numbers given as "0.3,0.9" or as a range
// "start:stop:step" (stop included, within rounding), or a mix of both
// separated by commas.
func ParseValues(s string) ([]float64, error) {
	var out []float64
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if strings.Contains(part, ":") {
			f := strings.Split(part, ":")
			if len(f) != 3 {
				return nil, fmt.Errorf("%w: range %q is not start:stop:step", ErrBadConfig, part)
			}
			var v [3]float64
			for i, x := range f {
				n, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
				if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
					return nil, fmt.Errorf("%w: range %q: bad number %q", ErrBadConfig, part, x)
				}
				v[i] = n
			}
			start, stop, step := v[0], v[1], v[2]
			if !(step > 0) || stop < start || (stop-start)/step > 10000 {
				return nil, fmt.Errorf("%w: range %q needs step > 0, stop ≥ start and at most 10000 values", ErrBadConfig, part)
			}
			n := int(math.Floor((stop-start)/step + 1e-9))
			for i := 0; i <= n; i++ {
				// Round to 12 digits so 0.1:0.9:0.1 gives 0.3, not 0.30000000000000004.
				x, _ := strconv.ParseFloat(strconv.FormatFloat(start+float64(i)*step, 'g', 12, 64), 64)
				out = append(out, x)
			}
			continue
		}
		n, err := strconv.ParseFloat(part, 64)
		if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
			return nil, fmt.Errorf("%w: bad number %q", ErrBadConfig, part)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: empty list %q", ErrBadConfig, s)
	}
	return out, nil
}

// Sweep runs every configuration, using up to workers goroutines (0 means
// GOMAXPROCS), and returns the results in the order of cfgs. Each run is
// independent and deterministic, so the results do not depend on workers.
func Sweep(cfgs []LoadShareConfig, workers int) ([]LoadShareResult, error) {
	for i, c := range cfgs {
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("sweep: run %d: %w", i, err)
		}
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	out := make([]LoadShareResult, len(cfgs))
	errs := make([]error, len(cfgs))
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers && w < len(cfgs); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i], errs[i] = RunLoadShare(cfgs[i])
			}
		}()
	}
	for i := range cfgs {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("sweep: run %d: %w", i, err)
		}
	}
	return out, nil
}

// Crossover returns the first x at which series b becomes lower than series
// a, interpolated linearly between the sampled points, and false if b never
// drops below a. xs must be increasing.
func Crossover(xs, a, b []float64) (float64, bool) {
	for i := range xs {
		if i >= len(a) || i >= len(b) {
			break
		}
		if b[i] < a[i] {
			if i == 0 {
				return xs[0], true
			}
			d0 := a[i-1] - b[i-1] // ≤ 0
			d1 := a[i] - b[i]     // > 0
			return xs[i-1] + (xs[i]-xs[i-1])*(-d0)/(d1-d0), true
		}
	}
	return 0, false
}
