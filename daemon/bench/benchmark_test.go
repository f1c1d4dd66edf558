package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon"
)

// The benchmarks below time the steady state of each measurement: the
// pair is started and warmed up before the timer runs. ns/op is one round
// trip (one message for the streams, one spawn of 32 tasks, one barrier);
// oneway-µs is half the median round trip, as `dpvm bench` reports it.
// For profiles of the remote path:
//
//	go test -run '^$' -bench RemoteRoundTrip/8B -benchtime 20000x -cpuprofile cpu.out ./daemon/bench
//	go tool pprof -top cpu.out

func startRemote(b *testing.B) Pair { return startTasks(b, ModeRemote) }
func startLocal(b *testing.B) Pair  { return startTasks(b, ModeLocal) }

// startRemoteNoBulk is startRemote with the bulk lane off: every message
// between the daemons goes over QUIC, as with `dpvm bench pingpong
// --no-bulk`.
func startRemoteNoBulk(b *testing.B) Pair {
	return startConfigured(b, ModeRemote, daemon.Config{BulkThreshold: -1})
}

func startTasks(b *testing.B, mode string) Pair {
	return startConfigured(b, mode, daemon.Config{})
}

func startConfigured(b *testing.B, mode string, cfg daemon.Config) Pair {
	p, err := startPair(context.Background(), mode, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := p.Close(); err != nil {
			b.Error(err)
		}
	})
	return p
}

func startQUIC(b *testing.B) Pair {
	q, err := StartQUIC(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := q.Close(); err != nil {
			b.Error(err)
		}
	})
	return q
}

func benchRoundTrip(b *testing.B, start func(*testing.B) Pair) {
	for _, size := range DefaultSizes {
		b.Run(strings.ReplaceAll(FormatSize(size), " ", ""), func(b *testing.B) {
			ctx := context.Background()
			p := start(b)
			if _, err := p.RoundTrips(ctx, size, 20, 0); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(2 * size))
			b.ResetTimer()
			cpu := processCPU()
			rtts, err := p.RoundTrips(ctx, size, b.N, 0)
			cpu = processCPU() - cpu
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(micros(Median(rtts))/2, "oneway-µs")
			// The CPU time of both ends per round trip: on a shared
			// machine it moves less with the load than the time does.
			b.ReportMetric(micros(cpu)/float64(b.N), "cpu-µs/op")
		})
	}
}

// startRemoteSmallBulk is startRemote with small messages on the bulk
// lane too (daemon.Config.BulkSmall), as with `dpvm bench pingpong
// --small-bulk`.
func startRemoteSmallBulk(b *testing.B) Pair {
	return startConfigured(b, ModeRemote, daemon.Config{BulkSmall: true})
}

func BenchmarkRemoteRoundTrip(b *testing.B)          { benchRoundTrip(b, startRemote) }
func BenchmarkRemoteSmallBulkRoundTrip(b *testing.B) { benchRoundTrip(b, startRemoteSmallBulk) }
func BenchmarkRemoteSmallBulkStream(b *testing.B)    { benchStream(b, startRemoteSmallBulk) }
func BenchmarkRemoteNoBulkRoundTrip(b *testing.B)    { benchRoundTrip(b, startRemoteNoBulk) }
func BenchmarkLocalRoundTrip(b *testing.B)           { benchRoundTrip(b, startLocal) }
func BenchmarkQUICRoundTrip(b *testing.B)            { benchRoundTrip(b, startQUIC) }

func benchStream(b *testing.B, start func(*testing.B) Pair) {
	ctx := context.Background()
	p := start(b)
	if _, err := p.Stream(ctx, 10000, 4096, time.Minute); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu := processCPU()
	st, err := p.Stream(ctx, b.N, 65536, time.Hour)
	cpu = processCPU() - cpu
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(st.Rate(), "msgs/s")
	// The CPU time of both ends per message: on a shared machine it moves
	// less with the load than the rate does.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/msg")
}

func BenchmarkRemoteStream(b *testing.B) { benchStream(b, startRemote) }
func BenchmarkLocalStream(b *testing.B)  { benchStream(b, startLocal) }
func BenchmarkQUICStream(b *testing.B)   { benchStream(b, startQUIC) }

func benchSpawn(b *testing.B, mode string) {
	ctx := context.Background()
	p := startTasks(b, mode).(*TaskPair)
	if _, err := p.Spawn(ctx, SpawnTasks); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for b.Loop() {
		if _, err := p.Spawn(ctx, SpawnTasks); err != nil {
			b.Fatal(err)
		}
	}
	cpu = processCPU() - cpu
	b.ReportMetric(float64(b.Elapsed())/float64(b.N)/1e6, "ms/spawn32")
	// The CPU time of a spawn of 32, the tasks' start and end included:
	// on a shared machine it moves less with the load than the time does.
	b.ReportMetric(micros(cpu)/float64(b.N), "cpu-µs/spawn32")
}

func BenchmarkRemoteSpawn32(b *testing.B) { benchSpawn(b, ModeRemote) }
func BenchmarkLocalSpawn32(b *testing.B)  { benchSpawn(b, ModeLocal) }

func benchBarrier(b *testing.B, mode string) {
	p := startTasks(b, mode).(*TaskPair)
	b.ResetTimer()
	per, err := p.Barrier(context.Background(), BarrierTasks, 10, b.N)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(micros(per), "µs/barrier")
}

func BenchmarkRemoteBarrier8(b *testing.B) { benchBarrier(b, ModeRemote) }
func BenchmarkLocalBarrier8(b *testing.B)  { benchBarrier(b, ModeLocal) }
