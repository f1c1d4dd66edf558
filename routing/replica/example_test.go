package replica_test

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/dpvm/dpvm/routing/replica"
)

// list is an append-only list of strings, the example's state machine.
type list struct{ items [][]byte }

func (l *list) Apply(_ uint64, entry []byte) []byte {
	l.items = append(l.items, bytes.Clone(entry))
	return fmt.Appendf(nil, "%d", len(l.items))
}

func (l *list) Snapshot() ([]byte, error) { return bytes.Join(l.items, []byte{'\n'}), nil }

func (l *list) Restore(b []byte) error {
	l.items = nil
	if len(b) > 0 {
		l.items = bytes.Split(bytes.Clone(b), []byte{'\n'})
	}
	return nil
}

// A shell for a group of three in one process: it performs each
// replica's effects in order (persist, then send through the wire
// codec), delivers messages every 10 ms and ticks each replica when it
// asks; a client proposes to replica 1 and follows refusals to the
// leader they name.
func Example() {
	peers := []uint64{1, 2, 3}
	now := time.Unix(0, 0)
	reps := map[uint64]*replica.Replica{}
	lists := map[uint64]*list{}
	stored := map[uint64]*replica.State{}
	var wire [][]byte // messages in flight
	for _, id := range peers {
		lists[id], stored[id] = &list{}, &replica.State{}
		r, err := replica.New(replica.Config{ID: id, Peers: peers}, lists[id], replica.State{})
		if err != nil {
			panic(err)
		}
		reps[id] = r
	}
	target, answered := uint64(1), false
	perform := func(effs []replica.Effect, id uint64) {
		for _, e := range effs {
			switch e.Kind {
			case replica.EffPersist, replica.EffSnapshot:
				stored[id].Persist(e) // durably, before anything after it
			case replica.EffSend:
				b, err := replica.EncodeMessage(nil, e.Msg)
				if err != nil {
					panic(err)
				}
				wire = append(wire, b)
			case replica.EffRefused:
				if errors.Is(e.Err, replica.ErrNotLeader) && e.Lead != 0 {
					target = e.Lead
				}
			case replica.EffApplied:
				if id == target && len(e.Data) > 0 {
					fmt.Printf("%s is item %s\n", e.Data, e.Result)
					answered = true
				}
			}
		}
	}
	for step := 0; !answered && step < 1000; step++ {
		now = now.Add(10 * time.Millisecond)
		pending := wire
		wire = nil
		for _, b := range pending {
			m, err := replica.DecodeMessage(b, replica.DefaultMaxMsgBytes)
			if err != nil {
				panic(err)
			}
			perform(reps[m.GetTo()].Step(now, replica.Event{Kind: replica.EvMessage, Msg: m}), m.GetTo())
		}
		for _, id := range peers {
			if !now.Before(reps[id].Next()) {
				perform(reps[id].Step(now, replica.Event{Kind: replica.EvTick}), id)
			}
		}
		if step%20 == 19 { // the client, every 200 ms until answered
			perform(reps[target].Step(now, replica.Event{Kind: replica.EvPropose, Data: []byte("hello")}), target)
		}
	}
	// Output: hello is item 1
}
