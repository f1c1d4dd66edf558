package move

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// The machine against a model of the hosts it commands, under every
// interleaving a byte string can pick: steps answered, answered late
// (the driver's call timed out but the host still does the step), done
// with their answer lost, never done; hosts lost; the clock moving. Each
// host's decisions are its own Host's (the host half of moves), fed every
// step as the daemon's step handlers feed it, whose effects the host
// performs. The oracle, checked after every
// event: a task runs on at most one host; a task's route epochs only grow;
// the epoch clock never goes back; a move finishes once, and a move that
// finishes well leaves its task running at the destination. At the end,
// with every step answered, no move is left and every task not lost with
// its host runs on exactly one host.

type wHost struct {
	alive   bool
	moves   *Host
	running map[task.TID]ID // running here, with the move that restored each (0: none)
	ckpt    map[task.TID]ID // checkpoint of a move received
}

type flight struct {
	a    Action
	late bool // answered already (failed); the host does it later
}

type world struct {
	m        *Machine
	now      time.Time
	hosts    map[task.HostID]*wHost
	ids      []task.HostID
	tids     []task.TID
	calls    []flight
	acts     []Action // the machine's actions not drained yet
	epoch    uint64
	routes   map[task.TID]uint64
	started  map[ID]bool
	from     map[ID]task.HostID // each move's origin
	finished map[ID]bool
	lost     map[task.TID]bool // lost with a host
	noSafe   bool              // the next suspend finds no safe point
	stats    struct{ done, aborted, lost int }
}

func newWorld() *world {
	w := &world{m: New(0, 0), now: time.Unix(0, 0), hosts: map[task.HostID]*wHost{}, routes: map[task.TID]uint64{},
		started: map[ID]bool{}, from: map[ID]task.HostID{}, finished: map[ID]bool{}, lost: map[task.TID]bool{}}
	for i := 1; i <= 4; i++ {
		id := task.HostID(i)
		h := &wHost{alive: true, moves: NewHost(), running: map[task.TID]ID{}, ckpt: map[task.TID]ID{}}
		w.hosts[id] = h
		w.ids = append(w.ids, id)
		for n := 1; n <= 2; n++ {
			tid := task.NewTID(id, uint32(n))
			h.running[tid] = 0
			w.tids = append(w.tids, tid)
		}
	}
	return w
}

// step feeds h's Host an event with what h's task table knows of the
// task, and returns the step's answer: the last effect.
func (w *world) step(h *wHost, e HostEvent) HostEffect {
	if e.Kind != EvSafePoint {
		arrived, running := h.running[e.TID]
		e.Local = Local{Running: running, Arrived: arrived}
	}
	fx := h.moves.Step(w.now, e)
	if len(fx) == 0 {
		return HostEffect{Kind: DoOK}
	}
	return fx[len(fx)-1]
}

// do performs a step at its host as the daemon's handlers do: the host's
// Host decides, the host performs the effects; it says what the host
// answers. A refused suspend is answered Refused, as the master's driver
// reads the daemon's refusals (the task was not suspended for the move).
func (w *world) do(a Action) (Outcome, error) {
	h := w.hosts[a.Host]
	if h == nil || !h.alive {
		return Failed, errors.New("host lost")
	}
	t := a.TID
	ev := func(k HostEventKind) HostEvent { return HostEvent{Kind: k, TID: t, Move: a.Move, Route: a.Route} }
	switch a.Step {
	case StepPrepare:
		e := ev(EvPrepare)
		e.Peer = w.from[a.Move]
		if x := w.step(h, e); x.Kind == DoRefuse {
			return Failed, x.Err
		}
	case StepSuspend:
		x := w.step(h, ev(EvSuspend))
		switch x.Kind {
		case DoRefuse:
			if errors.Is(x.Err, ErrAborted) || errors.Is(x.Err, task.ErrNoSuchTask) {
				return Refused, x.Err
			}
			return Failed, x.Err
		case DoAskSuspend:
			if w.noSafe {
				w.noSafe = false
				return Refused, errors.New("no safe point")
			}
			e := ev(EvSafePoint)
			e.Local = Local{Running: true}
			if x := w.step(h, e); x.Kind == DoRefuse {
				return Refused, x.Err
			}
			delete(h.running, t)
		}
	case StepSend:
		if x := w.step(h, ev(EvSend)); x.Kind == DoRefuse {
			return Failed, x.Err
		}
		if d := w.hosts[a.Route.Host]; d != nil && d.alive {
			e := ev(EvStream)
			e.Peer = a.Host
			if w.step(d, e).Kind == DoReceive {
				d.ckpt[t] = a.Move
			}
		}
		w.step(h, ev(EvSent))
	case StepRestore:
		if x := w.step(h, ev(EvRestore)); x.Kind == DoRefuse {
			return Failed, x.Err
		}
		if h.ckpt[t] != a.Move {
			return Failed, errors.New("no checkpoint")
		}
		if x := w.step(h, ev(EvInstall)); x.Kind == DoRefuse {
			return Failed, x.Err
		}
		delete(h.ckpt, t)
		h.running[t] = a.Move
	case StepCommit:
		w.step(h, ev(EvCommit))
	case StepCancel:
		arrived, running := h.running[t]
		for _, x := range h.moves.Step(w.now, HostEvent{Kind: EvCancel, TID: t, Move: a.Move, Route: a.Route, Local: Local{Running: running, Arrived: arrived}}) {
			switch x.Kind {
			case DoInstalled:
				return Installed, nil
			case DoDropArrival:
				delete(h.ckpt, t)
			}
		}
	case StepResume:
		switch x := w.step(h, ev(EvResume)); x.Kind {
		case DoRefuse:
			return Failed, x.Err
		case DoResume:
			e := ev(EvInstall)
			e.Back = true
			if x := w.step(h, e); x.Kind != DoInstall {
				return Failed, fmt.Errorf("resumed, then refused its install: %v", x)
			}
			h.running[t] = 0
		}
	}
	return OK, nil
}

// drain takes the machine's actions: calls go in flight, routes and
// finishes are checked.
func (w *world) drain(t *testing.T) {
	acts := w.acts
	w.acts = nil
	for _, a := range acts {
		switch a.Kind {
		case Reject:
			t.Fatalf("rejected: %v", a.Err)
		case Call:
			if a.Notify {
				_, _ = w.do(a)
				continue
			}
			w.calls = append(w.calls, flight{a: a})
		case SetRoute:
			if a.Route.Epoch <= w.routes[a.TID] {
				t.Fatalf("%v: route epoch %d after %d", a.TID, a.Route.Epoch, w.routes[a.TID])
			}
			w.routes[a.TID] = a.Route.Epoch
		case Finish:
			if !w.started[a.Move] || w.finished[a.Move] {
				t.Fatalf("%v finished twice or without a start", a.Move)
			}
			w.finished[a.Move] = true
			switch {
			case a.Err == nil:
				w.stats.done++
			case errors.Is(a.Err, ErrLost):
				w.stats.lost++
			case errors.Is(a.Err, ErrAborted):
				w.stats.aborted++
			default:
				t.Fatalf("%v finished with %v: neither aborted nor lost", a.Move, a.Err)
			}
		}
	}
	if w.m.Epoch() < w.epoch {
		t.Fatalf("epoch clock went back from %d to %d", w.epoch, w.m.Epoch())
	}
	w.epoch = w.m.Epoch()
	for _, tid := range w.tids {
		n := 0
		for _, id := range w.ids {
			if _, running := w.hosts[id].running[tid]; running && w.hosts[id].alive {
				n++
			}
		}
		if n > 1 {
			t.Fatalf("%v runs on %d hosts", tid, n)
		}
	}
}

func (w *world) report(t *testing.T, f flight, o Outcome, err error) {
	// A move that ended or went on without this step refuses it.
	acts := w.m.Step(w.now, Event{Kind: Result, Move: f.a.Move, Step: f.a.Step, Outcome: o, Err: err})
	if e := rejected(acts); e != nil {
		if !errors.Is(e, ErrStale) {
			t.Fatalf("result of %v: %v", f.a, e)
		}
		return
	}
	w.acts = append(w.acts, acts...)
}

// event applies one event chosen by op and arg.
func (w *world) event(t *testing.T, op, arg byte) {
	pick := func(n int) int { return int(arg) % n }
	switch op % 9 {
	case 0, 1: // a move
		tid := w.tids[pick(len(w.tids))]
		from := task.HostID(0)
		for _, id := range w.ids {
			if _, running := w.hosts[id].running[tid]; running && w.hosts[id].alive {
				from = id
			}
		}
		to := w.ids[int(arg>>3)%len(w.ids)]
		if from == 0 || !w.hosts[to].alive {
			return
		}
		acts := w.m.Step(w.now, Event{Kind: Start, Spec: Spec{TID: tid, From: from, To: to, Epoch: w.routes[tid], Timeouts: testTimeouts}})
		if err := rejected(acts); err != nil {
			if !errors.Is(err, ErrMoving) && !errors.Is(err, ErrSameHost) {
				t.Fatal(err)
			}
			break
		}
		id := acts[0].Move
		w.started[id] = true
		w.from[id] = from
		w.acts = append(w.acts, acts...)
	case 2, 3: // a step done and answered
		if len(w.calls) == 0 {
			return
		}
		i := pick(len(w.calls))
		f := w.calls[i]
		w.calls = append(w.calls[:i], w.calls[i+1:]...)
		o, err := w.do(f.a)
		if !f.late {
			w.report(t, f, o, err)
		}
	case 4: // a step done, its answer lost
		if i := w.unanswered(pick); i >= 0 {
			f := w.calls[i]
			w.calls = append(w.calls[:i], w.calls[i+1:]...)
			_, _ = w.do(f.a)
			w.report(t, f, Failed, errors.New("answer lost"))
		}
	case 5: // the call times out; the host does the step later
		if i := w.unanswered(pick); i >= 0 {
			w.calls[i].late = true
			w.report(t, w.calls[i], Failed, errors.New("timeout"))
		}
	case 6: // the call fails and the step never happens
		if i := w.unanswered(pick); i >= 0 {
			f := w.calls[i]
			w.calls = append(w.calls[:i], w.calls[i+1:]...)
			w.report(t, f, Failed, errors.New("connection lost"))
		}
	case 7: // a host is lost (never more than two)
		dead := 0
		for _, id := range w.ids {
			if !w.hosts[id].alive {
				dead++
			}
		}
		id := w.ids[pick(len(w.ids))]
		if h := w.hosts[id]; h.alive && dead < 2 {
			h.alive = false
			for tid := range h.running {
				w.lost[tid] = true
			}
			for _, tid := range w.tids {
				if _, ok := h.moves.Departure(tid); ok {
					w.lost[tid] = true
				}
			}
			w.acts = append(w.acts, w.m.Step(w.now, Event{Kind: HostLost, Host: id})...)
		}
	case 8:
		if arg&1 == 1 {
			w.noSafe = true
		}
		w.now = w.now.Add(time.Duration(arg) * 10 * time.Millisecond)
		w.acts = append(w.acts, w.m.Step(w.now, Event{Kind: Tick})...)
	}
	w.drain(t)
}

func (w *world) unanswered(pick func(int) int) int {
	var c []int
	for i, f := range w.calls {
		if !f.late {
			c = append(c, i)
		}
	}
	if len(c) == 0 {
		return -1
	}
	return c[pick(len(c))]
}

// settle answers every step until no move is left.
func (w *world) settle(t *testing.T) {
	for range 10000 {
		if len(w.calls) == 0 && len(w.m.Moves()) == 0 {
			break
		}
		if len(w.calls) > 0 {
			w.event(t, 2, 0)
			continue
		}
		w.now = w.now.Add(time.Second)
		w.acts = append(w.acts, w.m.Step(w.now, Event{Kind: Tick})...)
		w.drain(t)
	}
	if ms := w.m.Moves(); len(ms) > 0 {
		t.Fatalf("moves left after every step was answered: %+v", ms)
	}
	for id := range w.started {
		if !w.finished[id] {
			t.Fatalf("%v never finished", id)
		}
	}
	for _, tid := range w.tids {
		n := 0
		for _, id := range w.ids {
			if _, running := w.hosts[id].running[tid]; running && w.hosts[id].alive {
				n++
			}
		}
		if n != 1 && !(n == 0 && w.lost[tid]) {
			t.Fatalf("%v runs on %d hosts at the end (lost with a host: %v)", tid, n, w.lost[tid])
		}
	}
}

func runWorld(t *testing.T, data []byte) *world {
	w := newWorld()
	for i := 0; i+1 < len(data); i += 2 {
		w.event(t, data[i], data[i+1])
	}
	w.settle(t)
	return w
}

// FuzzMachine checks the machine's invariants under the interleavings
// the fuzzer finds: go test ./routing/move -fuzz FuzzMachine.
func FuzzMachine(f *testing.F) {
	f.Add([]byte{0, 9, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0})
	f.Add([]byte{0, 9, 2, 0, 2, 0, 2, 0, 5, 0, 2, 0, 2, 0})
	f.Add([]byte{0, 17, 2, 0, 2, 0, 7, 2, 2, 0, 2, 0})
	f.Fuzz(func(t *testing.T, data []byte) { runWorld(t, data) })
}

// TestMachineSeeds runs the same check over seeded random interleavings,
// so that every test run covers thousands of them.
func TestMachineSeeds(t *testing.T) {
	seeds := 3000
	if testing.Short() {
		seeds = 300
	}
	var done, aborted, lost int
	for seed := range uint64(seeds) {
		r := rand.New(rand.NewPCG(seed, 0x6d6f7665))
		data := make([]byte, 2*(20+r.IntN(200)))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		// Answer steps more often than anything else happens.
		for i := 0; i < len(data); i += 2 {
			if r.IntN(2) == 0 {
				data[i] = 2
			}
		}
		w := runWorld(t, data)
		done += w.stats.done
		aborted += w.stats.aborted
		lost += w.stats.lost
	}
	if done == 0 || aborted == 0 || lost == 0 {
		t.Fatalf("%d seeds: %d moves done, %d aborted, %d lost: every ending must be exercised", seeds, done, aborted, lost)
	}
	t.Logf("%d seeds: %d moves done, %d aborted, %d lost with a host", seeds, done, aborted, lost)
}
