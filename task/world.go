package task

import "fmt"

// worldPending is the Rank of the communicator field of a task that World
// started: its copy of the communicator is on its way from its spawner.
const worldPending = -1

// World makes *m, a field of the caller's struct, the communicator of n
// tasks running the caller's code from the caller's state, as `mpiexec -n
// n` makes MPI_COMM_WORLD: the task that calls it first (a program's root)
// spawns n-1 copies of its own state as it is at the call (ranks 1..n-1,
// placed by the runtime) and is rank 0; each copy, reaching World in its
// own Run, joins them. So an SPMD program starts every rank from the same
// Run with one call:
//
//	if err := c.World(&s.C, s.Tasks); err != nil {
//		return err
//	}
//
// World returns at once when m is already set (Run re-entered after a
// move). A copy waiting for its communicator is at a safe point. The
// copies learn that they are copies from m itself: World leaves a mark in
// it before it spawns them, so the caller must not change m before.
func (c *Ctx) World(m *Comm, n int) error {
	switch {
	case len(m.TIDs) > 0:
		c.track(m)
		return nil
	case m.Rank == worldPending:
		return c.JoinComm(m)
	case n < 1:
		return fmt.Errorf("world of %d tasks: at least 1", n)
	case c.task == nil:
		return fmt.Errorf("world of %d tasks: the caller's state is unknown to this runtime", n)
	}
	m.Rank = worldPending
	if _, err := c.Spawn(c.task, n-1, WithComm(m)); err != nil {
		*m = Comm{}
		return fmt.Errorf("world of %d tasks: %w", n, err)
	}
	return nil
}
