package jobck

import (
	"errors"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// FuzzMachine feeds the machine a sequence of events chosen by the input —
// answers right and late, from hosts asked and not, errors, losses, ticks —
// and checks its invariants after every step:
//
//   - a refused event changes nothing and asks for nothing;
//   - Idle exactly when there is no round; rounds only grow in Try;
//   - no action names a round older than the one under way;
//   - the newest set only grows, to the set of a completed checkpoint,
//     and only after every host of the round wrote its part;
//   - a checkpoint round's set is above the newest complete one and
//     above that of every round abandoned when a host was lost;
//   - every checkpoint round that paused tasks resumes them when it ends;
//   - no checkpoint starts while the job is broken.
func FuzzMachine(f *testing.F) {
	f.Add([]byte{0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4})
	f.Add([]byte{0, 1, 5, 6, 6, 7, 0})
	f.Add([]byte{0, 1, 1, 2, 2, 2, 9, 2, 2, 2, 3, 3, 3, 4, 0, 8})
	f.Fuzz(func(t *testing.T, in []byte) {
		m := New(1, uint64(len(in)%2), Config{QuietTimeout: 50 * time.Millisecond})
		hosts := []task.HostID{1, 2, 3}
		now := base
		var prev Round
		var abandoned uint64 // the largest set of a round abandoned by a loss
		written := map[task.HostID]bool{}
		for i, b := range in {
			ev := Event{Now: now, Round: m.Round(), Host: hosts[int(b>>4)%len(hosts)]}
			if b&0x80 != 0 {
				ev.Round = prev // a late answer
			}
			if b>>6&1 == 1 && b%3 == 0 {
				ev.Err = errors.New("failed")
			}
			switch b % 11 {
			case 0:
				ev.Kind, ev.Hosts = EvCheckpoint, hosts
			case 1:
				ev.Kind, ev.SafeEvery = EvPaused, time.Duration(b)*time.Millisecond
			case 2:
				ev.Kind, ev.Tasks, ev.Pending, ev.Running = EvQuiet, 1, int(b>>5&1), int(b>>6&1)
			case 3:
				ev.Kind, ev.Tasks = EvWritten, 1
			case 4:
				ev.Kind = EvCommitted
			case 5:
				ev.Kind, ev.Hosts = EvHostLost, hosts
			case 6:
				ev.Kind = EvKilled
			case 7:
				ev.Kind = EvRestored
			case 8:
				ev.Kind = EvEnded
			default:
				ev.Kind = EvTick
			}
			now = now.Add(time.Duration(b) * time.Millisecond)
			before := *m
			seq, round, broken := m.Seq(), m.Round(), m.Broken()
			acts, err := m.Step(ev)
			if err != nil {
				if len(acts) != 0 || m.State() != before.state || m.Round() != round || m.Seq() != seq {
					t.Fatalf("step %d %v: refused (%v) yet changed the machine or asked %v", i, ev.Kind, err, acts)
				}
				continue
			}
			if ev.Kind == EvWritten && ev.Err == nil {
				written[ev.Host] = true
			}
			if (m.State() == Idle) != m.Round().IsZero() {
				t.Fatalf("step %d: state %v with round %v", i, m.State(), m.Round())
			}
			if r := m.Round(); !r.IsZero() && r != round && r.Try <= max(round.Try, prev.Try) {
				t.Fatalf("step %d: round %v after %v", i, r, round)
			}
			resumed := false
			for _, a := range acts {
				if !a.Round.IsZero() && a.Round.Try < max(round.Try, 1) && a.Round != round {
					t.Fatalf("step %d: %v names an older round than %v", i, a, round)
				}
				switch a.Kind {
				case ActPause:
					if broken && a.Round != round {
						t.Fatalf("step %d: a checkpoint of a broken job", i)
					}
					if a.Round != round && (a.Round.Seq <= seq || a.Round.Seq <= abandoned) {
						t.Fatalf("step %d: set %d after newest %d and abandoned %d", i, a.Round.Seq, seq, abandoned)
					}
				case ActResume:
					resumed = true
				case ActCommit:
					for _, h := range before.hosts {
						if !written[h] {
							t.Fatalf("step %d: commit before %v wrote", i, h)
						}
					}
				case ActDone:
					if a.Err == nil && (m.Seq() != a.Round.Seq || a.Round.Seq <= seq) {
						t.Fatalf("step %d: set %d completed, newest %d → %d", i, a.Round.Seq, seq, m.Seq())
					}
					if errors.Is(a.Err, ErrLost) {
						abandoned = max(abandoned, a.Round.Seq)
					}
				}
			}
			if m.Seq() != seq && (m.Seq() <= seq || ev.Kind != EvCommitted) {
				t.Fatalf("step %d: newest set %d → %d on %v", i, seq, m.Seq(), ev.Kind)
			}
			if round.Kind == Checkpoint && m.Round() != round && before.state >= Pausing && !resumed {
				t.Fatalf("step %d: %v ended without resuming its tasks: %v", i, round, acts)
			}
			if m.Round() != round {
				if !round.IsZero() {
					prev = round
				}
				written = map[task.HostID]bool{}
			}
		}
	})
}
