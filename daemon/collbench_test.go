package daemon

import (
	"fmt"
	"testing"

	"github.com/dpvm/dpvm/task"
)

// collBench is one collective with the exchange a program would write by
// hand for it: the same messages, sent with Send and received with Recv.
type collBench struct {
	name       string
	coll, hand func(c *task.Ctx, m *task.Comm, data []float64) error
}

const tagHand = 1

// handRecv receives a []float64 from rank r into buf.
func handRecv(c *task.Ctx, m *task.Comm, r int, buf *[]float64) error {
	_, err := c.Recv(m.TID(r), tagHand, buf)
	return err
}

var collBenches = []collBench{
	{"allgather",
		func(c *task.Ctx, m *task.Comm, data []float64) error {
			_, err := task.Allgather(c, m, data)
			return err
		},
		func(c *task.Ctx, m *task.Comm, data []float64) error {
			for r := range m.Size() {
				if r != m.Rank {
					if err := c.Send(m.TID(r), tagHand, data); err != nil {
						return err
					}
				}
			}
			out := make([]float64, 0, len(data)*m.Size())
			var in []float64
			for r := range m.Size() {
				if r == m.Rank {
					out = append(out, data...)
					continue
				}
				if err := handRecv(c, m, r, &in); err != nil {
					return err
				}
				out = append(out, in...)
			}
			if len(out) != len(data)*m.Size() {
				return fmt.Errorf("gathered %d elements", len(out))
			}
			return nil
		}},
	{"alltoall",
		func(c *task.Ctx, m *task.Comm, data []float64) error {
			_, err := task.Alltoall(c, m, data)
			return err
		},
		func(c *task.Ctx, m *task.Comm, data []float64) error {
			k := len(data) / m.Size()
			for r := range m.Size() {
				if r != m.Rank {
					if err := c.Send(m.TID(r), tagHand, data[r*k:(r+1)*k]); err != nil {
						return err
					}
				}
			}
			out := make([]float64, 0, len(data))
			var in []float64
			for r := range m.Size() {
				if r == m.Rank {
					out = append(out, data[r*k:(r+1)*k]...)
					continue
				}
				if err := handRecv(c, m, r, &in); err != nil {
					return err
				}
				out = append(out, in...)
			}
			if len(out) != len(data) {
				return fmt.Errorf("received %d elements", len(out))
			}
			return nil
		}},
	{"reduce",
		func(c *task.Ctx, m *task.Comm, data []float64) error {
			return task.Reduce(c, m, task.Sum[float64], data, 0)
		},
		func(c *task.Ctx, m *task.Comm, data []float64) error {
			if m.Rank != 0 {
				return c.Send(m.TID(0), tagHand, data)
			}
			var in []float64
			for r := 1; r < m.Size(); r++ {
				if err := handRecv(c, m, r, &in); err != nil {
					return err
				}
				task.Sum(data, in)
			}
			return nil
		}},
	{"scan",
		func(c *task.Ctx, m *task.Comm, data []float64) error {
			return task.Scan(c, m, task.Sum[float64], data)
		},
		func(c *task.Ctx, m *task.Comm, data []float64) error {
			if m.Rank > 0 {
				var in []float64
				if err := handRecv(c, m, m.Rank-1, &in); err != nil {
					return err
				}
				task.Sum(in, data)
				copy(data, in)
			}
			if m.Rank+1 < m.Size() {
				return c.Send(m.TID(m.Rank+1), tagHand, data)
			}
			return nil
		}},
	{"reduce-scatter",
		func(c *task.Ctx, m *task.Comm, data []float64) error {
			_, err := task.ReduceScatter(c, m, task.Sum[float64], data, nil)
			return err
		},
		func(c *task.Ctx, m *task.Comm, data []float64) error {
			k := len(data) / m.Size()
			for r := range m.Size() {
				if r != m.Rank {
					if err := c.Send(m.TID(r), tagHand, data[r*k:(r+1)*k]); err != nil {
						return err
					}
				}
			}
			acc := append([]float64(nil), data[m.Rank*k:(m.Rank+1)*k]...)
			var in []float64
			for r := range m.Size() {
				if r == m.Rank {
					continue
				}
				if err := handRecv(c, m, r, &in); err != nil {
					return err
				}
				task.Sum(acc, in)
			}
			return nil
		}},
	{"isend-irecv ring",
		func(c *task.Ctx, m *task.Comm, data []float64) error {
			n := m.Size()
			var in []float64
			rr, err := m.Irecv(c, (m.Rank-1+n)%n, 0, &in)
			if err != nil {
				return err
			}
			rs, err := m.Isend(c, (m.Rank+1)%n, 0, data)
			if err != nil {
				return err
			}
			return m.Waitall(c, rr, rs)
		},
		func(c *task.Ctx, m *task.Comm, data []float64) error {
			n := m.Size()
			if err := c.Send(m.TID((m.Rank+1)%n), tagHand, data); err != nil {
				return err
			}
			var in []float64
			return handRecv(c, m, (m.Rank-1+n)%n, &in)
		}},
}

// BenchmarkCollectives runs each numeric collective on 4 members and 1024
// float64s beside its hand-written exchange (the same messages by Send and
// Recv), a SafePoint after each call in both:
//
//	go test -run XXX -bench Collectives -benchtime 1000x -benchmem ./daemon/
func BenchmarkCollectives(b *testing.B) {
	const members, length = 4, 1024
	for _, k := range collBenches {
		for _, hand := range []bool{false, true} {
			body, name := k.coll, k.name+"/collective"
			if hand {
				body, name = k.hand, k.name+"/hand"
			}
			b.Run(name, func(b *testing.B) {
				d, _ := newTestDaemon(b)
				loop := func(c *task.Ctx, m *task.Comm, n int) error {
					data := make([]float64, length)
					for range n {
						for i := range data {
							data[i] = float64(m.Rank + i)
						}
						if err := body(c, m, data); err != nil {
							return err
						}
						if err := c.SafePoint(); err != nil {
							return err
						}
					}
					return nil
				}
				worker := fn(b, func(c *task.Ctx, n int) error {
					var m task.Comm
					if err := c.JoinComm(&m); err != nil {
						return err
					}
					if err := m.Barrier(c); err != nil {
						return err
					}
					return loop(c, &m, n)
				})
				worker.Arg = b.N
				runRoot(b, d, func(c *task.Ctx, _ int) error {
					var m task.Comm
					if _, err := c.Spawn(worker, members-1, task.WithComm(&m)); err != nil {
						return err
					}
					if err := m.Barrier(c); err != nil {
						return err
					}
					b.ResetTimer()
					err := loop(c, &m, b.N)
					b.StopTimer()
					if err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
					return nil
				})
			})
		}
	}
}
