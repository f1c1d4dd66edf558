package daemon

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// pairSender sends To the numbers from Next on, a safe point after each,
// and tells its parent (tag 6) each time it has sent Every more, until its
// parent tells it to stop (tag 5); it then tells its parent (tag 4) how
// many it sent. Its numbering lives in its fields, so it goes on where it
// was after a move.
type pairSender struct {
	To          task.TID
	Next, Every int
}

func init() { task.Register("daemon.test.pairSender", &pairSender{}) }

func (s *pairSender) Run(c *task.Ctx) error {
	for {
		_, stop, err := c.TryRecv(c.Parent(), 5, nil)
		if err != nil {
			return err
		}
		if stop {
			return c.Send(c.Parent(), 4, s.Next)
		}
		if err := c.Send(s.To, 1, s.Next); err != nil {
			return err
		}
		s.Next++
		if s.Next%s.Every == 0 {
			if err := c.Send(c.Parent(), 6, s.Next); err != nil {
				return err
			}
		}
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
}

// TestLocalPairAcrossMoves: a sender and a receiver (a mover) that start on
// one host, where each message between them takes the local path that
// keeps the pair's counters, are moved in turn so that they are on one
// host and on two by turns while the sender sends, over
// the in-memory network with frames lost, delayed and swapped. The
// receiver gets every number once, in order: the pair's numbering
// continues across the local and the remote path and the moves of either
// task.
func TestLocalPairAcrossMoves(t *testing.T) {
	for seed := range memSeeds(t, 3) {
		f := &faults{seed: uint64(seed), drop: 100, hold: 100, delay: 300}
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			vm := startMemVM(t, 3, f, Config{MoveTimeout: 5 * time.Second})
			moves := localPairMoves(t, vm, uint64(seed), 12)
			t.Logf("%v; %d moves committed", f, moves)
		})
	}
}

// localPairMoves runs a sender and a mover on h2 and moves one of the two
// rounds times while the sender sends, each move after the sender has
// sent another 500 numbers: the sender or the mover, to the other's host
// or away from it, as the seed says. It returns the moves that committed.
func localPairMoves(t *testing.T, vm *LocalVM, seed uint64, rounds int) (committed int) {
	t.Helper()
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		mv, err := c.Spawn(&movingTask{}, 1, task.OnHost("h2"))
		if err != nil {
			return err
		}
		s, err := c.Spawn(&pairSender{To: mv[0], Every: 500}, 1, task.OnHost("h2"))
		if err != nil {
			return err
		}
		r := seed*0x9e3779b97f4a7c15 + 1
		together := true
		for i := range rounds {
			// Each move while the sender sends: after its next 500.
			if _, err := c.Recv(s[0], 6, nil); err != nil {
				return err
			}
			r = r*6364136223846793005 + 1442695040888963407
			who, other := s[0], mv[0]
			if (r>>33)&1 == 1 {
				who, other = other, who
			}
			at := m.routeHost(other)
			to := at // join the other
			if together {
				// Leave it: any host but the other's.
				to = task.HostID(1 + int(r>>40)%3)
				if to == at {
					to = to%3 + 1
				}
			}
			_, err := m.Migrate(ctx, who, fmt.Sprintf("h%d", to), Direct)
			switch {
			case err == nil:
				committed++
				together = !together
			case errors.Is(err, ErrAborted):
				t.Logf("round %d: %v", i, err)
			default:
				return fmt.Errorf("round %d: move %v to h%d: %w", i, who, to, err)
			}
		}
		if err := c.Send(s[0], 5, nil); err != nil {
			return err
		}
		var sent int
		if _, err := c.Recv(s[0], 4, &sent); err != nil {
			return err
		}
		t.Logf("%d messages sent", sent)
		return stopMover(c, mv[0], sent)
	})
	if committed == 0 {
		t.Fatal("no move committed")
	}
	return committed
}
