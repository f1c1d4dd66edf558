package npb

import (
	"context"
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
