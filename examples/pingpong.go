package examples

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/dpvm/dpvm/task"
)

// Ping is the root task of the pingpong program: it sends N messages of
// Size bytes to a partner, which echoes each back, checks every echo and
// reports the mean round-trip time.
type Ping struct {
	N       int `flag:"n,number of round trips" min:"1"`
	Size    int `flag:"size,message size in bytes" min:"0"`
	I       int
	Partner task.TID
	Start   time.Time
	Elapsed time.Duration // time spent in completed runs of Run
	// Waiting says round trip I's ping is sent and its echo awaited (at a
	// safe point: the task may be checkpointed or moved there).
	Waiting bool
}

// Pong echoes every message back to its sender until told to stop.
type Pong struct {
	Echoed int
}

// Message tags of the pingpong program.
const (
	pingTag  = 2
	pongTag  = 3
	pingDone = 6
)

func init() {
	task.Register("examples.ping", &Ping{})
	task.Register("examples.pong", &Pong{})
	task.RegisterProgram(task.Program{
		Name:    "pingpong",
		Summary: "two tasks bounce a message back and forth and time the round trips",
		Proto:   &Ping{N: 1000, Size: 8},
	})
}

// pattern is the content of round trip i: every byte names i, so an echo of
// the wrong message or a corrupted one is noticed.
func pattern(buf []byte, i int) []byte {
	buf = buf[:0]
	for j := range cap(buf) {
		buf = append(buf, byte(i+j))
	}
	return buf
}

// Run spawns the partner (once) and does the remaining round trips.
func (p *Ping) Run(c *task.Ctx) error {
	if p.Partner.IsZero() {
		tids, err := c.Spawn(&Pong{}, 1)
		if err != nil {
			return err
		}
		p.Partner = tids[0]
	}
	start := time.Now()
	out := make([]byte, 0, p.Size)
	var in []byte
	for ; p.I < p.N; p.I++ {
		out = pattern(out, p.I)
		if !p.Waiting {
			if err := c.Send(p.Partner, pingTag, out); err != nil {
				return err
			}
			p.Waiting = true
		}
		if _, err := c.Recv(p.Partner, pongTag, &in, task.Safe()); err != nil {
			if errors.Is(err, task.ErrSuspended) {
				p.Elapsed += time.Since(start)
			}
			return err
		}
		p.Waiting = false
		if !bytes.Equal(in, out) {
			return fmt.Errorf("round trip %d: echo differs from what was sent", p.I)
		}
		if err := c.SafePoint(); err != nil {
			p.I++ // this round trip is complete
			p.Elapsed += time.Since(start)
			return err
		}
	}
	p.Elapsed += time.Since(start)
	if err := c.Send(p.Partner, pingDone, nil); err != nil {
		return err
	}
	c.Printf("pingpong: %d round trips of %d B verified, mean round trip %.2f µs",
		p.N, p.Size, float64(p.Elapsed.Nanoseconds())/1e3/float64(p.N))
	return nil
}

// Run echoes messages until the stop message arrives.
func (p *Pong) Run(c *task.Ctx) error {
	var buf []byte
	for {
		st, err := c.Recv(task.AnyTask, task.AnyTag, &buf, task.Safe())
		if err != nil {
			return err
		}
		if st.Tag == pingDone {
			return nil
		}
		if err := c.Send(st.From, pongTag, buf); err != nil {
			return err
		}
		p.Echoed++
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
}
