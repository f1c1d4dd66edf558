package examples

import (
	"fmt"

	"github.com/dpvm/dpvm/task"
)

// Ring is the root task of the ring program: it spawns N ring members as a
// team (ranks 0..N-1, each passing to the next rank) and waits for the
// token to come back after K laps. Every hop adds one to the token, so it
// must return as N·K.
type Ring struct {
	N       int `flag:"n,number of tasks in the ring" min:"1"`
	Laps    int `flag:"laps,laps the token makes" min:"1"`
	Members []task.TID
	Result  int
}

// RingMember passes the token to its successor, the next rank. Rank 0
// starts each lap and, after the last, hands the token to the root.
type RingMember struct {
	C         task.Comm
	Laps, Lap int
}

// Message tags of the ring program.
const (
	ringToken = 5
	ringDone  = 6
)

func init() {
	task.Register("examples.ring", &Ring{})
	task.Register("examples.ring.member", &RingMember{})
	task.RegisterProgram(task.Program{
		Name:    "ring",
		Summary: "a token goes K laps around a ring of N tasks",
		Proto:   &Ring{N: 4, Laps: 3},
	})
}

// Run builds the ring (once) and waits for the token.
func (r *Ring) Run(c *task.Ctx) error {
	if r.Members == nil {
		tids, err := c.Spawn(&RingMember{Laps: r.Laps}, r.N, task.Team())
		if err != nil {
			return err
		}
		r.Members = tids
	}
	if _, err := c.Recv(r.Members[0], ringDone, &r.Result, task.Safe()); err != nil {
		return err
	}
	if want := r.N * r.Laps; r.Result != want {
		return fmt.Errorf("ring: token came back as %d, want %d", r.Result, want)
	}
	c.Printf("ring: token made %d laps around %d tasks: %d hops", r.Laps, r.N, r.Result)
	return nil
}

// Run passes the token on until the laps are done.
func (m *RingMember) Run(c *task.Ctx) error {
	if m.C.Size() == 0 { // once: a move re-enters Run with C set
		if err := c.JoinComm(&m.C); err != nil {
			return err
		}
		if m.C.Rank == 0 {
			if err := c.Send(m.C.TID(1%m.C.Size()), ringToken, 1); err != nil {
				return err
			}
		}
	}
	next := m.C.TID((m.C.Rank + 1) % m.C.Size())
	for m.Lap < m.Laps {
		var token int
		if _, err := c.Recv(task.AnyTask, ringToken, &token, task.Safe()); err != nil {
			return err
		}
		m.Lap++
		switch {
		case m.C.Rank != 0:
			token++
			if err := c.Send(next, ringToken, token); err != nil {
				return err
			}
		case m.Lap == m.Laps:
			if err := c.Send(c.Parent(), ringDone, token); err != nil {
				return err
			}
		default:
			token++
			if err := c.Send(next, ringToken, token); err != nil {
				return err
			}
		}
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	return nil
}
