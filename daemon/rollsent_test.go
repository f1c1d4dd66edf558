package daemon

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// heldRoot sends a token to its worker each lap and adds the worker's reply
// to Sum. Sent records that the lap's token is out, so that a root
// restored while it waits for the reply does not send the token again;
// Unguarded ignores it, as a program that forgot the rule would.
type heldRoot struct {
	Laps      int
	W         task.TID
	Lap       int
	Sum       int64
	Sent      bool
	Unguarded bool
}

// heldWorker answers each token; at lap HoldAt it keeps the token in its
// state and waits at a safe point for a word from outside (tag 98) before
// it answers. It stops at the root's word (tag 3).
type heldWorker struct {
	HoldAt int
	Lap    int
	Tok    ringToken
	Have   bool
}

// held hears when a heldWorker holds its token.
var held = make(chan task.TID, 16)

func init() {
	task.Register("daemon.test.heldroot", &heldRoot{})
	task.Register("daemon.test.heldworker", &heldWorker{})
}

func (r *heldRoot) Run(c *task.Ctx) error {
	if r.W.IsZero() {
		tids, err := c.Spawn(&heldWorker{HoldAt: 1}, 1, task.OnHost("h2"))
		if err != nil {
			return err
		}
		r.W = tids[0]
	}
	for r.Lap < r.Laps {
		if !r.Sent || r.Unguarded {
			if err := c.Send(r.W, 2, ringToken{Lap: r.Lap, Sum: r.Sum}); err != nil {
				return err
			}
			r.Sent = true
		}
		var reply int64
		if _, err := c.Recv(r.W, 2, &reply, task.Safe()); err != nil {
			return err
		}
		r.Sum += reply
		r.Lap++
		r.Sent = false
	}
	if err := c.Send(r.W, 3, nil); err != nil {
		return err
	}
	c.Printf("held ring, %d laps: sum %d\n", r.Laps, r.Sum)
	return nil
}

func (w *heldWorker) Run(c *task.Ctx) error {
	for {
		if !w.Have {
			st, err := c.Recv(c.Parent(), task.AnyTag, &w.Tok, task.Safe())
			if err != nil {
				return err
			}
			if st.Tag == 3 {
				return nil
			}
			w.Have = true
		}
		if w.Lap == w.HoldAt {
			held <- c.MyTID()
			if _, err := c.Recv(task.AnyTask, 98, nil, task.Safe()); err != nil {
				return err
			}
		}
		reply := w.Tok.Sum*3 + int64(w.Tok.Lap) + 1
		if err := c.Send(c.Parent(), 2, reply); err != nil {
			return err
		}
		w.Lap++
		w.Have = false
	}
}

// heldSum is what a heldRoot of laps laps prints uninterrupted.
func heldSum(laps int) int64 {
	var sum int64
	for lap := range laps {
		sum += sum*3 + int64(lap) + 1
	}
	return sum
}

var heldLine = regexp.MustCompile(`held ring, \d+ laps: sum (-?\d+)`)

// TestRollbackWithTheTokenOut makes deterministic the moment that once
// made a rolled-back ring sum differently: the job is checkpointed while
// its root waits for the reply to a token its worker holds (in its state,
// at a safe point), then the worker's host is lost and the job rolls back.
// The restored root, its Sent field set, does not send the token again,
// and the job sums as an uninterrupted run does. The same program without
// that guard sends a second token and sums differently every time: the
// check would catch a rollback that restores the root before its send, or
// delivers the token twice.
func TestRollbackWithTheTokenOut(t *testing.T) {
	for _, unguarded := range []bool{false, true} {
		t.Run(fmt.Sprintf("unguarded=%v", unguarded), func(t *testing.T) {
			out := &syncBuffer{}
			vm := startVM(t, 3, Config{SharedDir: t.TempDir(), Output: out, Heartbeat: 50 * time.Millisecond, DeadAfter: 500 * time.Millisecond})
			m := vm.Master()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			const laps = 4
			job, _, err := m.StartJob(ctx, &heldRoot{Laps: laps, Unguarded: unguarded}, JobOptions{})
			if err != nil {
				t.Fatal(err)
			}
			js, err := m.job(job)
			if err != nil {
				t.Fatal(err)
			}
			w := <-held
			if _, err := m.CheckpointJob(ctx, job, ""); err != nil {
				t.Fatal(err)
			}
			vm.Daemons[1].crash() // h2 runs the worker
			if got := <-held; got != w {
				t.Fatalf("after the rollback %v holds the token, want %v", got, w)
			}
			if _, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error { return c.Send(w, 98, nil) })); err != nil {
				t.Fatal(err)
			}
			if info, err := m.waitJob(ctx, js); err != nil || info.Status != 0 {
				t.Fatalf("rolled-back job: %+v %v\n%s", info, err, out)
			}
			if n := m.Rollbacks(); n != 1 {
				t.Fatalf("%d rollbacks", n)
			}
			got := heldLine.FindStringSubmatch(out.String())
			if got == nil {
				t.Fatalf("no result: %q", out)
			}
			want := fmt.Sprint(heldSum(laps))
			if !unguarded && got[1] != want {
				t.Errorf("rolled-back job sums %s, uninterrupted %s", got[1], want)
			}
			if unguarded && got[1] == want {
				t.Errorf("without its guard the rolled-back job still sums %s: the check would not see a second token", want)
			}
		})
	}
}
