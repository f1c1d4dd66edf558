package route_test

import (
	"slices"
	"testing"

	"github.com/dpvm/dpvm/task"
)

// moveCost is what routing's frames cost per move, in one mode at one N.
type moveCost struct {
	moves, done               int
	masterFrames, masterBytes int // the master's routes, per move
	partyFrames, partyBytes   int // at the task's origin, old and new hosts, per move
	senderFrames, senderBytes int // at the senders' hosts, per move
	othersFrames, othersBytes int // at all the other hosts together, per move
	otherMaxFrames            int // at the busiest other host, per move
}

// runCost moves one task (t1:1, born on h1) from host to host, each move
// followed by one message from each of four senders (on h2…h5) to it, on
// a lossless network, and returns routing's cost per move.
func runCost(t *testing.T, hosts int, md mode, moves int) moveCost {
	n := newMNet(t, 7, hosts, md)
	n.lossless = true
	target := task.NewTID(1, 1)
	n.hosts[1].tasks[target] = 0
	n.tasks = append(n.tasks, target)
	var senders []task.TID
	for h := task.HostID(2); h <= 5; h++ {
		s := task.NewTID(h, 1)
		n.hosts[h].tasks[s] = 0
		n.tasks = append(n.tasks, s)
		senders = append(senders, s)
	}
	idle := func() bool { return false }
	sendAll := func() {
		for _, s := range senders {
			n.send(n.hostOf(s), s, target)
		}
		n.loop(7, idle, idle)
	}
	sendAll() // every sender has a route to t1:1, at its origin
	n.cost.masterFrames, n.cost.masterBytes = 0, 0
	clear(n.cost.hostFrames)
	clear(n.cost.hostBytes)
	parties := map[task.HostID]bool{1: true}
	for k := range moves {
		dst := task.HostID(6 + k)
		parties[dst] = true
		for n.hostOf(target).id != dst { // an aborted move is tried again, at its cost
			n.begin(target, dst)
			n.loop(7, idle, idle)
		}
		sendAll()
	}
	n.final(7)
	c := moveCost{moves: n.done + n.aborted, done: n.done}
	per := func(x int) int { return x / moves }
	c.masterFrames, c.masterBytes = per(n.cost.masterFrames), per(n.cost.masterBytes)
	for _, h := range slices.Sorted(mapsKeys(n.cost.hostFrames)) {
		f, b := n.cost.hostFrames[h], n.cost.hostBytes[h]
		switch {
		case parties[h]:
			c.partyFrames += f
			c.partyBytes += b
		case h <= 5:
			c.senderFrames += f
			c.senderBytes += b
		default:
			c.othersFrames += f
			c.othersBytes += b
			c.otherMaxFrames = max(c.otherMaxFrames, f)
		}
	}
	c.partyFrames, c.partyBytes = per(c.partyFrames), per(c.partyBytes)
	c.senderFrames, c.senderBytes = per(c.senderFrames), per(c.senderBytes)
	c.othersFrames, c.othersBytes = per(c.othersFrames), per(c.othersBytes)
	c.otherMaxFrames = per(c.otherMaxFrames)
	return c
}

func mapsKeys(m map[task.HostID]int) func(func(task.HostID) bool) {
	return func(yield func(task.HostID) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestMoveCost prints, per move, the frames and bytes of routing that the
// master and the hosts handle, on demand and by broadcast, at 16, 1,024
// and 4,096 hosts: one task moves three times, and after each move four
// senders send to it. On demand the cost must not grow with N at all;
// the broadcast's master traffic grows with it.
//
//	go test ./routing/route -run TestMoveCost -v
func TestMoveCost(t *testing.T) {
	const moves = 3
	var first moveCost
	for i, hosts := range []int{16, 1024, 4096} {
		od := runCost(t, hosts, onDemand, moves)
		bc := runCost(t, hosts, broadcast, moves)
		for _, x := range []struct {
			name string
			c    moveCost
		}{{"on demand", od}, {"broadcast", bc}} {
			c := x.c
			t.Logf("N=%5d %-9s per move (%d started, %d done): master %4d frames %6d B; origin+old+new %3d frames %4d B; 4 senders %3d frames %4d B; other hosts %5d frames %6d B (busiest %d)",
				hosts, x.name, c.moves, c.done, c.masterFrames, c.masterBytes, c.partyFrames, c.partyBytes, c.senderFrames, c.senderBytes, c.othersFrames, c.othersBytes, c.otherMaxFrames)
		}
		if od.othersFrames != 0 {
			t.Errorf("N=%d: on demand, hosts that neither send to the task nor take part in its moves handled %d frames per move", hosts, od.othersFrames)
		}
		if od.masterFrames > 6 {
			t.Errorf("N=%d: on demand, the master sent %d routes per move; want at most 3 per route set (forward, and back on an abort)", hosts, od.masterFrames)
		}
		if bc.masterFrames < hosts {
			t.Errorf("N=%d: the broadcast sent %d routes per move; want at least one per host", hosts, bc.masterFrames)
		}
		if i == 0 {
			first = od
		} else if od != first {
			t.Errorf("N=%d: on demand costs %+v per move; at N=16 %+v: it must not depend on N", hosts, od, first)
		}
	}
}
