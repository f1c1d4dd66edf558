package npb

import (
	"testing"
)

// BenchmarkSerial runs class A (the class the performance targets name)
// once per iteration serially, without the runtime, and reports the
// kernel's own Mop/s: the baseline of the runtime's benchmarks in
// integration/examples. Run them one at a time on a quiet machine, e.g.
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

func BenchmarkSerial(b *testing.B) {
	for _, k := range Kernels {
		b.Run(k, func(b *testing.B) { benchSerial(b, k, "A") })
	}
}
