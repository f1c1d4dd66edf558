package bench

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon"
)

// The migration benchmarks time one move per op of a task holding the
// size's []float64 between the two daemons of an in-process virtual
// machine (QUIC over loopback, a shared temporary directory), after one
// untimed move; MB/s is the checkpoint's bytes per move and freeze-ms the
// median time the task was stopped. BenchmarkMigrateBaseline times the
// baselines on the same number of bytes. For a profile:
//
//	go test -run '^$' -bench 'Migrate/indirect/16MiB' -benchtime 40x -cpuprofile cpu.out ./daemon/bench
//	go tool pprof -top cpu.out

var migrateBenchSizes = []float64{0, 1, 16}

func BenchmarkMigrate(b *testing.B) {
	for _, via := range []daemon.Via{daemon.Direct, daemon.Indirect} {
		b.Run(string(via), func(b *testing.B) {
			for _, mib := range migrateBenchSizes {
				b.Run(fmt.Sprintf("%gMiB", mib), func(b *testing.B) { benchMigrate(b, via, mib, false) })
			}
		})
	}
}

// BenchmarkMigrateFresh times the first moves of an empty state on a fresh
// virtual machine, each after a collection, as a short `dpvm bench
// migrate` run (a few reps) does: an op is nine direct moves after an
// untimed one.
func BenchmarkMigrateFresh(b *testing.B) {
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		mb := startMigBenchB(b, false)
		holder, err := mb.spawnHolder(ctx, 0, 1)
		if err != nil {
			b.Fatal(err)
		}
		mv := &migMover{b: mb, tid: holder}
		if _, err := mv.move(ctx, daemon.Direct); err != nil {
			b.Fatal(err)
		}
		for range 9 {
			runtime.GC()
			b.StartTimer()
			if _, err := mv.move(ctx, daemon.Direct); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
		}
		if err := mb.close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(9*b.N), "µs/move")
}

// BenchmarkMigrateAfterGC is BenchmarkMigrate with a collection before
// each move, untimed, as `dpvm bench migrate` runs one: a move then
// starts with the goroutine stacks shrunk and the caches cold.
func BenchmarkMigrateAfterGC(b *testing.B) {
	for _, via := range []daemon.Via{daemon.Direct, daemon.Indirect} {
		b.Run(string(via), func(b *testing.B) { benchMigrate(b, via, 0, true) })
	}
}

func startMigBenchB(b *testing.B, baselines bool) *migBench {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o, err := MigrateOptions{Dir: b.TempDir(), NoBaselines: !baselines}.WithDefaults()
	if err != nil {
		b.Fatal(err)
	}
	mb, err := startMigBench(ctx, o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := mb.close(); err != nil {
			b.Error(err)
		}
	})
	return mb
}

func benchMigrate(b *testing.B, via daemon.Via, mib float64, gc bool) {
	ctx := context.Background()
	mb := startMigBenchB(b, false)
	n := StateElements(mib)
	holder, err := mb.spawnHolder(ctx, n, 1)
	if err != nil {
		b.Fatal(err)
	}
	mv := &migMover{b: mb, tid: holder}
	r, err := mv.move(ctx, via) // untimed
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(r.CheckpointBytes)
	freezes := make([]float64, 0, b.N)
	b.ResetTimer()
	for range b.N {
		if gc {
			b.StopTimer()
			runtime.GC()
			b.StartTimer()
		}
		r, err := mv.move(ctx, via)
		if err != nil {
			b.Fatal(err)
		}
		freezes = append(freezes, r.FreezeMS)
	}
	b.StopTimer()
	b.ReportMetric(Median(freezes), "freeze-ms")
	if err := mb.verify(ctx, holder, n); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkMigrateBaseline(b *testing.B) {
	for _, kind := range []string{BaselineQUIC, BaselineFile} {
		b.Run(kind, func(b *testing.B) {
			for _, mib := range migrateBenchSizes {
				b.Run(fmt.Sprintf("%gMiB", mib), func(b *testing.B) { benchBaseline(b, kind, mib) })
			}
		})
	}
}

func benchBaseline(b *testing.B, kind string, mib float64) {
	ctx := context.Background()
	buf := make([]byte, StateElements(mib)*8)
	for i := range buf {
		buf[i] = byte(i)
	}
	var op func() error
	switch kind {
	case BaselineQUIC:
		q, err := StartQUIC(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if err := q.Close(); err != nil {
				b.Error(err)
			}
		})
		op = func() error { _, err := q.Bulk(ctx, buf); return err }
	case BaselineFile:
		dir := b.TempDir()
		op = func() error { _, err := FileRoundTrip(dir, buf); return err }
	}
	if err := op(); err != nil { // untimed
		b.Fatal(err)
	}
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for range b.N {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
}
