package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// commWorker runs commRound with its communicator, then reports what went
// wrong (nothing, it is hoped) to rank 0. With Report set, rank 0 (a
// worker, in a team Spawn with Team started) passes what it gathered and the
// members it knew to its spawner in a teamReport, on tag 1.
type commWorker struct {
	C      task.Comm
	Rounds int
	Round  int
	Fail   string
	Report bool
}

func init() { task.Register("daemon.test.commworker", &commWorker{}) }

func (w *commWorker) Run(c *task.Ctx) error {
	if err := c.JoinComm(&w.C); err != nil {
		return err
	}
	for w.Round < w.Rounds {
		msg, err := commRound(c, &w.C, w.Round, nil)
		if err != nil {
			return err
		}
		if w.Fail == "" {
			w.Fail = msg
		}
		w.Round++
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	fails, err := task.Gather(c, &w.C, []string{w.Fail}, 0)
	if err != nil || !w.Report || w.C.Rank != 0 {
		return err
	}
	return c.Send(c.Parent(), 1, teamReport{Fails: fails, TIDs: w.C.TIDs})
}

// commRound calls every collective once and returns what differs from the
// expected results; between its first and second collective it calls
// pause, when given.
func commRound(c *task.Ctx, m *task.Comm, round int, pause func()) (string, error) {
	n, r := m.Size(), m.Rank
	sum := []float64{float64(r + 1), float64(round)}
	if err := task.AllReduce(c, m, task.Sum[float64], sum); err != nil {
		return "", err
	}
	if pause != nil {
		pause()
	}
	mx := []int{r * (round + 1)}
	if err := task.AllReduce(c, m, task.Max[int], mx); err != nil {
		return "", err
	}
	root := round % n
	v := -1
	if r == root {
		v = 100 * root
	}
	if err := m.Bcast(c, &v, root); err != nil {
		return "", err
	}
	var left int
	if err := m.SendRecv(c, (r+1)%n, r, (r-1+n)%n, &left); err != nil {
		return "", err
	}
	var all []int
	if r == 0 {
		for i := range 2 * n {
			all = append(all, i+round)
		}
	}
	mine, err := task.Scatter(c, m, all, 0)
	if err != nil {
		return "", err
	}
	got, err := task.Gather(c, m, []int{r + round}, n-1)
	if err != nil {
		return "", err
	}
	if err := m.Barrier(c); err != nil {
		return "", err
	}
	var want []int
	if r == n-1 {
		for i := range n {
			want = append(want, i+round)
		}
	}
	switch {
	case sum[0] != float64(n*(n+1)/2) || sum[1] != float64(n*round):
		return fmt.Sprintf("rank %d round %d: allreduce sum %v", r, round, sum), nil
	case mx[0] != (n-1)*(round+1):
		return fmt.Sprintf("rank %d round %d: allreduce max %v", r, round, mx), nil
	case v != 100*root:
		return fmt.Sprintf("rank %d round %d: bcast %d", r, round, v), nil
	case left != (r-1+n)%n:
		return fmt.Sprintf("rank %d round %d: sendrecv %d", r, round, left), nil
	case !slices.Equal(mine, []int{2*r + round, 2*r + 1 + round}):
		return fmt.Sprintf("rank %d round %d: scatter %v", r, round, mine), nil
	case !slices.Equal(got, want):
		return fmt.Sprintf("rank %d round %d: gather %v", r, round, got), nil
	}
	return "", nil
}

// commRoot spawns workers-1 commWorkers as a communicator with itself and
// runs rounds of commRound with them, pausing in the first as pause says;
// it fails unless every member saw the expected results.
func commRoot(c *task.Ctx, workers, rounds int, pause func(m *task.Comm), opts ...task.SpawnOption) error {
	var m task.Comm
	if _, err := c.Spawn(&commWorker{Rounds: rounds}, workers-1, append(opts, task.WithComm(&m))...); err != nil {
		return err
	}
	if m.Rank != 0 || m.Size() != workers || m.TID(0) != c.MyTID() {
		return fmt.Errorf("spawner's communicator: rank %d of %d, %v", m.Rank, m.Size(), m.TIDs)
	}
	var fails []string
	for round := range rounds {
		var p func()
		if round == 0 && pause != nil {
			p = func() { pause(&m) }
		}
		msg, err := commRound(c, &m, round, p)
		if err != nil {
			return err
		}
		if msg != "" {
			fails = append(fails, msg)
		}
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	got, err := task.Gather(c, &m, []string{""}, 0)
	if err != nil {
		return err
	}
	for _, f := range append(fails, got...) {
		if f != "" {
			return fmt.Errorf("%s", f)
		}
	}
	if len(got) != workers {
		return fmt.Errorf("gathered %d reports from %d members", len(got), workers)
	}
	return nil
}

// TestCommCollectives: a communicator of 1, 2 and 5 members, every
// collective for three rounds, each member checking its results.
func TestCommCollectives(t *testing.T) {
	d, _ := newTestDaemon(t)
	for _, n := range []int{1, 2, 5} {
		runRoot(t, d, func(c *task.Ctx, _ int) error { return commRoot(c, n, 3, nil) })
	}
}

// teamReport is rank 0's report to the spawner.
type teamReport struct {
	Fails []string
	TIDs  []task.TID
}

// TestSpawnTeam: a team of 1, 2 and 4 workers that Spawn with Team starts is a
// communicator of the workers alone, ranked in spawn order; every
// collective works among them; a team of none is refused.
func TestSpawnTeam(t *testing.T) {
	d, _ := newTestDaemon(t)
	for _, n := range []int{1, 2, 4} {
		runRoot(t, d, func(c *task.Ctx, _ int) error {
			tids, err := c.Spawn(&commWorker{Rounds: 2, Report: true}, n, task.Team())
			if err != nil {
				return err
			}
			var rep teamReport
			if _, err := c.Recv(tids[0], 1, &rep); err != nil {
				return err
			}
			if !slices.Equal(rep.TIDs, tids) || slices.Contains(rep.TIDs, c.MyTID()) {
				return fmt.Errorf("team of %d: members %v, spawned %v, spawner %v", n, rep.TIDs, tids, c.MyTID())
			}
			if len(rep.Fails) != n {
				return fmt.Errorf("team of %d: %d reports", n, len(rep.Fails))
			}
			for _, f := range rep.Fails {
				if f != "" {
					return fmt.Errorf("team of %d: %s", n, f)
				}
			}
			return nil
		})
	}
	runRoot(t, d, func(c *task.Ctx, _ int) error {
		if tids, err := c.Spawn(&commWorker{}, 0, task.Team()); err == nil {
			return fmt.Errorf("a team of none: %v", tids)
		}
		return nil
	})
}

// TestCommNotSetUp: a collective on an empty communicator fails with
// ErrNoComm, and a rank outside it with ErrNoSuchTask.
func TestCommNotSetUp(t *testing.T) {
	d, _ := newTestDaemon(t)
	runRoot(t, d, func(c *task.Ctx, _ int) error {
		var m task.Comm
		if err := m.Barrier(c); !errors.Is(err, task.ErrNoComm) {
			return fmt.Errorf("barrier on an empty communicator: %v", err)
		}
		m = task.Comm{Rank: 0, TIDs: []task.TID{c.MyTID()}}
		var v int
		if err := m.Bcast(c, &v, 3); !errors.Is(err, task.ErrNoSuchTask) {
			return fmt.Errorf("bcast from rank 3 of 1: %v", err)
		}
		return nil
	})
}

// TestCollectiveWaitIsASafePoint: workers wait inside a collective (the
// root holds back after the first) while two of them are moved to another
// host; the moves succeed, and the moved tasks replay the collective they
// had finished, finish the one they waited in, and every result is right.
func TestCollectiveWaitIsASafePoint(t *testing.T) {
	vm := startVM(t, 2, Config{})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	held := make(chan []task.TID, 1)
	release := make(chan struct{})
	tid, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error {
		return commRoot(c, 4, 3, func(cm *task.Comm) {
			held <- slices.Clone(cm.TIDs)
			<-release
		}, task.OnHost("h1"))
	}))
	if err != nil {
		t.Fatal(err)
	}
	var tids []task.TID
	select {
	case tids = <-held:
	case <-ctx.Done():
		t.Fatal("the root never reached its pause")
	}
	for _, w := range tids[1:3] {
		if _, err := m.Migrate(ctx, w, "h2", Direct); err != nil {
			close(release)
			t.Fatalf("move of %v, waiting in a collective: %v", w, err)
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

// benchWorker takes part in N all-reduces of Len float64s, through a
// communicator.
type benchWorker struct {
	C task.Comm
	// Bcast makes each step a Reduce to rank 0 and its Bcast, rather
	// than an AllReduce.
	Bcast bool
	N     int
	Len   int
}

func init() { task.Register("daemon.test.benchworker", &benchWorker{}) }

// benchStep is one step of the benchmark on the communicator m: an
// AllReduce of data, or a Reduce to rank 0 and its Bcast.
func benchStep(c *task.Ctx, m *task.Comm, bcast bool, data []float64) error {
	if !bcast {
		return task.AllReduce(c, m, task.Sum[float64], data)
	}
	if err := task.Reduce(c, m, task.Sum[float64], data, 0); err != nil {
		return err
	}
	// Bcast decodes into out, reusing data's memory. A variable of this
	// branch alone, so that the AllReduce branch does not pay for moving
	// data's slice header to the heap.
	out := data
	return m.Bcast(c, &out, 0)
}

func (w *benchWorker) Run(c *task.Ctx) error {
	if err := c.JoinComm(&w.C); err != nil {
		return err
	}
	data := make([]float64, w.Len)
	for range w.N {
		for i := range data {
			data[i] = float64(w.C.Rank + i)
		}
		if err := benchStep(c, &w.C, w.Bcast, data); err != nil {
			return err
		}
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkAllReduce compares a communicator's AllReduce of 1024 float64s
// over 4 members with a Reduce to rank 0 followed by rank 0's Bcast.
//
//	go test -run XXX -bench AllReduce -benchtime 2000x ./daemon/
func BenchmarkAllReduce(b *testing.B) {
	const members, length = 4, 1024
	for _, bcast := range []bool{false, true} {
		name := "allreduce"
		if bcast {
			name = "reduce+bcast"
		}
		b.Run(name, func(b *testing.B) {
			d, _ := newTestDaemon(b)
			runRoot(b, d, func(c *task.Ctx, _ int) error {
				var m task.Comm
				if _, err := c.Spawn(&benchWorker{Bcast: bcast, N: b.N, Len: length}, members-1, task.WithComm(&m)); err != nil {
					return err
				}
				data := make([]float64, length)
				b.ResetTimer()
				for range b.N {
					for i := range data {
						data[i] = float64(i)
					}
					if err := benchStep(c, &m, bcast, data); err != nil {
						return err
					}
					if err := c.SafePoint(); err != nil {
						return err
					}
				}
				b.StopTimer()
				if want := float64(members*(members-1)/2 + members*7); data[7] != want {
					return fmt.Errorf("data[7] = %v, want %v", data[7], want)
				}
				return nil
			})
		})
	}
}

// TestNoSafePointWarned: a task that reaches no safe point while a move
// waits makes the move fail with ErrNoSafePoint and a warning naming it and
// the time since its last safe point; the task list shows that time, and 0
// for a task waiting in a Recv with task.Safe.
func TestNoSafePointWarned(t *testing.T) {
	var logs syncBuffer
	cfg := Config{MoveTimeout: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	vm := startVM(t, 2, cfg)
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	release := make(chan struct{})
	busy, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error {
		<-release // no safe point meanwhile
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error {
		_, err := c.Recv(task.AnyTask, 1, nil, task.Safe())
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer close(release)
	_, err = m.Migrate(ctx, busy, "h2", Direct)
	if !errors.Is(err, ErrNoSafePoint) {
		t.Fatalf("move of a task without safe points: %v", err)
	}
	line := ""
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `msg="task reached no safe point`) {
			line = l
		}
	}
	if !strings.Contains(line, "tid="+busy.String()) || !strings.Contains(line, "since_safe_point=") || !strings.Contains(line, "waiting=move") {
		t.Fatalf("warning %q; logs:\n%s", line, logs.String())
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		since := map[task.TID]float64{}
		for _, ti := range m.Tasks(false) {
			since[ti.TID] = ti.SinceSafePointMS
		}
		if since[busy] >= 300 && since[waiter] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("since last safe point: busy %v ms, waiting in a Recv with task.Safe %v ms", since[busy], since[waiter])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNoSafePointWarnedOnce: a task late for move after move, or round
// after round of a periodic job checkpoint, is warned of once until it
// reaches its next safe point, then once again if it is late again.
func TestNoSafePointWarnedOnce(t *testing.T) {
	logs := newCheckLog()
	h := &hosted{d: &Daemon{log: slog.New(logs)}, tid: task.TID(7), typ: "late", started: time.Unix(100, 0)}
	warnings := func() int {
		n := 0
		for _, r := range logs.records() {
			if strings.HasPrefix(r.msg, "task reached no safe point in time") {
				if r.attrs["tid"] != h.tid.String() || r.attrs["since_safe_point"] == "" {
					t.Errorf("warning without the task or the time since its safe point: %v", r.attrs)
				}
				n++
			}
		}
		return n
	}
	for range 3 {
		h.warnNoSafePoint("job checkpoint", time.Second)
	}
	h.warnNoSafePoint("move", time.Second)
	if n := warnings(); n != 1 {
		t.Fatalf("%d warnings for one late stretch, want 1", n)
	}
	h.safeSeen(time.Unix(200, 0))
	if n := warnings(); n != 1 {
		t.Fatalf("a safe point logged a warning: %d", n)
	}
	h.warnNoSafePoint("job checkpoint", time.Second)
	h.warnNoSafePoint("job checkpoint", time.Second)
	if n := warnings(); n != 2 {
		t.Fatalf("%d warnings for two late stretches, want 2", n)
	}
}

// TestSendToExitedTaskAnywhere: Send to a task that has exited succeeds,
// the message dropped, whether the task ran on the sender's host or on
// another.
func TestSendToExitedTaskAnywhere(t *testing.T) {
	vm := startVM(t, 2, Config{})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tid, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error {
		for _, host := range []string{"h1", "h2"} {
			kid, err := c.Spawn(fn(t, func(*task.Ctx, int) error { return nil }), 1, task.OnHost(host))
			if err != nil {
				return err
			}
			if err := c.Notify(task.TaskExit, 5, kid[0]); err != nil {
				return err
			}
			if _, err := c.Recv(kid[0], 5, nil); err != nil {
				return err
			}
			for range 3 {
				if err := c.Send(kid[0], 1, "late"); err != nil {
					return fmt.Errorf("send to %v, exited on %s: %v", kid[0], host, err)
				}
			}
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	info, err := m.Wait(ctx, tid)
	if err != nil {
		t.Fatal(err)
	}
	if err := exitError(info); err != nil {
		t.Fatal(err)
	}
}
