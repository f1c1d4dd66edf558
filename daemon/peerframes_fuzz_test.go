package daemon

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/hostlist"
	"github.com/dpvm/dpvm/task"
)

// peerKinds are the frames a daemon takes from another daemon after the
// handshake, besides calls (FuzzControlHandlers) and replies.
var peerKinds = []routing.Kind{routing.KindMsgs, routing.KindAcks, routing.KindRefuse, routing.KindEvent, routing.KindPing, routing.KindPong, routing.KindHello, routing.KindRetire}

// FuzzPeerFrames gives the master of a two-daemon virtual machine on the
// in-memory network arbitrary frames as if host h2 had sent them: a frame
// is refused or handled, and the daemon does not panic (a panic fails the
// fuzz). h2 is a host, not the master: what it says for others is
// refused.
func FuzzPeerFrames(f *testing.F) {
	good := []routing.Envelope{{From: task.TID(2<<32 | 1), To: task.TID(1<<32 | 1), Seq: 1, Tag: 3, Body: task.Payload{Enc: task.EncMsgpack, Data: []byte{0xc0}}}}
	f.Add(uint8(0), routing.AppendEnvelope(nil, &good[0]))
	f.Add(uint8(2), routing.AppendEnvelope(nil, &good[0]))
	for _, e := range []event{{Kind: evHosts, Deltas: hostlist.AppendDeltas(nil, []hostlist.Delta{{Seq: 2, Op: hostlist.OpAdd, Entry: hostlist.Entry{ID: 3, Name: "h3"}}})}, {Kind: evRoute, Routes: []routing.Entry{{TID: task.TID(1<<32 | 1)}}}} {
		b, err := msgpack.Marshal(&e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(3), b)
	}
	f.Add(uint8(1), []byte{1, 0, 0, 0, 0, 0, 0, 0, 1})
	vm := startMemVM(f, 2, &faults{}, Config{})
	m := vm.Master()
	m.nw.mu.Lock()
	p := m.nw.peers[2]
	m.nw.mu.Unlock()
	if p == nil {
		f.Fatal("the master has no connection to h2")
	}
	f.Fuzz(func(t *testing.T, k uint8, body []byte) {
		_ = m.dispatch(p, routing.Frame{Kind: peerKinds[int(k)%len(peerKinds)], Body: body})
	})
}
