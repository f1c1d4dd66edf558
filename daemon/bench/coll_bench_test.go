package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/dpvm/dpvm/task"
)

// The benchmarks below put each collective of the peer comparison beside
// the same exchange written with Send and Recv (handOnce: "hand", and
// "hand-safe" with receives that are safe points, as the collective's
// are), on two tasks of one daemon (Local) or one on each of two
// (Remote): ns/op is one operation, back to back, on both tasks, and
// cpu-ns/op the process's CPU time for it.
//
//	go test -run '^$' -bench 'LocalColl/allreduce/1_MiB' -benchtime 200x -cpuprofile cpu.out ./daemon/bench
//	go tool pprof -top cpu.out

func init() {
	task.Register("dpvm.bench.collloop", &collLoopTask{})
}

// collLoopTask is a member of collLoop's communicator of two: the lead
// (rank 0) spawns the other on Host, and both run collLoopRank; the lead
// then tells its parent. Fresh tasks, so that neither carries the
// communicators of earlier runs (a task's safe points visit every
// communicator it has used).
type collLoopTask struct {
	Op, Size, Iters, Via int
	Lead                 bool
	Host                 string
	C                    task.Comm
}

// tagCollLoopDone is the lead's word to its parent: the loop is over.
const tagCollLoopDone = 30

func (t *collLoopTask) Run(c *task.Ctx) error {
	if t.Lead {
		member := *t
		member.Lead = false
		if _, err := c.Spawn(&member, 1, task.WithComm(&t.C), task.OnHost(t.Host)); err != nil {
			return err
		}
	} else if err := c.JoinComm(&t.C); err != nil {
		return err
	}
	err := collLoopRank(c, &t.C, t.Op, t.Size, t.Iters, t.Via)
	if t.Lead {
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		return c.Send(c.Parent(), tagCollLoopDone, msg)
	}
	return err
}

// collLoopRank runs op on size bytes per rank iters times back to back,
// each followed by a SafePoint as a program's step would be, then checks
// one more run's result, then passes a barrier.
func collLoopRank(c *task.Ctx, m *task.Comm, op, size, iters, via int) error {
	n := size / 8
	buf := make([]float64, n*m.Size())
	in := collFill(op, m.Rank, m.Size(), 0, n, buf)
	for range iters {
		if _, err := collOnce(c, m, op, in, via); err != nil {
			return err
		}
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	in = collFill(op, m.Rank, m.Size(), 1, n, buf)
	res, err := collOnce(c, m, op, in, via)
	if err != nil {
		return err
	}
	if !collCheck(op, m.Rank, m.Size(), 1, n, res) {
		return fmt.Errorf("%s of %s: %w", PeerCollOps[op], FormatSize(size), ErrEcho)
	}
	return m.Barrier(c)
}

// collLoop runs op iters times on a lead task on the pinger's host and a
// member on the echo's (collLoopTask) and returns the lead's error.
func (p *TaskPair) collLoop(ctx context.Context, op, size, iters, via int) error {
	return p.do(ctx, func(ctx context.Context, c *task.Ctx, _ task.TID) error {
		lead := &collLoopTask{Op: op, Size: size, Iters: iters, Via: via, Lead: true, Host: p.PeerHost}
		tids, err := c.Spawn(lead, 1, task.Here())
		if err != nil {
			return err
		}
		var msg string
		if _, err := c.Recv(tids[0], tagCollLoopDone, &msg, task.WithContext(ctx)); err != nil {
			return err
		}
		if msg != "" {
			return errors.New(msg)
		}
		return nil
	})
}

// viaNames name collOnce's ways in the benchmarks' names.
var viaNames = []string{viaColl: "coll", viaHand: "hand", viaHandSafe: "hand-safe"}

func benchColl(b *testing.B, mode string) {
	p := startTasks(b, mode).(*TaskPair)
	for op, name := range PeerCollOps {
		for _, size := range peerCollSizes {
			for via, kind := range viaNames {
				b.Run(fmt.Sprintf("%s/%s/%s", name, FormatSize(size), kind), func(b *testing.B) {
					b.ReportAllocs()
					cpu := processCPU()
					if err := p.collLoop(context.Background(), op, size, b.N, via); err != nil {
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
			for via, kind := range viaNames {
				if err := p.collLoop(context.Background(), op, size, 3, via); err != nil {
					t.Errorf("%s of %s (%s): %v", name, FormatSize(size), kind, err)
				}
			}
		}
	}
}
