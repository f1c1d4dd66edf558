package load

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// fakeClock advances by step at every reading.
func fakeClock(step time.Duration) func() time.Time {
	t := time.Unix(0, 0)
	return func() time.Time {
		t = t.Add(step)
		return t
	}
}

func TestMeasureArithmetic(t *testing.T) {
	// Each clock reading advances 1 ms, so each unit of work "takes" 1 ms:
	// a rate of 1000 units/s whatever the run length.
	for _, c := range []struct {
		d    time.Duration
		took time.Duration
	}{
		{100 * time.Millisecond, 111 * time.Millisecond}, // 10 runs × (start + 10 units) + the end
		{0, 111 * time.Millisecond},                      // the default, 100 ms
		{time.Hour, 211 * time.Millisecond},              // kept to 200 ms
		{time.Nanosecond, 21 * time.Millisecond},         // raised to 5 ms: one unit per run, 0.5 ms each
	} {
		got := measure(c.d, fakeClock(time.Millisecond))
		if got.Rate != 1000 || got.Alpha != ReferenceRate/1000 || got.Speed != 1000/ReferenceRate || got.Runs != calibrationRuns || got.Took != c.took {
			t.Errorf("d %v: %+v, want rate 1000, α %g, took %v", c.d, got, ReferenceRate/1000, c.took)
		}
	}
}

func TestCalibrateSanity(t *testing.T) {
	a := Calibrate(MinCalibration)
	if !(a > 1e-3 && a < 1e3) || math.IsInf(a, 0) {
		t.Fatalf("α = %g: not a plausible speed factor", a)
	}
	m := Measure(MinCalibration)
	if !(m.Rate > 0) || math.Abs(m.Speed*m.Alpha-1) > 1e-9 || m.Runs != calibrationRuns || m.Took < MinCalibration {
		t.Errorf("inconsistent calibration %+v", m)
	}
}

func TestCalibrationWork(t *testing.T) {
	a := CalibrationWork(CalibrationIters, 1)
	if a != CalibrationWork(CalibrationIters, 1) {
		t.Error("the workload is not deterministic")
	}
	if a == CalibrationWork(CalibrationIters-1, 1) || a == CalibrationWork(CalibrationIters, 2) {
		t.Error("the workload ignores its inputs")
	}
	if CalibrationWork(0, 99) != 99 {
		t.Error("zero steps changed the seed")
	}
}

func TestResolveSpeed(t *testing.T) {
	for _, c := range []struct {
		declared float64
		want     Speed
		text     string
	}{
		{4, Speed{Alpha: 4, Declared: true, Throttle: 4}, "α = 4 (declared, emulated: tasks throttled 4×)"},
		{1, Speed{Alpha: 1, Declared: true, Throttle: 1}, "α = 1 (declared, not emulated)"},
		{0.5, Speed{Alpha: 0.5, Declared: true, Throttle: 1}, "α = 0.5 (declared, not emulated)"},
	} {
		got, err := ResolveSpeed(c.declared, 0)
		if err != nil || got != c.want || got.String() != c.text {
			t.Errorf("ResolveSpeed(%g) = %+v %q, %v; want %+v %q", c.declared, got, got.String(), err, c.want, c.text)
		}
	}
	got, err := ResolveSpeed(0, MinCalibration)
	if err != nil || got.Declared || got.Throttle != 1 || !(got.Alpha > 0) || !strings.HasSuffix(got.String(), "(calibrated)") {
		t.Errorf("calibrated: %+v %q, %v", got, got.String(), err)
	}
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1), MaxAlpha + 1} {
		if _, err := ResolveSpeed(bad, 0); !errors.Is(err, ErrInvalid) {
			t.Errorf("ResolveSpeed(%g): err %v, want ErrInvalid", bad, err)
		}
	}
}

// BenchmarkCalibrate reports the α and rate this machine measures with the
// default calibration time.
func BenchmarkCalibrate(b *testing.B) {
	var c Calibration
	for b.Loop() {
		c = Measure(DefaultCalibration)
	}
	b.ReportMetric(c.Alpha, "alpha")
	b.ReportMetric(c.Rate, "units/s")
}
