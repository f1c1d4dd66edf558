package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/dpvm/dpvm/task"
)

// The benchmarks below put each collective of the peer comparison beside
// the same exchange written with Send and Recv (handOnce), on two tasks
// of one daemon: ns/op is one operation, back to back, on both tasks, and
// cpu-ns/op the process's CPU time for it.
//
//	go test -run '^$' -bench 'LocalColl/allreduce/1MiB' -benchtime 200x -cpuprofile cpu.out ./daemon/bench
//	go tool pprof -top cpu.out

func init() {
	task.Register("dpvm.bench.collloop", &collLoopTask{})
}

// collLoopTask is rank 1 of collLoop's communicator.
type collLoopTask struct {
	Op, Size, Iters int
	Hand            bool
	C               task.Comm
}

func (t *collLoopTask) Run(c *task.Ctx) error {
	if err := c.JoinComm(&t.C); err != nil {
		return err
	}
	return collLoopRank(c, &t.C, t.Op, t.Size, t.Iters, t.Hand)
}

// collLoopRank runs op on size bytes per rank iters times back to back,
// each followed by a SafePoint as a program's step would be, then checks
// one more run's result, then passes a barrier.
func collLoopRank(c *task.Ctx, m *task.Comm, op, size, iters int, hand bool) error {
	n := size / 8
	buf := make([]float64, n*m.Size())
	in := collFill(op, m.Rank, m.Size(), 0, n, buf)
	for range iters {
		if _, err := collOnce(c, m, op, in, hand); err != nil {
			return err
		}
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	in = collFill(op, m.Rank, m.Size(), 1, n, buf)
	res, err := collOnce(c, m, op, in, hand)
	if err != nil {
		return err
	}
	if !collCheck(op, m.Rank, m.Size(), 1, n, res) {
		return fmt.Errorf("%s of %s: %w", PeerCollOps[op], FormatSize(size), ErrEcho)
	}
	return m.Barrier(c)
}

// collLoop has the pair's pinger and a task on the echo's host run op
// iters times (collLoopRank).
func (p *TaskPair) collLoop(ctx context.Context, op, size, iters int, hand bool) error {
	return p.do(ctx, func(ctx context.Context, c *task.Ctx, _ task.TID) error {
		var m task.Comm
		proto := &collLoopTask{Op: op, Size: size, Iters: iters, Hand: hand}
		if _, err := c.Spawn(proto, 1, task.WithComm(&m), p.root.place); err != nil {
			return err
		}
		return collLoopRank(c, &m, op, size, iters, hand)
	})
}

func benchColl(b *testing.B, mode string) {
	p := startTasks(b, mode).(*TaskPair)
	for op, name := range PeerCollOps {
		for _, size := range peerCollSizes {
			for _, hand := range []bool{false, true} {
				kind := "coll"
				if hand {
					kind = "hand"
				}
				b.Run(fmt.Sprintf("%s/%s/%s", name, FormatSize(size), kind), func(b *testing.B) {
					b.ReportAllocs()
					cpu := processCPU()
					if err := p.collLoop(context.Background(), op, size, b.N, hand); err != nil {
						b.Fatal(err)
					}
					// The process's CPU time per operation, both tasks
					// together: on a shared machine it moves less with the
					// load than the time does.
					b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
				})
			}
		}
	}
}

// BenchmarkLocalColl: the collectives against hand-written exchanges on
// one daemon.
func BenchmarkLocalColl(b *testing.B) { benchColl(b, ModeLocal) }

// BenchmarkRemoteColl: the same between two daemons.
func BenchmarkRemoteColl(b *testing.B) { benchColl(b, ModeRemote) }

// TestCollOnceMatchesHand: every collective of the peer comparison and
// its hand-written twin give the expected result on two tasks, at every
// size, over a few iterations.
func TestCollOnceMatchesHand(t *testing.T) {
	p, err := StartTasks(context.Background(), ModeLocal)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}()
	for op, name := range PeerCollOps {
		for _, size := range peerCollSizes {
			for _, hand := range []bool{false, true} {
				if err := p.collLoop(context.Background(), op, size, 3, hand); err != nil {
					t.Errorf("%s of %s (hand-written %v): %v", name, FormatSize(size), hand, err)
				}
			}
		}
	}
}
