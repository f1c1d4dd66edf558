package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/dpvm/dpvm/task"
)

// tagSelf is the tag of the messages BenchmarkLocalSelf's task sends to
// itself.
const tagSelf = 100

// selfBatch is how many messages BenchmarkLocalSelf's task sends itself
// before it receives them.
const selfBatch = 64

// BenchmarkLocalSelf times one Send and one Recv of an 8 B message by a
// task to itself, each with a WithContext option made at the call, on one
// goroutine: the cost of the calls through the task API, the daemon's
// local path and the mailbox, without a goroutine switch or a second core.
// ns/op, cpu-ns/op and allocs/op are per message (its payload's copy is
// the one allocation).
func BenchmarkLocalSelf(b *testing.B) {
	ctx := context.Background()
	p := startLocal(b).(*TaskPair)
	b.ReportAllocs()
	err := p.do(ctx, func(ctx context.Context, c *task.Ctx, _ task.TID) error {
		self := c.MyTID()
		var msg any = make([]byte, RateSize)
		b.ResetTimer()
		cpu := processCPU()
		for sent := 0; sent < b.N; {
			n := min(selfBatch, b.N-sent)
			for range n {
				if err := c.Send(self, tagSelf, msg, task.WithContext(ctx)); err != nil {
					return err
				}
			}
			for range n {
				m, err := c.Recv(self, tagSelf, nil, task.WithContext(ctx))
				if err != nil {
					return err
				}
				if m.Len() != RateSize {
					return fmt.Errorf("received %d bytes, sent %d: %w", m.Len(), RateSize, ErrEcho)
				}
			}
			sent += n
		}
		b.StopTimer()
		// The process's CPU time per message: on a shared machine it
		// moves less with the load than the time does.
		b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
