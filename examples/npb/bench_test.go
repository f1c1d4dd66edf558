package npb

import (
	"context"
	"math"
	"runtime"
	"testing"
)

// The benchmarks run class A (the class the performance targets name) once
// per iteration and report the kernel's own Mop/s: serially without the
// runtime (the baseline), and through the runtime at np = 1 and 2. Run them
// one at a time on a quiet machine, e.g.
//
//	go test -run '^$' -bench 'Serial/mg' -benchtime 3x ./examples/npb

func benchSerial(b *testing.B, kernel, class string) {
	var mops float64
	for b.Loop() {
		r, err := RunSerial(kernel, class, nil)
		if err != nil {
			b.Fatal(err)
		}
		if r.Verified == Unsuccessful {
			b.Fatalf("%s class %s did not verify", kernel, class)
		}
		mops = max(mops, r.Mops)
	}
	b.ReportMetric(mops, "Mop/s")
}

func benchRun(b *testing.B, kernel, class string, np int) {
	var mops float64
	for b.Loop() {
		r, err := Run(context.Background(), kernel, class, np, RunOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if r.Verified == Unsuccessful {
			b.Fatalf("%s class %s np %d did not verify", kernel, class, np)
		}
		mops = max(mops, r.Mops)
	}
	b.ReportMetric(mops, "Mop/s")
}

func BenchmarkSerial(b *testing.B) {
	for _, k := range Kernels {
		b.Run(k, func(b *testing.B) { benchSerial(b, k, "A") })
	}
}

func BenchmarkRuntimeNP1(b *testing.B) {
	for _, k := range Kernels {
		b.Run(k, func(b *testing.B) { benchRun(b, k, "A", 1) })
	}
}

func BenchmarkRuntimeNP2(b *testing.B) {
	for _, k := range Kernels {
		b.Run(k, func(b *testing.B) { benchRun(b, k, "A", 2) })
	}
}

// BenchmarkOverheadNP1 alternates the serial form and the runtime at np = 1
// on class A, so both see the same machine load, and reports the runtime's
// overhead on the kernel's own timed region: the best runtime time against
// the best serial time, in percent (negative is noise). Taking the best of
// several runs discards those that another process descheduled.
func BenchmarkOverheadNP1(b *testing.B) {
	for _, k := range Kernels {
		b.Run(k, func(b *testing.B) {
			ts, tr := math.Inf(1), math.Inf(1)
			for b.Loop() {
				// Collect the previous run's arrays first, so neither
				// run pays for the other's garbage.
				runtime.GC()
				s, err := RunSerial(k, "A", nil)
				if err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				r, err := Run(context.Background(), k, "A", 1, RunOptions{})
				if err != nil {
					b.Fatal(err)
				}
				ts = min(ts, s.TimeS)
				tr = min(tr, r.TimeS)
			}
			b.ReportMetric(100*(tr/ts-1), "%overhead")
		})
	}
}
