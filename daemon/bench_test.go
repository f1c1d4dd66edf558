package daemon

import (
	"fmt"
	"testing"

	"github.com/dpvm/dpvm/task"
)

// BenchmarkRoundTrip measures a Send/Recv round trip between two tasks on
// one daemon, for several message sizes. ns/op is one round trip; the
// oneway-µs metric is half of it.
func BenchmarkRoundTrip(b *testing.B) {
	for _, size := range []int{8, 1 << 10, 64 << 10, 1 << 20} {
		b.Run(sizeName(size), func(b *testing.B) {
			d, _ := newTestDaemon(b)
			echo := fn(b, func(c *task.Ctx, _ int) error {
				var buf []byte
				for {
					st, err := c.Recv(task.AnyTask, task.AnyTag, &buf)
					if err != nil {
						return err
					}
					if st.Tag == 2 {
						return nil
					}
					if err := c.Send(st.From, 1, buf); err != nil {
						return err
					}
				}
			})
			b.SetBytes(int64(2 * size))
			runRoot(b, d, func(c *task.Ctx, _ int) error {
				peer, err := c.Spawn(echo, 1)
				if err != nil {
					return err
				}
				msg := make([]byte, size)
				var in []byte
				b.ResetTimer()
				for b.Loop() {
					if err := c.Send(peer[0], 1, msg); err != nil {
						return err
					}
					if _, err := c.Recv(peer[0], 1, &in); err != nil {
						return err
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2e3, "oneway-µs")
				return c.Send(peer[0], 2, nil)
			})
		})
	}
}

// BenchmarkThroughput measures how many small messages per second one task
// streams to another on one daemon; the receiver acknowledges every 1024
// messages so the queue stays bounded.
func BenchmarkThroughput(b *testing.B) {
	const window = 1024
	d, _ := newTestDaemon(b)
	sink := fn(b, func(c *task.Ctx, n int) error {
		var buf []byte
		for i := 1; i <= n; i++ {
			if _, err := c.Recv(c.Parent(), 1, &buf); err != nil {
				return err
			}
			if i%window == 0 || i == n {
				if err := c.Send(c.Parent(), 2, nil); err != nil {
					return err
				}
			}
		}
		return nil
	})
	runRoot(b, d, func(c *task.Ctx, _ int) error {
		sink.Arg = b.N
		peer, err := c.Spawn(sink, 1)
		if err != nil {
			return err
		}
		msg := make([]byte, 8)
		b.ResetTimer()
		for i := 1; i <= b.N; i++ {
			if err := c.Send(peer[0], 1, msg); err != nil {
				return err
			}
			if i%window == 0 || i == b.N {
				if _, err := c.Recv(peer[0], 2, nil); err != nil {
					return err
				}
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		return nil
	})
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
