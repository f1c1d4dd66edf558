package replica

import (
	"errors"
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

func TestConfig(t *testing.T) {
	c, err := Config{ID: 2, Peers: []uint64{1, 2, 3}}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Tick != 100*time.Millisecond || c.ElectionTicks() != 8 || c.HeartbeatTicks() != 1 {
		t.Errorf("defaults: tick %v, election %d ticks, heartbeat %d", c.Tick, c.ElectionTicks(), c.HeartbeatTicks())
	}
	if got := c.FailoverBound(0); got != 1700*time.Millisecond {
		t.Errorf("FailoverBound(0) = %v, want 1.7 s", got)
	}
	for name, bad := range map[string]Config{
		"no ID":              {Peers: []uint64{1}},
		"not a peer":         {ID: 4, Peers: []uint64{1, 2, 3}},
		"peer 0":             {ID: 1, Peers: []uint64{1, 0}},
		"repeated peer":      {ID: 1, Peers: []uint64{1, 2, 2}},
		"heartbeat < tick":   {ID: 1, Peers: []uint64{1}, HeartbeatInterval: time.Millisecond},
		"election=heartbeat": {ID: 1, Peers: []uint64{1}, ElectionTimeout: 200 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond},
		"negative tick":      {ID: 1, Peers: []uint64{1}, Tick: -time.Second},
		"msg under entry":    {ID: 1, Peers: []uint64{1}, MaxEntryBytes: 2 << 20, MaxMsgBytes: 1 << 20},
	} {
		if _, err := bad.WithDefaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
		if _, err := New(bad, NewDedup(newCounter()), State{}); !errors.Is(err, ErrConfig) {
			t.Errorf("New %s: %v, want ErrConfig", name, err)
		}
	}
}

// TestStatePersist: entries overwrite a suffix, a snapshot drops what it
// covers, a hard state replaces the last, other effects change nothing.
func TestStatePersist(t *testing.T) {
	ent := func(i, term uint64) *pb.Entry { return &pb.Entry{Index: new(i), Term: new(term)} }
	var s State
	s.Persist(Effect{Kind: EffPersist, Entries: []*pb.Entry{ent(1, 1), ent(2, 1), ent(3, 1)}, HardState: &pb.HardState{Term: new(uint64(1))}})
	s.Persist(Effect{Kind: EffPersist, Entries: []*pb.Entry{ent(2, 2)}})
	s.Persist(Effect{Kind: EffSend, Entries: []*pb.Entry{ent(9, 9)}})
	if len(s.Entries) != 2 || s.Entries[1].GetTerm() != 2 || s.HardState.GetTerm() != 1 {
		t.Fatalf("after overwrite: %v, %v", s.Entries, s.HardState)
	}
	snap := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1))}, Data: []byte("x")}
	s.Persist(Effect{Kind: EffSnapshot, Snapshot: snap})
	if len(s.Entries) != 1 || s.Entries[0].GetIndex() != 2 || s.Snapshot != snap {
		t.Fatalf("after snapshot: %v, %v", s.Entries, s.Snapshot)
	}
	old := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1))}, Data: []byte("old")}
	s.Persist(Effect{Kind: EffPersist, Snapshot: old})
	if s.Snapshot != snap {
		t.Error("a snapshot no newer than the persisted one replaced it")
	}
}

// TestRefusal: a follower refuses a proposal naming the leader; the
// leader accepts it and reports it applied at the index it accepted.
func TestRefusal(t *testing.T) {
	s := newSim(t, 1, simConfig{n: 3, minDelay: time.Millisecond, maxDelay: 5 * time.Millisecond, duration: time.Minute})
	for s.leader() == nil || !s.leader().r.Leading() {
		s.next()
	}
	l := s.leader()
	f := s.node(l.id%3 + 1)
	cmd := AppendCommand(nil, Command{Client: 9, Seq: 1, Op: []byte("9:1:k")})
	effs := f.r.Step(s.now, Event{Kind: EvPropose, Data: cmd})
	_, term := l.r.Leader()
	if len(effs) != 1 || effs[0].Kind != EffRefused || !errors.Is(effs[0].Err, ErrNotLeader) || effs[0].Lead != l.id || effs[0].Term != term {
		t.Fatalf("follower %d answered %v, want a refusal naming %d at term %d", f.id, effs, l.id, term)
	}
	for _, bad := range [][]byte{nil, make([]byte, l.r.Config().MaxEntryBytes+1)} {
		effs := l.r.Step(s.now, Event{Kind: EvPropose, Data: bad})
		if len(effs) != 1 || effs[0].Kind != EffRefused {
			t.Errorf("leader took a proposal of %d bytes: %v", len(bad), effs)
		}
	}
	if effs := l.r.Step(s.now, Event{Kind: 99}); len(effs) != 1 || !errors.Is(effs[0].Err, ErrBadEvent) {
		t.Errorf("an unknown event gave %v", effs)
	}
	effs = s.step(l, Event{Kind: EvPropose, Data: cmd})
	if effs[0].Kind != EffAccepted || effs[0].Term != term {
		t.Fatalf("leader answered %v", effs)
	}
	idx := effs[0].Index
	for l.applied < idx {
		s.next()
	}
	if got := l.app.Counts["k"]; got != 1 {
		t.Errorf("count of k = %d after the command applied, want 1", got)
	}
	if want := fmt.Sprintf("%d/%s", term, cmd); s.common[idx-1] != want {
		t.Errorf("entry %d is %q, not the command", idx, s.common[idx-1])
	}
}

// TestPartitionedLeader: a leader cut off from the others steps down
// within two election timeouts (CheckQuorum) while the others elect a
// new one; cut off, it does not raise its term (PreVote); healed, it
// follows the new leader, which stays leader at its term.
func TestPartitionedLeader(t *testing.T) {
	for _, n := range []int{3, 5} {
		s := newSim(t, uint64(n), simConfig{n: n, minDelay: time.Millisecond, maxDelay: 10 * time.Millisecond, duration: time.Hour, clients: 2})
		for s.leader() == nil || !s.leader().r.Leading() {
			s.next()
		}
		s.runFor(time.Second)
		old := s.leader()
		_, oldTerm := old.r.Leader()
		for _, m := range s.nodes {
			if m != old {
				s.cut[[2]uint64{old.id, m.id}], s.cut[[2]uint64{m.id, old.id}] = true, true
			}
		}
		cfg := old.r.Config()
		s.runFor(time.Duration(2*cfg.ElectionTicks()+2) * cfg.Tick)
		if lead, _ := old.r.Leader(); lead == old.id {
			t.Errorf("n=%d: leader %d still leads %v after it was cut off", n, old.id, s.now.Sub(time.Unix(1_000_000, 0)))
		}
		s.runFor(3 * time.Second)
		nl := s.leader()
		if nl == nil || nl == old || !nl.r.Leading() {
			t.Fatalf("n=%d: the majority has no new leader", n)
		}
		_, newTerm := nl.r.Leader()
		if _, term := old.r.Leader(); term != oldTerm {
			t.Errorf("n=%d: the cut-off leader moved from term %d to %d", n, oldTerm, term)
		}
		clear(s.cut)
		s.runFor(5 * time.Second)
		if lead, term := nl.r.Leader(); lead != nl.id || term != newTerm {
			t.Errorf("n=%d: after the heal the leader is %d at term %d, was %d at %d", n, lead, term, nl.id, newTerm)
		}
		if lead, term := old.r.Leader(); lead != nl.id || term != newTerm {
			t.Errorf("n=%d: the old leader follows %d at term %d, want %d at %d", n, lead, term, nl.id, newTerm)
		}
		s.end = s.now
		s.run()
	}
}

// TestSnapshotCatchUp: a follower down while the group applies many
// times SnapshotEvery entries comes back behind the leader's compacted
// log and catches up by the leader's snapshot.
func TestSnapshotCatchUp(t *testing.T) {
	s := newSim(t, 3, simConfig{n: 3, minDelay: time.Millisecond, maxDelay: 5 * time.Millisecond, duration: time.Hour, clients: 3,
		replica: Config{SnapshotEvery: 20, KeepEntries: 5}})
	for s.leader() == nil || !s.leader().r.Leading() {
		s.next()
	}
	l := s.leader()
	f := s.node(l.id%3 + 1)
	s.kill(f, "follower")
	f.restart = s.now.Add(time.Hour)
	from := f.applied
	s.runFor(5 * time.Second)
	if l.r.SnapshotIndex() < from+100 {
		t.Fatalf("the leader's snapshot is at %d, the follower stopped at %d: too few entries", l.r.SnapshotIndex(), from)
	}
	restores := s.restores
	f.restart = s.now
	s.end = s.now
	s.run()
	if s.restores == restores {
		t.Error("the follower caught up without a snapshot")
	}
	if f.r.SnapshotIndex() <= from || f.applied != l.applied {
		t.Errorf("follower: snapshot %d, applied %d; leader applied %d", f.r.SnapshotIndex(), f.applied, l.applied)
	}
}

// TestStopped: a message that contradicts the log (a leader's commit
// beyond it) stops the replica instead of panicking; it answers
// EffStopped until the shell restarts it from what it persisted, and the
// restarted replica rejoins the group.
func TestStopped(t *testing.T) {
	s := newSim(t, 2, simConfig{n: 3, minDelay: time.Millisecond, maxDelay: 5 * time.Millisecond, duration: time.Hour, clients: 1})
	for s.leader() == nil || !s.leader().r.Leading() {
		s.next()
	}
	s.runFor(time.Second)
	l := s.leader()
	f := s.node(l.id%3 + 1)
	_, term := l.r.Leader()
	bad := &pb.Message{Type: new(pb.MsgHeartbeat), From: new(l.id), To: new(f.id), Term: new(term), Commit: new(uint64(1 << 40))}
	effs := f.r.Step(s.now, Event{Kind: EvMessage, Msg: bad})
	if len(effs) == 0 || effs[len(effs)-1].Kind != EffStopped || !errors.Is(effs[len(effs)-1].Err, ErrStopped) {
		t.Fatalf("a commit beyond the log gave %v", effs)
	}
	if effs := f.r.Step(s.now, Event{Kind: EvTick}); len(effs) != 1 || effs[0].Kind != EffStopped {
		t.Fatalf("a stopped replica answered %v", effs)
	}
	for _, e := range effs {
		f.st.Persist(e)
	}
	f.r = nil
	f.restart = s.now
	s.end = s.now
	s.run()
}
