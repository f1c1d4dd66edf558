package routing

import (
	"testing"

	"github.com/dpvm/dpvm/task"
)

func TestJudge(t *testing.T) {
	const master, h2, h3, h4, h5 = task.HostID(1), task.HostID(2), task.HostID(3), task.HostID(4), task.HostID(5)
	onH2 := task.NewTID(h2, 7) // origin h2
	atHome := Knowledge{Route: Route{Host: h2}, Master: master}
	moved := Knowledge{Route: Route{Host: h4, Epoch: 3}, Past: []task.HostID{h3, h2}, Master: master}
	moving := Knowledge{Route: Route{Host: h4, Epoch: 3, InTransit: true}, Past: []task.HostID{h3}, Master: master}
	cases := []struct {
		name string
		c    Claim
		k    Knowledge
		want Verdict
	}{
		{"own task's message", Claim{ClaimSource, onH2, h2}, atHome, Allow},
		{"another host's task's message", Claim{ClaimSource, onH2, h3}, atHome, RefuseElsewhere},
		{"the master forging a source", Claim{ClaimSource, onH2, master}, atHome, RefuseElsewhere},
		{"zero TID", Claim{ClaimSource, 0, h2}, atHome, RefuseNoTask},
		{"AnyTask", Claim{ClaimAct, task.AnyTask, h2}, atHome, RefuseNoTask},
		{"TID of no host", Claim{ClaimSource, task.NewTID(0, 5), h2}, atHome, RefuseNoTask},
		{"no claimant", Claim{ClaimSource, onH2, 0}, atHome, RefuseNoTask},
		{"resend from an old host", Claim{ClaimSource, onH2, h3}, moved, Allow},
		{"resend from the origin", Claim{ClaimSource, onH2, h2}, moved, Allow},
		{"message from the new host", Claim{ClaimSource, onH2, h4}, moved, Allow},
		{"message from a host it never lived on", Claim{ClaimSource, onH2, h5}, moved, RefuseElsewhere},
		{"ack from the host", Claim{ClaimReceiver, onH2, h4}, moved, Allow},
		{"ack from an old host", Claim{ClaimReceiver, onH2, h3}, moved, Allow},
		{"forged ack", Claim{ClaimReceiver, onH2, h5}, moved, RefuseElsewhere},
		{"notice from the master", Claim{ClaimNotice, onH2, master}, moved, Allow},
		{"notice relayed by an old host", Claim{ClaimNotice, onH2, h3}, moved, Allow},
		{"notice from a stranger", Claim{ClaimNotice, onH2, h5}, moved, RefuseElsewhere},
		{"act where it runs", Claim{ClaimAct, onH2, h4}, moved, Allow},
		{"act from the host it just left", Claim{ClaimAct, onH2, h3}, moved, Allow},
		{"act from an older host", Claim{ClaimAct, onH2, h2}, moved, RefuseElsewhere},
		{"act from a stranger", Claim{ClaimAct, onH2, h5}, atHome, RefuseElsewhere},
		{"exit where it runs", Claim{ClaimExit, onH2, h4}, moved, Allow},
		{"exit from the host it left, move committed", Claim{ClaimExit, onH2, h3}, moved, RefuseElsewhere},
		{"exit from the host it is leaving", Claim{ClaimExit, onH2, h3}, moving, Allow},
		{"exit at the destination of a move", Claim{ClaimExit, onH2, h4}, moving, Allow},
		{"exit from a stranger", Claim{ClaimExit, onH2, h5}, moving, RefuseElsewhere},
		{"unknown kind", Claim{ClaimKind(99), onH2, h2}, atHome, RefuseElsewhere},
	}
	for _, c := range cases {
		if got := Judge(c.c, c.k); got != c.want {
			t.Errorf("%s: Judge(%+v) = %v, want %v", c.name, c.c, got, c.want)
		}
	}
}

// TestTablePast: a table remembers where a task lived before, newest
// first and bounded, also after the task has ended; Table.Judge uses it.
func TestTablePast(t *testing.T) {
	tb := NewTable()
	tid := task.NewTID(2, 1)
	if p := tb.Past(tid); len(p) != 0 {
		t.Fatalf("past of a task that never moved: %v", p)
	}
	for e, h := range []task.HostID{3, 4, 5, 6, 7} {
		tb.Update(tid, Route{Host: h, Epoch: uint64(e + 1), InTransit: true})
		tb.Update(tid, Route{Host: h, Epoch: uint64(e + 1)}) // the commit: no new past
	}
	want := []task.HostID{6, 5, 4, 3}
	if p := tb.Past(tid); len(p) != len(want) || p[0] != want[0] || p[3] != want[3] {
		t.Fatalf("past %v, want %v", p, want)
	}
	if v := tb.Judge(Claim{ClaimSource, tid, 2}, 1); v != Allow {
		t.Errorf("a resend from the origin: %v", v)
	}
	if v := tb.Judge(Claim{ClaimSource, tid, 4}, 1); v != Allow {
		t.Errorf("a resend from an old host: %v", v)
	}
	if v := tb.Judge(Claim{ClaimAct, tid, 4}, 1); v != RefuseElsewhere {
		t.Errorf("an act from an old host: %v", v)
	}
	ended := tb.Lookup(tid).Epoch
	tb.Forget(tid)
	if p := tb.Past(tid); len(p) != MaxPast || p[0] != 7 {
		t.Fatalf("past after the task ended: %v, want 7 first", p)
	}
	if e, ok := tb.Ended(tid); !ok || e != ended {
		t.Errorf("Ended after Forget: e%d %v, want e%d", e, ok, ended)
	}
	ev := task.NewTID(8, 1)
	tb.Update(ev, Route{Host: 3, Epoch: 2})
	tb.Evict(ev)
	if _, ok := tb.Ended(ev); ok || tb.Lookup(ev).Epoch != 0 || len(tb.Past(ev)) == 0 {
		t.Errorf("after Evict: ended %v, route %v, past %v; want not ended, no entry, its past", ok, tb.Lookup(ev), tb.Past(ev))
	}
	if v := tb.Judge(Claim{ClaimSource, tid, 7}, 1); v != Allow {
		t.Errorf("a resend from the host it ended on: %v", v)
	}
	// Only the MaxRetired tasks that ended last keep theirs.
	for i := range MaxRetired {
		x := task.NewTID(9, uint32(i+1))
		tb.Update(x, Route{Host: 3, Epoch: 1})
		tb.Forget(x)
	}
	if p := tb.Past(tid); len(p) != 0 {
		t.Fatalf("the past of a task ended long ago is kept: %v", p)
	}
	if len(tb.past) != MaxRetired || len(tb.endedAt) > MaxRetired {
		t.Fatalf("%d pasts and %d ends kept, want %d", len(tb.past), len(tb.endedAt), MaxRetired)
	}
	if _, ok := tb.Ended(tid); ok {
		t.Errorf("the end of a task ended long ago is kept")
	}
}

// FuzzJudge holds Judge to its invariants for any claim and knowledge:
// no claim about no task is allowed; a host speaks for a task it never
// hosted, as far as the judge knows, only when it relays the master's
// notice; an exit or an act is allowed only where the task runs or has
// just run.
func FuzzJudge(f *testing.F) {
	f.Add(uint8(1), uint64(task.NewTID(2, 1)), uint32(2), uint32(3), uint64(1), false, uint32(4), uint32(5))
	f.Fuzz(func(t *testing.T, kind uint8, tid uint64, by, host uint32, epoch uint64, transit bool, p0, p1 uint32) {
		var past []task.HostID
		for _, p := range []uint32{p0, p1} {
			if p != 0 {
				past = append(past, task.HostID(p))
			}
		}
		c := Claim{Kind: ClaimKind(kind), Task: task.TID(tid), By: task.HostID(by)}
		k := Knowledge{Route: Route{Host: task.HostID(host), Epoch: epoch, InTransit: transit}, Past: past, Master: 1}
		v := Judge(c, k)
		if v != Allow {
			return
		}
		if c.Task == 0 || c.Task == task.AnyTask || c.Task.Host() == 0 || c.By == 0 {
			t.Fatalf("allowed a claim about no task: %+v", c)
		}
		known := c.By == k.Route.Host || c.By == c.Task.Host() || inPast(c.By, past)
		if !known && !(c.Kind == ClaimNotice && c.By == k.Master) {
			t.Fatalf("allowed %+v from a host the task never lived on (%+v)", c, k)
		}
		if (c.Kind == ClaimAct || c.Kind == ClaimExit) && c.By != k.Route.Host && (len(past) == 0 || c.By != past[0]) {
			t.Fatalf("allowed %+v away from where it runs (%+v)", c, k)
		}
	})
}
