package replica

import (
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// State is what a replica persisted: its hard state (term, vote,
// commit), its latest snapshot and the entries after it. New restarts a
// replica from it; the shell keeps it on stable storage, performing
// EffPersist and EffSnapshot as Persist does in memory.
type State struct {
	HardState *pb.HardState
	Snapshot  *pb.Snapshot
	Entries   []*pb.Entry
}

// Persist applies an EffPersist or EffSnapshot to s (other effects leave
// it as it is): a snapshot newer than s's replaces it and the entries it
// covers; entries replace those from the first one's index on (raft
// overwrites a suffix a new leader did not have); a hard state replaces
// s's.
func (s *State) Persist(e Effect) {
	if e.Kind != EffPersist && e.Kind != EffSnapshot {
		return
	}
	if snap := e.Snapshot; !raft.IsEmptySnap(snap) && snap.GetMetadata().GetIndex() > s.Snapshot.GetMetadata().GetIndex() {
		s.Snapshot = snap
		idx := snap.GetMetadata().GetIndex()
		keep := s.Entries[:0:0]
		for _, ent := range s.Entries {
			if ent.GetIndex() > idx {
				keep = append(keep, ent)
			}
		}
		s.Entries = keep
	}
	if len(e.Entries) > 0 {
		first := e.Entries[0].GetIndex()
		keep := s.Entries[:0:0]
		for _, ent := range s.Entries {
			if ent.GetIndex() < first {
				keep = append(keep, ent)
			}
		}
		s.Entries = append(keep, e.Entries...)
	}
	if e.HardState != nil {
		s.HardState = e.HardState
	}
}
