package replica

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/raft/v3/raftpb"
)

func fuzzSeeds(f *testing.F) {
	ents := []*pb.Entry{{Index: new(uint64(5)), Term: new(uint64(2)), Data: []byte("op")}, {Index: new(uint64(6)), Term: new(uint64(2))}}
	for _, m := range []*pb.Message{
		{Type: new(pb.MsgApp), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(2)), LogTerm: new(uint64(1)), Index: new(uint64(4)), Commit: new(uint64(4)), Entries: ents},
		{Type: new(pb.MsgHeartbeat), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(2)), Commit: new(uint64(3))},
		{Type: new(pb.MsgPreVote), From: new(uint64(3)), To: new(uint64(2)), Term: new(uint64(3)), LogTerm: new(uint64(2)), Index: new(uint64(6))},
		{Type: new(pb.MsgSnap), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(2)), Snapshot: &pb.Snapshot{
			Metadata: &pb.SnapshotMetadata{Index: new(uint64(9)), Term: new(uint64(2)), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}, Data: []byte{1, 0}}},
	} {
		b, err := EncodeMessage(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{WireVersion})
	f.Add([]byte{2, 8, 3})
}

// FuzzDecodeMessage: any bytes are refused with an error, or decode to a
// message replicas send each other that encodes and decodes back to the
// same message; input over the bound is refused before decoding.
func FuzzDecodeMessage(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 0 {
			if _, err := DecodeMessage(b, len(b)-1); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("%d bytes under a bound of %d: %v", len(b), len(b)-1, err)
			}
		}
		m, err := DecodeMessage(b, 1<<20)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error %v is not ErrBadMessage", err)
			}
			return
		}
		if !peerType(m.GetType()) || m.GetFrom() == 0 || m.GetTo() == 0 {
			t.Fatalf("decoded %v", m)
		}
		again, err := EncodeMessage(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := DecodeMessage(again, 1<<20)
		if err != nil || !proto.Equal(m, m2) {
			t.Fatalf("%v encodes to %x, which decodes to %v (%v)", m, again, m2, err)
		}
	})
}

// FuzzStep feeds a replica of a group of three, first made leader or
// follower by a short history, whatever messages the bytes decode to, as
// from its peers. Step never panics: raft's refusals are EffRejected,
// its panics EffStopped; a stopped replica answers EffStopped to
// everything; and whatever it persisted restarts it.
func FuzzStep(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		s := newSim(t, 1, simConfig{n: 3, minDelay: time.Millisecond, maxDelay: 2 * time.Millisecond, duration: time.Hour, clients: 1})
		s.runFor(2 * time.Second)
		n := s.node(2)
		for _, from := range []uint64{1, 3} {
			m, err := DecodeMessage(b, 1<<20)
			if err != nil {
				return
			}
			m.From, m.To = new(from), new(uint64(2))
			effs := n.r.Step(s.now, Event{Kind: EvMessage, Msg: m})
			stopped := false
			for _, e := range effs {
				switch e.Kind {
				case EffPersist, EffSnapshot:
					n.st.Persist(e)
				case EffStopped:
					stopped = true
					if !errors.Is(e.Err, ErrStopped) {
						t.Fatalf("stopped with %v", e.Err)
					}
				case EffRejected:
					if !errors.Is(e.Err, ErrBadMessage) {
						t.Fatalf("rejected with %v", e.Err)
					}
				}
			}
			if stopped {
				again := n.r.Step(s.now, Event{Kind: EvTick})
				if len(again) != 1 || again[0].Kind != EffStopped {
					t.Fatalf("a stopped replica answered %v", again)
				}
				cfg := n.r.Config()
				if _, err := New(cfg, NewDedup(newCounter()), n.st); err != nil {
					t.Fatalf("restart from what it persisted: %v", err)
				}
				return
			}
		}
	})
}

// FuzzDedupRestore: a Dedup snapshot that Restore takes snapshots back
// to the same bytes; one it refuses changes nothing.
func FuzzDedupRestore(f *testing.F) {
	d := NewDedup(newCounter())
	d.Apply(1, AppendCommand(nil, Command{Client: 7, Seq: 1, Op: []byte("7:1:a")}))
	d.Apply(2, AppendCommand(nil, Command{Client: 3, Seq: 4, Op: []byte("3:4:b")}))
	good, err := d.Snapshot()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte{dedupVersion, 200, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDedup(newCounter())
		d.Apply(1, AppendCommand(nil, Command{Client: 1, Seq: 1, Op: []byte("1:1:x")}))
		before, _ := d.Snapshot()
		if err := d.Restore(b); err != nil {
			after, _ := d.Snapshot()
			if !bytes.Equal(before, after) {
				t.Fatalf("a refused Restore (%v) changed the state", err)
			}
			return
		}
		again, err := d.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		d2 := NewDedup(newCounter())
		if err := d2.Restore(again); err != nil {
			t.Fatalf("its own snapshot refused: %v", err)
		}
		third, _ := d2.Snapshot()
		if !bytes.Equal(again, third) {
			t.Fatalf("snapshot %x restores to %x", again, third)
		}
	})
}
