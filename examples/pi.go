package examples

import (
	"flag"
	"fmt"
	"math"

	"github.com/dpvm/dpvm/task"
)

// Pi is the root task of the pi program: a master/worker Monte Carlo
// estimate of π. The samples form one numbered stream, split into
// contiguous ranges among the workers, so the estimate is the same for any
// number of workers. The hits are combined with a group Reduce.
type Pi struct {
	Workers int
	Samples int64
	Started bool
	Joined  int // workers that have joined the group
	Ready   int // workers that have counted their samples
	Hits    int64
	Done    bool
}

// PiWorker counts the samples in [Lo, Hi) that fall inside the unit circle.
type PiWorker struct {
	Lo, Hi int64
	Next   int64 // next sample to draw
	Hits   int64
	Joined bool
	Ready  bool // told the master its samples are counted
}

const piGroup = "examples.pi"

// piBatch is how many samples a worker draws between safe points.
const piBatch = 1 << 14

func init() {
	task.Register("examples.pi", &Pi{})
	task.Register("examples.pi.worker", &PiWorker{})
	task.RegisterProgram(task.Program{
		Name:    "pi",
		Summary: "master/worker Monte Carlo estimate of π with a reduce",
		Setup: func(fs *flag.FlagSet) func([]string) (task.Task, error) {
			w := fs.Int("workers", 4, "number of worker tasks")
			s := fs.Int64("samples", 4_000_000, "number of random points")
			return func([]string) (task.Task, error) {
				if *w < 1 || *s < 1 {
					return nil, fmt.Errorf("need -workers >= 1 and -samples >= 1, got %d and %d", *w, *s)
				}
				return &Pi{Workers: *w, Samples: *s}, nil
			}
		},
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

// Run starts the workers (once), joins the group as instance 0 and reduces
// the workers' hits.
func (p *Pi) Run(c *task.Ctx) error {
	if !p.Started {
		if inst, err := c.Join(piGroup); err != nil {
			return err
		} else if inst != 0 {
			return fmt.Errorf("pi: master joined as instance %d, want 0", inst)
		}
		per := p.Samples / int64(p.Workers)
		for w := range int64(p.Workers) {
			lo, hi := w*per, (w+1)*per
			if w == int64(p.Workers)-1 {
				hi = p.Samples
			}
			if _, err := c.Spawn(&PiWorker{Lo: lo, Hi: hi, Next: lo}, 1); err != nil {
				return err
			}
		}
		p.Started = true
	}
	// The reduce needs every worker in the group: wait until they have all
	// joined, and then until they have counted their samples, at safe
	// points (a job checkpoint or a move may come meanwhile), so that the
	// reduce itself does not wait long.
	for p.Joined < p.Workers {
		if _, err := c.RecvSafe(task.AnyTask, tagSetup, nil); err != nil {
			return err
		}
		p.Joined++
	}
	for p.Ready < p.Workers {
		if _, err := c.RecvSafe(task.AnyTask, tagReady, nil); err != nil {
			return err
		}
		p.Ready++
	}
	if !p.Done {
		hits := []int64{0}
		if err := task.Reduce(c, task.Sum[int64], hits, piGroup, tagHits, 0); err != nil {
			return err
		}
		p.Hits, p.Done = hits[0], true
	}
	if err := c.Bcast(piGroup, tagExit, nil); err != nil {
		return err
	}
	est := 4 * float64(p.Hits) / float64(p.Samples)
	c.Printf("pi: %d samples on %d workers: %d hits, π ≈ %.6f (error %.2e)",
		p.Samples, p.Workers, p.Hits, est, math.Abs(est-math.Pi))
	return nil
}

// Run joins the group (once), counts its hits, contributes them to the
// reduce and waits for the master's go-ahead to exit, so the group stays
// whole until the reduce is complete.
func (w *PiWorker) Run(c *task.Ctx) error {
	if !w.Joined {
		if _, err := c.Join(piGroup); err != nil {
			return err
		}
		w.Joined = true
		if err := c.Send(c.Parent(), tagSetup, nil); err != nil {
			return err
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
	if !w.Ready {
		if err := c.Send(c.Parent(), tagReady, nil); err != nil {
			return err
		}
		w.Ready = true
	}
	if err := task.Reduce(c, task.Sum[int64], []int64{w.Hits}, piGroup, tagHits, 0); err != nil {
		return err
	}
	_, err := c.RecvSafe(c.Parent(), tagExit, nil)
	return err
}
