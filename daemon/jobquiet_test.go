package daemon

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/jobck"
	"github.com/dpvm/dpvm/task"
)

// quietRoot spawns a child that ends at once, waits for its exit notice,
// hands the child's TID to the test (quietChildren) and waits at a safe
// point until the daemon halts.
type quietRoot struct{ Child task.TID }

// quietChild ends at once.
type quietChild struct{}

// quietChildren hears a quietRoot's child once it has ended; each test
// that uses it makes it anew.
var quietChildren chan task.TID

func init() {
	task.Register("daemon.test.quietroot", &quietRoot{})
	task.Register("daemon.test.quietchild", &quietChild{})
}

func (r *quietRoot) Run(c *task.Ctx) error {
	if r.Child.IsZero() {
		tids, err := c.Spawn(&quietChild{}, 1)
		if err != nil {
			return err
		}
		if err := c.Notify(task.TaskExit, 7, tids...); err != nil {
			return err
		}
		if _, err := c.Recv(tids[0], 7, nil); err != nil {
			return err
		}
		r.Child = tids[0]
		quietChildren <- r.Child
	}
	_, err := c.Recv(task.AnyTask, 5, nil, task.Safe())
	return err
}

func (quietChild) Run(*task.Ctx) error { return nil }

// TestQuietCountsMessagesOfTasksGone: a job's task ended leaving a message
// unacknowledged in its host's outbox (its receiver moving). The quiet
// step of a checkpoint counts it, although no task of the job here sent
// it any more: the round waits for it and, as it stays unacknowledged,
// fails with ErrQuietTimeout rather than complete a set with a message in
// flight that no restored task would send again. Once the message is
// gone the round completes. Before the master named every task the job
// has had to the quiet step, the first round completed. Virtual time
// (synctest): the quiet step's timeout is the daemon's MoveTimeout.
func TestQuietCountsMessagesOfTasksGone(t *testing.T) {
	shared := t.TempDir()
	secret, err := pki.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		quietChildren = make(chan task.TID, 1)
		d := New(Config{Output: &syncBuffer{}, SharedDir: shared, Secret: secret})
		ctx := context.Background()
		defer func() {
			if err := d.Halt(ctx); err != nil {
				t.Error(err)
			}
		}()
		job, _, err := d.StartJob(ctx, &quietRoot{}, JobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		child := <-quietChildren
		synctest.Wait()
		if d.jobTask(child) != nil {
			t.Fatalf("%v still hosted after its exit notice", child)
		}
		far := task.NewTID(2, 999) // a receiver moving: messages for it are held
		d.rt.mu.Lock()
		e := routing.Envelope{From: child, To: far, Seq: d.rt.outbox.Seq(child, far), Tag: 2, Body: task.Payload{Data: []byte("late")}}
		d.rt.outbox.Push(e, routing.Route{Host: 2, Epoch: 3, InTransit: true}, time.Now())
		d.rt.mu.Unlock()

		if ck, err := d.CheckpointJob(ctx, job, ""); !errors.Is(err, jobck.ErrQuietTimeout) {
			t.Fatalf("checkpoint with a message of the ended %v unacknowledged: %+v, %v; want %v", child, ck, err, jobck.ErrQuietTimeout)
		}
		d.rt.drop(child)
		ck, err := d.CheckpointJob(ctx, job, "")
		if err != nil {
			t.Fatalf("checkpoint once the message is gone: %v", err)
		}
		if ck.Seq == 0 {
			t.Fatalf("checkpoint %+v: no set", ck)
		}
	})
}

// BenchmarkPendingFrom: a host's count for the quiet step of a job that
// has had n tasks (every one the master names), with q receivers that
// have a message waiting each.
func BenchmarkPendingFrom(b *testing.B) {
	for _, n := range []int{256, 4096} {
		for _, q := range []int{64, 1024} {
			b.Run(fmt.Sprintf("had=%d/queues=%d", n, q), func(b *testing.B) {
				r := newRouter()
				var tids []task.TID
				for i := range n {
					tids = append(tids, task.NewTID(1, uint32(i+1)))
				}
				for i := range q {
					from, to := tids[i%n], task.NewTID(2, uint32(i+1))
					e := routing.Envelope{From: from, To: to, Seq: r.outbox.Seq(from, to), Body: task.Payload{Data: []byte("x")}}
					r.outbox.Push(e, routing.Route{Host: 2, Epoch: 2}, time.Unix(0, 0))
				}
				b.ResetTimer()
				for range b.N {
					if r.pendingFrom(tids) != q {
						b.Fatal("count")
					}
				}
			})
		}
	}
}
