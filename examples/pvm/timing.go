package pvm

import (
	"flag"
	"fmt"
	"time"

	"github.com/dpvm/dpvm/task"
)

// Port of PVM 3.4's examples/timing.c and examples/timing_slave.c.
//
// timing.c packs its messages with PvmDataRaw; the port encodes them with
// task.Encode ([]int32 travels raw) and sends the encoded payload, so that
// "Pack uSec" is the encoding's time and "Send uSec" the round trip's, as
// in the original. The slave runs until the master kills it.

// Timing is the root task of pvm.timing (timing.c): round-trip times for
// a minimal message, then for messages of 100 B to 1 MB.
type Timing struct {
	Reps   int      // samples per test
	Slave  task.TID // the TimingSlave, once spawned
	Ready  bool     // the slave's "ready" message received
	Phase  int      // 0: round trips; 1: bandwidths; 2: done
	N      int      // next sample, 1 … Reps
	NumInt int      // message length in int32s (bandwidth phase)
	At1    int64    // accumulated µs (round trip; pack)
	At2    int64    // accumulated µs (send)
	// Waiting: the current sample's message is on its way, so a task
	// resumed in the wait for its echo does not send it again.
	Waiting bool
}

// TimingSlave echoes every message back to its sender (timing_slave.c).
type TimingSlave struct {
	Told bool // the parent told it is ready
}

// Message tags of timing.c and timing_slave.c.
const (
	timingReadyTag = 0
	timingPingTag  = 1
	timingEchoTag  = 2
)

func init() {
	task.Register("pvm.timing", &Timing{})
	task.Register("pvm.timing_slave", &TimingSlave{})
	task.RegisterProgram(task.Program{
		Name:    "pvm.timing",
		Summary: "PVM 3.4's timing: round-trip times and bandwidths between two tasks",
		Setup: func(fs *flag.FlagSet) func([]string) (task.Task, error) {
			reps := fs.Int("reps", 20, "samples per test")
			return func([]string) (task.Task, error) {
				if *reps < 1 {
					return nil, fmt.Errorf("-reps must be at least 1, got %d", *reps)
				}
				return &Timing{Reps: *reps}, nil
			}
		},
	})
}

// Run measures, printing each sample, and kills the slave at the end.
func (t *Timing) Run(c *task.Ctx) error {
	if t.Slave.IsZero() {
		c.Printf("i'm %v", c.MyTID())
		tids, err := c.Spawn(&TimingSlave{}, 1)
		if err != nil {
			c.Printf("can't initiate slave")
			return err
		}
		t.Slave = tids[0]
	}
	if !t.Ready {
		if _, err := c.Recv(t.Slave, timingReadyTag, nil, task.Safe()); err != nil {
			return err
		}
		t.Ready = true
		c.Printf("slave is task %v", t.Slave)
		c.Printf("Doing Round Trip test, minimal message size\n\n N     uSec")
		t.N = 1
	}
	if t.Phase == 0 {
		ping, err := task.Encode([]int32{int32(t.Slave.Num())})
		if err != nil {
			return err
		}
		for ; t.N <= t.Reps; t.N++ {
			dt, err := t.roundTrip(c, ping)
			if err != nil {
				return err
			}
			c.Printf("%2d %8d", t.N, dt)
			t.At1 += dt
		}
		c.Printf("RTT Avg uSec %d", t.At1/int64(t.Reps))
		c.Printf("\nDoing Bandwidth tests\n\n")
		t.Phase, t.NumInt, t.N, t.At1, t.At2 = 1, 25, 1, 0, 0
	}
	for ; t.Phase == 1 && t.NumInt < 1000000; t.NumInt *= 10 {
		if t.N == 1 {
			c.Printf("\nMessage size %d\n N  Pack uSec  Send uSec", t.NumInt*4)
		}
		iarray := make([]int32, t.NumInt)
		for ; t.N <= t.Reps; t.N++ {
			t0 := time.Now()
			p, err := task.Encode(iarray)
			if err != nil {
				return err
			}
			dt1 := time.Since(t0).Microseconds()
			dt2, err := t.roundTrip(c, p)
			if err != nil {
				return err
			}
			c.Printf("%2d   %8d   %8d", t.N, dt1, dt2)
			t.At1 += dt1
			t.At2 += dt2
		}
		at1, at2 := max(t.At1/int64(t.Reps), 1), max(t.At2/int64(t.Reps), 1)
		c.Printf("Avg uSec\n     %8d   %8d", at1, at2)
		c.Printf("Avg Byte/uSec\n     %8f   %8f",
			float64(t.NumInt*4)/float64(at1), float64(t.NumInt*4)/float64(at2))
		t.N, t.At1, t.At2 = 1, 0, 0
	}
	if t.Phase == 1 {
		c.Printf("\ndone")
		t.Phase = 2
	}
	return c.Kill(t.Slave)
}

// roundTrip sends p to the slave, waits for the echo and returns the time
// taken in µs. A task resumed in the wait only waits: its time then counts
// from the resumption.
func (t *Timing) roundTrip(c *task.Ctx, p task.Payload) (int64, error) {
	t0 := time.Now()
	if !t.Waiting {
		if err := c.Send(t.Slave, timingPingTag, p); err != nil {
			return 0, fmt.Errorf("can't send to %q: %w", "timing_slave", err)
		}
		t.Waiting = true
	}
	if _, err := c.Recv(task.AnyTask, task.AnyTag, nil, task.Safe()); err != nil {
		return 0, err
	}
	t.Waiting = false
	return time.Since(t0).Microseconds(), nil
}

// Run tells the parent it is ready, then echoes every message back to its
// sender with its own TID.
func (s *TimingSlave) Run(c *task.Ctx) error {
	if !s.Told {
		if err := c.Send(c.Parent(), timingReadyTag, nil); err != nil {
			return err
		}
		s.Told = true
	}
	me := []int32{int32(c.MyTID().Num())}
	for {
		st, err := c.Recv(task.AnyTask, task.AnyTag, nil, task.Safe())
		if err != nil {
			return err
		}
		if err := c.Send(st.From, timingEchoTag, me); err != nil {
			return err
		}
	}
}
