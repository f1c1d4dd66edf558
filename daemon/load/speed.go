package load

import (
	"fmt"
	"math"
	"runtime"
	"time"
)

// CalibrationIters is the size of one unit of the calibration workload.
const CalibrationIters = 1 << 14

// ReferenceRate is the calibration workload's rate, in units
// (CalibrationIters iterations) per second, on the reference machine: the
// host on which dpvm's figures were measured, one core of a 2.1 GHz AMD
// EPYC virtual machine (go1.26, linux/amd64). A host that runs the workload
// at this rate has α = 1.
const ReferenceRate = 21500.0

// Calibration defaults and bounds.
const (
	DefaultCalibration = 100 * time.Millisecond
	MaxCalibration     = 200 * time.Millisecond
	MinCalibration     = 5 * time.Millisecond
	calibrationRuns    = 10
)

// MaxAlpha bounds a declared speed factor.
const MaxAlpha = 1000

// Calibration is the outcome of a calibration run.
type Calibration struct {
	Rate  float64       // best rate over the runs, units per second
	Speed float64       // Rate / ReferenceRate: 2 is twice the reference
	Alpha float64       // 1 / Speed, the speed factor α Dynamic-SED uses
	Runs  int           // runs made
	Took  time.Duration // wall time spent
}

// Calibrate measures this host's speed factor α = ReferenceRate / rate,
// where rate is the best of ten runs of a fixed, serial integer workload
// (a xorshift-multiply chain: no memory traffic, no allocation, one core).
// d is the total time to spend: 0 means DefaultCalibration, and it is kept
// within MinCalibration..MaxCalibration. Taking the best run discards the
// runs slowed by other processes, so the figure is stable on a busy host;
// it measures one core, so a host with more cores is no faster by it.
func Calibrate(d time.Duration) float64 { return Measure(d).Alpha }

// Measure is Calibrate with the details.
func Measure(d time.Duration) Calibration { return measure(d, time.Now) }

func measure(d time.Duration, now func() time.Time) Calibration {
	if d == 0 {
		d = DefaultCalibration
	}
	d = min(max(d, MinCalibration), MaxCalibration)
	per := d / calibrationRuns
	begin := now()
	best := 0.0
	x := uint64(0x9E3779B97F4A7C15)
	for run := 0; run < calibrationRuns; run++ {
		start := now()
		units := 0
		var el time.Duration
		for {
			x = CalibrationWork(CalibrationIters, x)
			units++
			if el = now().Sub(start); el >= per {
				break
			}
		}
		best = math.Max(best, float64(units)/el.Seconds())
	}
	runtime.KeepAlive(x) // the workload's result, so that it is computed
	return Calibration{Rate: best, Speed: best / ReferenceRate, Alpha: ReferenceRate / best, Runs: calibrationRuns, Took: now().Sub(begin)}
}

// CalibrationWork is the calibration workload: n steps of a xorshift chain
// with a multiplication, each depending on the last, from seed x. It is a
// pure function; its result only keeps the compiler from removing it.
func CalibrationWork(n int, x uint64) uint64 {
	for i := 0; i < n; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		x = x*0x2545F4914F6CDD1D + uint64(i)
	}
	return x
}

// Speed is the speed factor a daemon reports and how it came by it.
type Speed struct {
	// Alpha is the speed factor α reported to the scheduler.
	Alpha float64
	// Declared is true when α was given (--speed) rather than measured.
	Declared bool
	// Throttle is how many times slower the daemon's tasks should really
	// run (emulation; 1 = not at all): a declared α takes this machine as
	// the reference and slows the tasks by α. A declared α below 1 is
	// reported but cannot be emulated (tasks cannot run faster), so its
	// Throttle is 1.
	Throttle float64
}

// ResolveSpeed returns the declared speed factor when declared > 0 (the
// --speed flag, emulation), otherwise the one measured by Calibrate(d).
// Errors wrap ErrInvalid.
func ResolveSpeed(declared float64, d time.Duration) (Speed, error) {
	switch {
	case declared == 0:
		return Speed{Alpha: Calibrate(d), Throttle: 1}, nil
	case declared > 0 && declared <= MaxAlpha:
		return Speed{Alpha: declared, Declared: true, Throttle: math.Max(1, declared)}, nil
	}
	return Speed{}, fmt.Errorf("%w: speed %g (0 < α ≤ %d, or 0 to calibrate)", ErrInvalid, declared, MaxAlpha)
}

// String describes the speed, e.g. "α = 4 (declared, emulated: tasks
// throttled 4×)" or "α = 0.93 (calibrated)".
func (s Speed) String() string {
	if !s.Declared {
		return fmt.Sprintf("α = %.3g (calibrated)", s.Alpha)
	}
	if s.Throttle > 1 {
		return fmt.Sprintf("α = %g (declared, emulated: tasks throttled %g×)", s.Alpha, s.Throttle)
	}
	return fmt.Sprintf("α = %g (declared, not emulated)", s.Alpha)
}
