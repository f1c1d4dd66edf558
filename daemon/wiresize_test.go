package daemon

import (
	"testing"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/hostlist"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// TestWireSizesJoinAnswer checks JoinAnswer's arithmetic against the
// answer itself, encoded whole, on both sides of msgpack's byte string
// and array header sizes and of the varints' and with and without
// routes.
func TestWireSizesJoinAnswer(t *testing.T) {
	s := NewWireSizes()
	for _, c := range []struct{ hosts, routes int }{{1, 0}, {2, 0}, {9, 0}, {15, 0}, {16, 3}, {17, 0}, {127, 0}, {128, 0}, {300, 20}, {3000, 0}, {70000, 0}} {
		id := task.HostID(c.hosts)
		h := &hello{Version: ProtocolVersion, Host: MasterID, Name: "master", Info: simHost(MasterID), Assigned: id, Seen: simHost(id).Addr}
		h.Info.Name, h.Info.Addr, h.Info.Master = "master", "master:7946", true
		var es []hostlist.Entry
		for i := range c.hosts {
			es = append(es, entryOf(simListed(task.HostID(i))))
		}
		h.HostList = hostlist.AppendSnapshot(nil, uint64(c.hosts), es)
		for range c.routes {
			h.Routes = append(h.Routes, routing.Entry{TID: task.NewTID(id, 1), Route: routing.Route{Host: id, Epoch: 1}})
		}
		if got, want := s.JoinAnswer(id, c.hosts, c.routes), wireFrameLen(routing.KindHello, h); got != want {
			t.Errorf("%d hosts, %d routes: JoinAnswer %d, the answer encodes in %d", c.hosts, c.routes, got, want)
		}
	}
}

// TestWireSizesFrames checks that every size counts its frame's header
// and a body, and that a route and a ping are as small as they are.
func TestWireSizesFrames(t *testing.T) {
	s := NewWireSizes()
	tid := task.NewTID(3, 9)
	r := routing.Route{Host: 4, Epoch: 2}
	for name, n := range map[string]int{
		"hello": s.JoinHello(5), "host-add": s.HostAdd(5), "spawn": s.SpawnCall(tid, "x", 0, 1), "start": s.StartCall(tid, "x", 0, 1),
		"tids": s.TIDsReply([]task.TID{tid}), "prepare": s.MoveCall(move.StepPrepare, 1, tid, r, "x", 3, 1),
		"reply": s.MoveReply(move.StepCommit, 0), "route": s.Route(tid, r), "load": s.LoadReport(5, 10),
	} {
		if n <= 6 {
			t.Errorf("%s: %d bytes, no more than a frame header", name, n)
		}
	}
	if s.Ping() != 5+len(pingPad) || s.Pong() != s.Ping() {
		t.Errorf("ping %d, pong %d bytes; want %d", s.Ping(), s.Pong(), 5+len(pingPad))
	}
	if s.SpawnCall(tid, "x", 100, 1) != s.SpawnCall(tid, "x", 0, 1)+100 {
		t.Errorf("a spawn's state of 100 bytes adds %d bytes", s.SpawnCall(tid, "x", 100, 1)-s.SpawnCall(tid, "x", 0, 1))
	}
}
