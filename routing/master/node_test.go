package master

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/routing/jobck"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// TestMovesDelegate feeds a node and a bare move machine the same seeded
// moves and outcomes: the node's move effects are the machine's actions,
// in order (its SetRoutes as FxRoute, a refused start as FxRefuse), and
// its route table holds every route the machine set.
func TestMovesDelegate(t *testing.T) {
	steps := []move.Step{move.StepPrepare, move.StepSuspend, move.StepSend, move.StepRestore, move.StepCommit, move.StepCancel, move.StepResume}
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 31))
		hosts := []task.HostID{1, 2, 3}
		n := New(Config{Timeouts: timeouts}, hosts)
		mc := move.New(0, 0)
		routes := map[task.TID]uint64{}
		var tids []task.TID
		for _, x := range n.Step(base, Event{Kind: EvSpawn, Job: 1, Type: "w", Count: 4}) {
			tids = append(tids, x.TID)
		}
		now := base
		for i := 0; i < 300; i++ {
			now = now.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
			var got []Effect
			var want []move.Action
			switch rng.IntN(4) {
			case 0:
				tid := tids[rng.IntN(len(tids))]
				r := n.Routes().Lookup(tid)
				to := hosts[rng.IntN(len(hosts))]
				got = n.Step(now, Event{Kind: EvMove, TID: tid, Host: to})
				want = mc.Step(now, move.Event{Kind: move.Start, Spec: move.Spec{TID: tid, From: r.Host, To: to, Epoch: r.Epoch, Job: 1, Timeouts: timeouts}})
			case 1:
				got = n.Step(now, Event{Kind: EvTimer, Timer: Timer{Kind: TimerMoves}})
				want = mc.Step(now, move.Event{Kind: move.Tick})
			default:
				o := move.Outcome(rng.IntN(4))
				var err error
				if o != move.OK && o != move.Installed {
					err = errors.New("failed")
				}
				id, st := move.ID(1+rng.IntN(int(seed%5)+3)), steps[rng.IntN(len(steps))]
				if ms := mc.Moves(); len(ms) > 0 && rng.IntN(2) == 0 {
					// Mostly answers a move waits for.
					id = ms[rng.IntN(len(ms))].ID
				}
				got = n.Step(now, Event{Kind: EvMoveResult, Move: id, Step: st, Outcome: o, Err: err})
				want = mc.Step(now, move.Event{Kind: move.Result, Move: id, Step: st, Outcome: o, Err: err})
			}
			var g, w []string
			for _, x := range got {
				switch x.Kind {
				case FxMove:
					g = append(g, x.Move.String())
				case FxRoute:
					g = append(g, fmt.Sprintf("route %v %v e%d", x.TID, x.Route.Host, x.Route.Epoch))
				case FxRefuse:
					g = append(g, "reject: "+x.Err.Error())
				}
			}
			for _, a := range want {
				if a.Kind == move.SetRoute {
					w = append(w, fmt.Sprintf("route %v %v e%d", a.TID, a.Route.Host, a.Route.Epoch))
					routes[a.TID] = a.Route.Epoch
					continue
				}
				w = append(w, a.String())
			}
			if !slices.Equal(g, w) {
				t.Fatalf("seed %d step %d: node %q, move.Machine %q", seed, i, g, w)
			}
		}
		for tid, e := range routes {
			if r := n.Routes().Lookup(tid); r.Epoch != e {
				t.Fatalf("seed %d: node's route for %v at e%d, the machine set e%d", seed, tid, r.Epoch, e)
			}
		}
	}
}

// TestConfigDefaults: the zero Config ticks every 100 ms and asks a resume
// five times.
func TestConfigDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	if c.TickEvery != 100*time.Millisecond || c.ResumeAttempts != 5 {
		t.Fatalf("defaults %+v", c)
	}
	n := New(Config{Timeouts: timeouts}, []task.HostID{1, 2})
	n.Step(base, Event{Kind: EvJobStart, Job: 1})
	r := jobck.Round{Job: 1, Seq: 1, Try: 1, Kind: jobck.Checkpoint}
	attempts := 0
	for a := 1; a < 10; a++ {
		fx := n.Step(base, Event{Kind: EvResumed, Job: 1, Round: r, Host: 2, Attempt: a, Err: errors.New("timeout")})
		if len(fx) == 0 {
			break
		}
		attempts = fx[0].Attempt
	}
	if attempts != 5 {
		t.Fatalf("a failing resume is asked up to attempt %d, want 5", attempts)
	}
}

// FuzzStep feeds a node a sequence of events chosen by the input (spawns,
// moves and their outcomes, kills and ends, host losses, checkpoint
// rounds' answers right and late, restores staged or not, timers) and
// checks after every step:
//
//   - a route in the node's table never goes back in epoch;
//   - every call it asks for is bounded (a timeout above zero), and every
//     host it names is one of the virtual machine's;
//   - on demand, a route goes to hosts not lost, once each, in order;
//   - TIDs are unique, and every task started is registered;
//   - a group holds a task once at most;
//   - the same events give the same effects (a node is deterministic).
func FuzzStep(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 2, 2, 2, 2, 9, 10, 10, 10, 11, 11, 11, 12, 12, 12, 13, 14, 15})
	f.Add([]byte{0, 1, 2, 2, 5, 6, 9, 10, 10, 6, 14, 14, 16, 3, 4})
	f.Add([]byte{64, 9, 10, 10, 10, 11, 11, 11, 6, 14, 14, 16, 17, 9})
	f.Add([]byte{128, 0, 0, 1, 9, 10, 10, 10, 11, 11, 11, 12, 12, 12, 13, 9, 10, 10, 10, 11, 11, 11, 12, 6, 14, 14, 16, 7})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 400 {
			in = in[:400]
		}
		a := runFuzz(t, in)
		b := runFuzz(t, in)
		if a != b {
			t.Fatalf("the same events gave other effects:\n%s\n----\n%s", a, b)
		}
	})
}

// stepOf is the step whose answer a move in a state waits for.
var stepOf = map[move.State]move.Step{move.Preparing: move.StepPrepare, move.Freezing: move.StepSuspend,
	move.Transferring: move.StepSend, move.Restoring: move.StepRestore, move.Committing: move.StepCommit,
	move.Cancelling: move.StepCancel, move.Resuming: move.StepResume}

// runFuzz runs in against a fresh node and returns every effect, one a
// line.
func runFuzz(t *testing.T, in []byte) string {
	hosts := []task.HostID{1, 2, 3, 4}
	demand := len(in) > 0 && in[0]&0x80 != 0
	n := New(Config{Timeouts: timeouts, Demand: demand}, hosts)
	start := Event{Kind: EvJobStart, Job: 1, Jobck: jobck.Config{EndLost: len(in)%2 == 0}}
	if len(in) > 0 && in[0]&0x40 != 0 {
		// A job restarted from its set 2, of tasks the registry does not
		// hold.
		a, b := task.NewTID(9, 1), task.NewTID(9, 2)
		start.Round.Seq, start.TIDs, start.Hosts = 2, []task.TID{a, b}, []task.HostID{1, 2}
		start.Groups = map[string][]task.TID{"g": {a, b}}
	}
	n.Step(base, start)
	now := base
	epochs := map[task.TID]uint64{}
	seen := map[task.TID]bool{}
	var out strings.Builder
	var prev jobck.Round
	for i, b := range in {
		now = now.Add(time.Duration(b%7) * 10 * time.Millisecond)
		pick := func() task.TID {
			o := n.Order()
			if len(o) == 0 {
				return task.NewTID(1, 1)
			}
			return o[int(b>>3)%len(o)]
		}
		h := hosts[int(b>>4)%len(hosts)]
		var err error
		if b&0x40 != 0 {
			err = errors.New("failed")
		}
		round := n.Round(1)
		if b&0x20 != 0 && !prev.IsZero() {
			round = prev // a late answer
		}
		ck := func(k jobck.EventKind) Event {
			return Event{Kind: EvCk, Job: 1, Ck: jobck.Event{Kind: k, Round: round, Host: h, Err: err, Tasks: 1, SafeEvery: time.Millisecond}}
		}
		var e Event
		switch b % 28 {
		case 0:
			e = Event{Kind: EvSpawn, Job: 1, Type: "w", Count: 1 + int(b>>5)}
		case 1:
			e = Event{Kind: EvMove, TID: pick(), Host: h}
		case 2, 3:
			id := move.ID(1)
			if ms := n.moves.Moves(); len(ms) > 0 {
				id = ms[int(b>>4)%len(ms)].ID
			}
			st := move.StepPrepare + move.Step(b>>5)%7
			for _, m := range n.moves.Moves() {
				if m.ID == id && b%28 == 2 {
					st = stepOf[m.State] // the answer the move waits for
				}
			}
			e = Event{Kind: EvMoveResult, Move: id, Step: st, Outcome: move.Outcome(b>>6) % 4, Err: err}
		case 4:
			e = Event{Kind: EvKill, TID: pick()}
		case 5:
			e = Event{Kind: EvExited, TID: pick()}
		case 6:
			e = Event{Kind: EvHostLost, Host: h}
		case 7:
			e = Event{Kind: EvLocated, TID: pick()}
		case 8:
			e = Event{Kind: EvTimer, Timer: Timer{Kind: TimerMoves}}
		case 9:
			e = ck(jobck.EvCheckpoint)
		case 10:
			e = ck(jobck.EvPaused)
		case 11:
			e = ck(jobck.EvQuiet)
		case 12:
			e = ck(jobck.EvWritten)
			e.TIDs = []task.TID{pick()}
		case 13:
			e = ck(jobck.EvCommitted)
		case 14:
			e = ck(jobck.EvKilled)
		case 15:
			e = Event{Kind: EvTimer, Timer: Timer{Kind: TimerQuiet, Job: 1}}
		case 16:
			e = Event{Kind: EvStaged, Job: 1, Round: round, Err: err}
		case 17:
			e = Event{Kind: EvJoin, TID: pick(), Group: "g"}
		case 18:
			e = Event{Kind: EvLeave, TID: pick(), Group: "g"}
		case 19:
			e = Event{Kind: EvBarrier, TID: pick(), Group: "g", Count: int(b>>6) - 1}
		case 20:
			e = Event{Kind: EvWatch, TID: pick(), Who: pick(), Tag: int(b)}
			switch b >> 6 {
			case 1: // a task the shell keeps, placed at h (or nowhere)
				e.TID, e.Host = task.NewTID(9, uint32(b>>3)%4+1), hosts[int(b>>3)%len(hosts)]
			case 2: // the shell's tasks on h are lost
				e = Event{Kind: EvTasksLost, Host: h, TIDs: n.Watched()}
			case 3: // one ended at its host
				e = Event{Kind: EvUnwatch, TID: task.NewTID(9, uint32(b>>3)%4+1)}
			}
		case 21:
			e = Event{Kind: EvWithdraw, TID: pick(), Group: "g"}
		case 22:
			e = Event{Kind: EvRejoin, TID: pick(), Group: "g", Count: int(b>>5) % 4}
		case 23:
			e = Event{Kind: EvHold, Job: 1}
		case 24:
			e = Event{Kind: EvRelease, Job: 1}
		case 25:
			e = Event{Kind: EvDropJob, Job: 1, Err: errors.New("rolls back")}
		case 26:
			e = Event{Kind: EvHostUp, Host: h}
		case 27:
			e = Event{Kind: EvNextEpoch, Epoch: uint64(b >> 4)}
		}
		if r := n.Round(1); !r.IsZero() && r != prev {
			prev = r
		}
		fx := n.Step(now, e)
		for _, x := range fx {
			fmt.Fprintf(&out, "%d %v\n", i, x)
			for _, o := range append(slices.Clone(x.Hosts), x.Host) {
				if _, ok := slices.BinarySearch(hosts, o); o != 0 && !ok {
					t.Fatalf("step %d (%v): %v names host %v", i, e, x, o)
				}
			}
			switch x.Kind {
			case FxStart:
				if seen[x.TID] || n.Task(x.TID) == nil {
					t.Fatalf("step %d: %v started twice or not registered", i, x.TID)
				}
				seen[x.TID] = true
			case FxNotify:
				if x.Err != nil && n.Task(x.TID) != nil {
					t.Fatalf("step %d (%v): %v of a registered task", i, e, x)
				}
			case FxCall, FxResume:
				if x.Timeout <= 0 {
					t.Fatalf("step %d: unbounded call %v", i, x)
				}
			case FxMove:
				if x.Move.Kind == move.Call && x.Move.Timeout <= 0 && !x.Move.Notify {
					t.Fatalf("step %d: unbounded call %v", i, x)
				}
			case FxRoute:
				if !x.All {
					if !slices.IsSorted(x.Hosts) || len(slices.Compact(slices.Clone(x.Hosts))) != len(x.Hosts) {
						t.Fatalf("step %d: route told to %v", i, x.Hosts)
					}
					for _, o := range x.Hosts {
						if n.Lost(o) {
							t.Fatalf("step %d: route told to lost %v", i, o)
						}
					}
				}
			}
		}
		if e.Kind == EvTasksLost {
			for _, tid := range e.TIDs {
				if n.Task(tid) == nil && slices.Contains(n.Watched(), tid) {
					t.Fatalf("step %d (%v): %v still watched", i, e, tid)
				}
			}
		}
		for name, g := range n.groups.m {
			in := map[task.TID]bool{}
			live := 0
			for inst, tid := range g.members {
				if tid == 0 {
					continue
				}
				if in[tid] || g.inst[tid] != inst {
					t.Fatalf("step %d (%v): group %q holds %v twice, or indexes it wrong", i, e, name, tid)
				}
				in[tid] = true
				live++
			}
			if live == 0 || live != g.live || len(g.inst) != live || g.members[len(g.members)-1] == 0 {
				t.Fatalf("step %d (%v): group %q: %d members, live %d, indexed %d, %v", i, e, name, live, g.live, len(g.inst), g.members)
			}
		}
		for _, tid := range n.Order() {
			r := n.Routes().Lookup(tid)
			if r.Epoch < epochs[tid] {
				t.Fatalf("step %d (%v): %v's route went back from e%d to e%d", i, e, tid, epochs[tid], r.Epoch)
			}
			epochs[tid] = r.Epoch
		}
	}
	return out.String()
}
