package daemon

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// reqWorker starts a receive from rank 0 and a send to it, then waits for
// both; it reports the host it finished on and what went wrong, if
// anything, to rank 0 through a gather.
type reqWorker struct {
	C task.Comm
}

func init() { task.Register("daemon.test.reqworker", &reqWorker{}) }

func (w *reqWorker) Run(c *task.Ctx) error {
	if err := c.JoinComm(&w.C); err != nil {
		return err
	}
	var v []float64
	rr, err := w.C.Irecv(c, 0, 1, &v)
	if err != nil {
		return err
	}
	rs, err := w.C.Isend(c, 0, 2, w.C.Rank)
	if err != nil {
		return err
	}
	if err := w.C.Waitall(c, rr, rs); err != nil {
		return err
	}
	fail := ""
	if want := []float64{float64(10 * w.C.Rank), 0.5}; !slices.Equal(v, want) {
		fail = fmt.Sprintf("rank %d received %v, want %v", w.C.Rank, v, want)
	}
	_, err = task.Gather(c, &w.C, []string{c.HostName(), fail}, 0)
	return err
}

// TestRequestsSurviveAMove: workers wait in Waitall with a receive
// outstanding (the root sends only later) while two of them are moved to
// another host; the moves succeed, and the moved workers finish on the
// new host with the data the root sent after the move.
func TestRequestsSurviveAMove(t *testing.T) {
	vm := startVM(t, 2, Config{})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	held := make(chan []task.TID, 1)
	release := make(chan struct{})
	tid, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error {
		var cm task.Comm
		if _, err := c.Spawn(&reqWorker{}, 3, task.OnHost("h1"), task.WithComm(&cm)); err != nil {
			return err
		}
		// Every worker's send means it has started its receive too.
		ranks := make([]int, cm.Size())
		var reqs []task.Request
		for r := 1; r < cm.Size(); r++ {
			rq, err := cm.Irecv(c, r, 2, &ranks[r])
			if err != nil {
				return err
			}
			reqs = append(reqs, rq)
		}
		if err := cm.Waitall(c, reqs...); err != nil {
			return err
		}
		held <- slices.Clone(cm.TIDs)
		<-release
		for r := 1; r < cm.Size(); r++ {
			if ranks[r] != r {
				return fmt.Errorf("rank %d sent %d", r, ranks[r])
			}
			if _, err := cm.Isend(c, r, 1, []float64{float64(10 * r), 0.5}); err != nil {
				return err
			}
		}
		got, err := task.Gather(c, &cm, []string{c.HostName(), ""}, 0)
		if err != nil {
			return err
		}
		for r := 1; r < cm.Size(); r++ {
			host, fail := got[2*r], got[2*r+1]
			want := "h1"
			if r <= 2 {
				want = "h2"
			}
			if fail != "" || host != want {
				return fmt.Errorf("rank %d finished on %s (want %s): %s", r, host, want, fail)
			}
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	var tids []task.TID
	select {
	case tids = <-held:
	case <-ctx.Done():
		t.Fatal("the root never heard from its workers")
	}
	for _, w := range tids[1:3] {
		if _, err := m.Migrate(ctx, w, "h2", Direct); err != nil {
			close(release)
			t.Fatalf("move of %v, waiting with a receive outstanding: %v", w, err)
		}
	}
	close(release)
	info, err := m.Wait(ctx, tid)
	if err != nil {
		t.Fatal(err)
	}
	if err := exitError(info); err != nil {
		t.Fatal(err)
	}
}

// TestRecvFunc: a receive by predicate (pvm_recvf) takes the oldest
// message the predicate accepts, leaving the others in order, and waits
// for one that has not come yet.
func TestRecvFunc(t *testing.T) {
	d, _ := newTestDaemon(t)
	runRoot(t, d, func(c *task.Ctx, _ int) error {
		kid, err := c.Spawn(fn(t, func(c *task.Ctx, _ int) error {
			for tag := 1; tag <= 6; tag++ {
				if err := c.Send(c.Parent(), tag, tag*10); err != nil {
					return err
				}
			}
			// The last one only once the parent asks.
			if _, err := c.Recv(c.Parent(), 99, nil); err != nil {
				return err
			}
			return c.Send(c.Parent(), 8, 80)
		}), 1)
		if err != nil {
			return err
		}
		even := func(st task.Status) bool { return st.Tag%2 == 0 }
		for _, want := range []int{20, 40, 60} {
			var v int
			if _, err := c.Recv(kid[0], task.AnyTag, &v, task.Match(even)); err != nil || v != want {
				return fmt.Errorf("even tag: %d %v, want %d", v, err, want)
			}
		}
		for _, want := range []int{10, 30, 50} {
			var v int
			if _, err := c.Recv(kid[0], task.AnyTag, &v); err != nil || v != want {
				return fmt.Errorf("what was left: %d %v, want %d", v, err, want)
			}
		}
		if err := c.Send(kid[0], 99, nil); err != nil {
			return err
		}
		var v int
		st, err := c.Recv(task.AnyTask, task.AnyTag, &v, task.Match(even))
		if err != nil || v != 80 || st.Tag != 8 || st.From != kid[0] {
			return fmt.Errorf("a later message: %d %+v %v", v, st, err)
		}
		return nil
	})
}

// reqRoot starts a team of reqWorkers with itself as rank 0, takes each
// worker's send, then waits at a safe point (a Recv with task.Safe, tag 9) to be told
// to go on before it sends the workers the data their receives wait for.
type reqRoot struct {
	C     task.Comm
	Step  int
	Ranks []int
}

// reqReady hears each time a reqRoot waits to be told to go on.
var reqReady = make(chan task.TID, 4)

func init() { task.Register("daemon.test.reqroot", &reqRoot{}) }

func (s *reqRoot) Run(c *task.Ctx) error {
	if s.C.Size() == 0 {
		if _, err := c.Spawn(&reqWorker{}, 3, task.WithComm(&s.C)); err != nil {
			return err
		}
	}
	if s.Step == 0 {
		ranks := make([]int, s.C.Size())
		var reqs []task.Request
		for r := 1; r < s.C.Size(); r++ {
			rq, err := s.C.Irecv(c, r, 2, &ranks[r])
			if err != nil {
				return err
			}
			reqs = append(reqs, rq)
		}
		if err := s.C.Waitall(c, reqs...); err != nil {
			return err
		}
		s.Ranks, s.Step = ranks, 1
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	if s.Step == 1 {
		select {
		case reqReady <- c.MyTID():
		default:
		}
		if _, err := c.Recv(task.AnyTask, 9, nil, task.Safe()); err != nil {
			return err
		}
		s.Step = 2
	}
	for r := 1; r < s.C.Size(); r++ {
		if s.Ranks[r] != r {
			return fmt.Errorf("rank %d sent %d", r, s.Ranks[r])
		}
		if _, err := s.C.Isend(c, r, 1, []float64{float64(10 * r), 0.5}); err != nil {
			return err
		}
	}
	got, err := task.Gather(c, &s.C, []string{c.HostName(), ""}, 0)
	if err != nil {
		return err
	}
	for r := 1; r < s.C.Size(); r++ {
		if got[2*r+1] != "" {
			return fmt.Errorf("%s", got[2*r+1])
		}
	}
	// A worker that sent again after the rollback would have done so
	// before its part of the gather: it would be here by now.
	again, err := s.C.Irecv(c, task.AnyRank, 2, nil)
	if err != nil {
		return err
	}
	if ok, st, err := s.C.Test(c, again); ok || err != nil {
		return fmt.Errorf("a second send from rank %d (%v)", st.From, err)
	}
	c.Printf("requests: %d workers done\n", s.C.Size()-1)
	return nil
}

// TestRequestsSurviveARollback: a job whose workers wait in Waitall with a
// receive outstanding is checkpointed, loses a host running a worker and
// rolls back: restored, every worker still waits for its receive (its send
// not made again), and once the root sends, each gets the right data and
// the job ends cleanly.
func TestRequestsSurviveARollback(t *testing.T) {
	shared := t.TempDir()
	out := &syncBuffer{}
	vm := startVM(t, 4, Config{SharedDir: shared, Output: out, Heartbeat: 50 * time.Millisecond, DeadAfter: 500 * time.Millisecond})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	job, root, err := m.StartJob(ctx, &reqRoot{}, JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	js, err := m.job(job)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-reqReady:
	case <-ctx.Done():
		t.Fatal("the root never heard from its workers")
	}
	lose := ""
	ts, err := m.AllTasks(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range ts {
		if ti.Job == job && ti.TID != root && ti.Host != m.Name() {
			lose = ti.Host
		}
	}
	if lose == "" {
		t.Fatalf("no worker away from the master's host: %+v", ts)
	}
	if _, err := m.CheckpointJob(ctx, job, ""); err != nil {
		t.Fatalf("checkpoint with receives outstanding: %v", err)
	}
	for _, d := range vm.Daemons {
		if d.Name() == lose {
			d.crash()
		}
	}
	for deadline := time.Now().Add(30 * time.Second); m.Rollbacks() < 1; {
		if time.Now().After(deadline) {
			t.Fatal("no rollback after 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error { return c.Send(root, 9, nil) })); err != nil {
		t.Fatal(err)
	}
	info, err := m.waitJob(ctx, js)
	if err != nil || info.Status != 0 {
		t.Fatalf("job after the rollback: %+v %v\n%s", info, err, out)
	}
	if !strings.Contains(out.String(), "requests: 3 workers done") {
		t.Fatalf("output %q", out)
	}
}
