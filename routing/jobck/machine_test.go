package jobck

import (
	"errors"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// TestBudget: the pause budget is Factor times the longest safe point
// interval of the latest round that reported one, within its bounds.
func TestBudget(t *testing.T) {
	for _, c := range []struct {
		name    string
		cfg     Config
		reports []time.Duration
		want    time.Duration
	}{
		{"nothing seen: the minimum", Config{}, nil, 50 * time.Millisecond},
		{"fast tasks: the minimum", Config{}, []time.Duration{time.Millisecond, 5 * time.Millisecond}, 50 * time.Millisecond},
		{"CG class B, 0.7 s", Config{MinPause: 500 * time.Millisecond}, []time.Duration{700 * time.Millisecond, 300 * time.Millisecond}, 2100 * time.Millisecond},
		{"bounded above", Config{MaxPause: time.Second}, []time.Duration{700 * time.Millisecond}, time.Second},
		{"another factor", Config{Factor: 2}, []time.Duration{100 * time.Millisecond}, 200 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := New(1, 0, c.cfg)
			now := base
			acts, err := m.Step(Event{Kind: EvCheckpoint, Now: now, Hosts: hostIDs(max(len(c.reports), 1))})
			if err != nil || len(acts) != 1 || acts[0].Kind != ActPause {
				t.Fatalf("start: %v %v", acts, err)
			}
			for i, r := range c.reports {
				if _, err := m.Step(Event{Kind: EvPaused, Now: now, Round: m.Round(), Host: task.HostID(i + 1), SafeEvery: r}); err != nil {
					t.Fatal(err)
				}
			}
			if got := m.Budget(); got != c.want {
				t.Fatalf("budget %v, want %v", got, c.want)
			}
		})
	}
}

func hostIDs(n int) []task.HostID {
	hs := make([]task.HostID, n)
	for i := range hs {
		hs[i] = task.HostID(i + 1)
	}
	return hs
}

// TestSlowSafePointsGetCheckpoints: tasks that reach a safe point every
// 700 ms, more than the 500 ms the first round allows, fail that round
// only; the next rounds give them enough and complete.
func TestSlowSafePointsGetCheckpoints(t *testing.T) {
	const every = 700 * time.Millisecond
	m := New(9, 0, Config{MinPause: 500 * time.Millisecond, MaxPause: 5 * time.Second})
	now := base
	hosts := hostIDs(2)
	done, failed := 0, 0
	for round := 0; round < 4; round++ {
		acts, err := m.Step(Event{Kind: EvCheckpoint, Now: now, Hosts: hosts})
		if err != nil {
			t.Fatal(err)
		}
		budget := acts[0].Budget
		r := m.Round()
		// Each host's tasks get to a safe point `every` after the pause
		// asks; a host whose budget is shorter gives up at the budget.
		var out []Action
		for _, h := range hosts {
			ev := Event{Kind: EvPaused, Round: r, Host: h, SafeEvery: every}
			if budget < every {
				ev.Now, ev.Err = now.Add(budget), errors.New("no safe point in time")
			} else {
				ev.Now = now.Add(every)
			}
			if out, err = m.Step(ev); err != nil {
				t.Fatal(err)
			}
		}
		for len(out) > 0 {
			a := out[0]
			out = out[1:]
			var next []Action
			switch a.Kind {
			case ActQuiet:
				for _, h := range a.Hosts {
					if next, err = m.Step(Event{Kind: EvQuiet, Now: now, Round: r, Host: h, Tasks: 2}); err != nil {
						t.Fatal(err)
					}
				}
			case ActWrite:
				for _, h := range a.Hosts {
					if next, err = m.Step(Event{Kind: EvWritten, Now: now, Round: r, Host: h, Tasks: 2}); err != nil {
						t.Fatal(err)
					}
				}
			case ActCommit:
				if next, err = m.Step(Event{Kind: EvCommitted, Now: now, Round: r}); err != nil {
					t.Fatal(err)
				}
			case ActDone:
				if a.Err != nil {
					failed++
				} else {
					done++
				}
			}
			out = append(out, next...)
		}
		now = now.Add(time.Second)
	}
	if failed != 1 || done != 3 || m.Seq() != 3 {
		t.Fatalf("%d rounds failed, %d completed, newest set %d; want 1, 3, 3", failed, done, m.Seq())
	}
}

func TestStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Quieting.String(), "Quieting"},
		{State(99).String(), "State(99)"},
		{EvHostLost.String(), "host-lost"},
		{ActRolledBack.String(), "rolled-back"},
		{Rollback.String(), "rollback"},
		{Round{}.String(), "none"},
		{Round{Job: 2, Seq: 3, Try: 4, Kind: Checkpoint}.String(), "checkpoint j2 seq 3 try 4"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}

// TestRollbackAsksFailedKillsAgain: a host whose kill failed (its call
// timed out: it may still run the job's tasks) is asked again, alone, up
// to maxKills times in all, before the restore; once it answers, the
// restore starts on every host.
func TestRollbackAsksFailedKillsAgain(t *testing.T) {
	m := New(1, 3, Config{})
	now := base
	acts, err := m.Step(Event{Kind: EvHostLost, Now: now, Host: 4, Hosts: hostIDs(4)})
	if err != nil || len(acts) != 1 || acts[0].Kind != ActKill || len(acts[0].Hosts) != 3 {
		t.Fatalf("host lost: %v %v", acts, err)
	}
	r := m.Round()
	timeout := errors.New("timed out")
	for _, h := range acts[0].Hosts {
		var e error
		if h == 2 {
			e = timeout
		}
		acts, err = m.Step(Event{Kind: EvKilled, Now: now, Round: r, Host: h, Err: e})
		if err != nil {
			t.Fatal(err)
		}
	}
	for try := 2; try <= maxKills; try++ {
		if len(acts) != 1 || acts[0].Kind != ActKill || len(acts[0].Hosts) != 1 || acts[0].Hosts[0] != 2 {
			t.Fatalf("after a failed kill on h2 (try %d): %v, want the kill asked of h2 again", try, acts)
		}
		if acts, err = m.Step(Event{Kind: EvKilled, Now: now, Round: r, Host: 2, Err: timeout}); err != nil {
			t.Fatal(err)
		}
	}
	if len(acts) != 1 || acts[0].Kind != ActRestore || len(acts[0].Hosts) != 3 {
		t.Fatalf("after %d failed kills: %v, want the restore on the 3 hosts", maxKills, acts)
	}

	// A kill that succeeds when asked again goes straight to the restore.
	m = New(1, 3, Config{})
	if acts, err = m.Step(Event{Kind: EvHostLost, Now: now, Host: 2, Hosts: hostIDs(2)}); err != nil || len(acts) != 1 || acts[0].Kind != ActKill {
		t.Fatalf("host lost: %v %v", acts, err)
	}
	r = m.Round()
	if acts, err = m.Step(Event{Kind: EvKilled, Now: now, Round: r, Host: 1, Err: timeout}); err != nil || len(acts) != 1 || acts[0].Kind != ActKill {
		t.Fatalf("after a failed kill: %v %v", acts, err)
	}
	if acts, err = m.Step(Event{Kind: EvKilled, Now: now, Round: r, Host: 1}); err != nil || len(acts) != 1 || acts[0].Kind != ActRestore {
		t.Fatalf("after the kill asked again succeeded: %v %v", acts, err)
	}
}

// diskDriver carries out a machine's actions against a model of the
// checkpoint directory: the sets on disk, complete or not. Every host
// answers at once and well; lose, when positive, loses host 3 in place of
// the lose-th answer fed. A discard of a round abandoned by the loss is
// not carried out (its writers may still be at work on the set, as a
// driver finds when it no longer knows the round's directory).
type diskDriver struct {
	t        *testing.T
	m        *Machine
	now      time.Time
	hosts    []task.HostID
	disk     map[uint64]bool // set → complete
	lose     int
	fed      int
	lost     bool
	done     []Action // ActDone and ActRolledBack, in order
	abandons map[uint64]bool
}

func (d *diskDriver) floor() uint64 {
	var f uint64
	for s := range d.disk {
		f = max(f, s)
	}
	return f
}

// feed steps the machine with ev (or loses host 3 first, when due) and
// carries out what follows.
func (d *diskDriver) feed(ev Event) {
	d.t.Helper()
	d.fed++
	if d.fed == d.lose && !d.lost {
		d.lost = true
		r := d.m.Round()
		acts, err := d.m.Step(Event{Kind: EvHostLost, Now: d.now, Host: 3, Hosts: d.hosts})
		if err != nil {
			d.t.Fatal(err)
		}
		d.hosts = []task.HostID{1, 2}
		if r.Kind == Checkpoint {
			d.abandons[r.Seq] = true
		}
		d.do(acts)
	}
	ev.Now = d.now
	acts, err := d.m.Step(ev)
	if err != nil {
		if errors.Is(err, ErrStale) {
			return // an answer of the abandoned round
		}
		d.t.Fatal(err)
	}
	d.do(acts)
}

func (d *diskDriver) do(acts []Action) {
	d.t.Helper()
	for _, a := range acts {
		d.now = d.now.Add(time.Millisecond)
		switch a.Kind {
		case ActPause:
			for _, h := range a.Hosts {
				d.feed(Event{Kind: EvPaused, Round: a.Round, Host: h})
			}
		case ActQuiet:
			if !a.At.IsZero() {
				d.now = a.At
				d.feed(Event{Kind: EvTick})
				continue
			}
			for _, h := range a.Hosts {
				d.feed(Event{Kind: EvQuiet, Round: a.Round, Host: h, Tasks: 1})
			}
		case ActWrite:
			if _, ok := d.disk[a.Round.Seq]; ok {
				d.t.Fatalf("%v: mkdir ckpt-%08d: file exists (disk %v)", a.Round, a.Round.Seq, d.disk)
			}
			d.disk[a.Round.Seq] = false
			for _, h := range a.Hosts {
				d.feed(Event{Kind: EvWritten, Round: a.Round, Host: h, Tasks: 1})
			}
		case ActCommit:
			d.disk[a.Round.Seq] = true
			d.feed(Event{Kind: EvCommitted, Round: a.Round})
		case ActDiscard:
			if !d.abandons[a.Round.Seq] {
				delete(d.disk, a.Round.Seq)
			}
		case ActKill:
			for _, h := range a.Hosts {
				d.feed(Event{Kind: EvKilled, Round: a.Round, Host: h})
			}
		case ActRestore:
			d.feed(Event{Kind: EvRestored, Round: a.Round})
		case ActDone, ActRolledBack, ActUnrecoverable:
			d.done = append(d.done, a)
		}
	}
}

// TestCheckpointsAfterALossAtEveryStep: a job with a complete checkpoint
// loses a host at every step of its next checkpoint round in turn (each
// answer of the pause, the quiet questions, the writes and the commit),
// rolls back, and the checkpoints of the next three periods all complete,
// each in a set of its own: none collides with the set the abandoned
// round left on disk, nor with one an earlier machine left (the floor
// reported from the directory).
func TestCheckpointsAfterALossAtEveryStep(t *testing.T) {
	// Answers fed in one clean round on three hosts: 3 paused, 3 quiet,
	// 3 written, 1 committed.
	const answers = 10
	for _, leftover := range []bool{false, true} {
		for lose := 1; lose <= answers; lose++ {
			d := &diskDriver{t: t, m: New(5, 0, Config{}), now: base, hosts: hostIDs(3), disk: map[uint64]bool{}, abandons: map[uint64]bool{}}
			start := func() {
				t.Helper()
				acts, err := d.m.Step(Event{Kind: EvCheckpoint, Now: d.now, Hosts: d.hosts, Floor: d.floor()})
				if err != nil {
					t.Fatalf("lose at %d: checkpoint: %v", lose, err)
				}
				d.do(acts)
			}
			start() // the first checkpoint completes
			if leftover {
				d.disk[d.floor()+1] = false // an incomplete set an earlier round left
			}
			d.fed, d.lose = 0, lose
			start()
			if !d.lost {
				t.Fatalf("lose at %d: the round took only %d answers", lose, d.fed)
			}
			if d.m.State() != Idle || d.m.Broken() || d.m.Rollbacks() != 1 {
				t.Fatalf("lose at %d: state %v broken %v rollbacks %d after the loss; done %v", lose, d.m.State(), d.m.Broken(), d.m.Rollbacks(), d.done)
			}
			before := d.m.Seq()
			for period := 0; period < 3; period++ {
				n := len(d.done)
				start()
				if len(d.done) != n+1 || d.done[n].Kind != ActDone || d.done[n].Err != nil {
					t.Fatalf("lose at %d (leftover %v): checkpoint %d after the rollback: %v", lose, leftover, period+1, d.done[n:])
				}
			}
			if d.m.Seq() <= before || !d.disk[d.m.Seq()] {
				t.Fatalf("lose at %d: newest set %d (before %d), disk %v", lose, d.m.Seq(), before, d.disk)
			}
		}
	}
}

// TestCheckpointAboveTheFloor: a job restarted from set 3 whose directory
// holds incomplete sets 4 and 6 (left by the machine that stopped) writes
// its next set as 7.
func TestCheckpointAboveTheFloor(t *testing.T) {
	m := New(2, 3, Config{})
	acts, err := m.Step(Event{Kind: EvCheckpoint, Now: base, Hosts: hostIDs(2), Floor: 6})
	if err != nil || len(acts) != 1 || acts[0].Round.Seq != 7 || m.Next(6) != 7 {
		t.Fatalf("checkpoint above floor 6: %v %v", acts, err)
	}
}

// TestUnrecoverableEnds: a job with no checkpoint that loses a host is
// to end at once when it asked for checkpoints (EndLost), and goes on
// without the lost tasks otherwise.
func TestUnrecoverableEnds(t *testing.T) {
	for _, end := range []bool{false, true} {
		m := New(4, 0, Config{EndLost: end})
		acts, err := m.Step(Event{Kind: EvHostLost, Now: base, Host: 2, Hosts: hostIDs(3)})
		if err != nil || len(acts) != 1 || acts[0].Kind != ActUnrecoverable || acts[0].Host != 2 || acts[0].End != end {
			t.Fatalf("EndLost %v: %v %v", end, acts, err)
		}
	}
}
