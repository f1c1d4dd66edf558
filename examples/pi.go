package examples

import (
	"math"

	"github.com/dpvm/dpvm/task"
)

// Pi is the root task of the pi program: a master/worker Monte Carlo
// estimate of π. The samples form one numbered stream, split into
// contiguous ranges among the workers by their rank, so the estimate is the
// same for any number of workers. The root (rank 0 of the communicator)
// and the workers sum the hits with an all-reduce.
type Pi struct {
	Workers int   `flag:"workers,number of worker tasks" min:"1"`
	Samples int64 `flag:"samples,number of random points" min:"1"`
	C       task.Comm
}

// PiWorker counts the samples in [Lo, Hi) that fall inside the unit
// circle; spawned by Pi, it takes its range from its rank.
type PiWorker struct {
	C       task.Comm
	Samples int64
	Lo, Hi  int64
	Next    int64 // next sample to draw
	Hits    int64
}

// piBatch is how many samples a worker draws between safe points.
const piBatch = 1 << 14

func init() {
	task.Register("examples.pi", &Pi{})
	task.Register("examples.pi.worker", &PiWorker{})
	task.RegisterProgram(task.Program{
		Name:    "pi",
		Summary: "master/worker Monte Carlo estimate of π with an all-reduce",
		Proto:   &Pi{Workers: 4, Samples: 4_000_000},
	})
}

// PiSample reports whether sample i of the stream falls inside the unit
// circle. Each sample's coordinates come from a SplitMix64 hash of its
// number, so any range of the stream can be drawn independently.
func PiSample(i int64) bool {
	x := float64(splitmix64(uint64(2*i))>>11) / (1 << 53)
	y := float64(splitmix64(uint64(2*i+1))>>11) / (1 << 53)
	return x*x+y*y < 1
}

func splitmix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Run starts the workers (once), then waits in the all-reduce of the
// hits, a safe point, so a move or job checkpoint may come meanwhile.
func (p *Pi) Run(c *task.Ctx) error {
	if p.C.Size() == 0 {
		if _, err := c.Spawn(&PiWorker{Samples: p.Samples}, p.Workers, task.WithComm(&p.C)); err != nil {
			return err
		}
	}
	hits := []int64{0}
	if err := task.AllReduce(c, &p.C, task.Sum[int64], hits); err != nil {
		return err
	}
	est := 4 * float64(hits[0]) / float64(p.Samples)
	c.Printf("pi: %d samples on %d workers: %d hits, π ≈ %.6f (error %.2e)",
		p.Samples, p.Workers, hits[0], est, math.Abs(est-math.Pi))
	return nil
}

// Run takes its range from its rank (once), counts its hits with a safe
// point every batch, and contributes them to the all-reduce.
func (w *PiWorker) Run(c *task.Ctx) error {
	if err := c.JoinComm(&w.C); err != nil {
		return err
	}
	if w.Hi == 0 {
		workers, i := int64(w.C.Size()-1), int64(w.C.Rank-1)
		per := w.Samples / workers
		w.Lo, w.Hi, w.Next = i*per, (i+1)*per, i*per
		if i == workers-1 {
			w.Hi = w.Samples
		}
	}
	for w.Next < w.Hi {
		end := min(w.Next+piBatch, w.Hi)
		for i := w.Next; i < end; i++ {
			if PiSample(i) {
				w.Hits++
			}
		}
		w.Next = end
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	return task.AllReduce(c, &w.C, task.Sum[int64], []int64{w.Hits})
}
