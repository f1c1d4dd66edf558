package swim

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// FuzzParseMsg: any bytes are refused with an error or decode to a Msg
// that encodes back to the same bytes.
func FuzzParseMsg(f *testing.F) {
	m := Msg{Kind: PingReq, From: 1, To: 2, Inc: 3, Seq: 4, Target: 5, Gossip: []Update{{State: Suspect, Host: 5, Inc: 1, From: 1}}}
	b, err := AppendMsg(nil, m)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMsg(b, MaxGossip)
		if err != nil {
			return
		}
		again, err := AppendMsg(nil, m)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("%v encodes to %x (%v), was %x", m, again, err, b)
		}
	})
}

// FuzzNodes drives four Nodes and a Referee by a byte string: each byte
// pair picks an action — deliver, drop or duplicate a message in flight,
// advance the clock and tick a node, feed a node a message made of the
// bytes that follow (anything ParseMsg takes: forged senders, stale or
// future incarnations, updates about anyone), report to or check with the
// master. After every step: no panic; incarnations never go back; every
// message sent is from its node, to another, within MaxPiggyback updates,
// and survives the wire; a node never needs a step in the past; the
// master deletes only hosts whose checks all went unanswered.
func FuzzNodes(f *testing.F) {
	f.Add([]byte{0, 10, 1, 3, 2, 40, 0, 0, 3, 200, 1, 1})
	f.Add(bytes.Repeat([]byte{2, 255, 0, 1, 1, 0}, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		const n = 4
		now := time.Unix(0, 0).UTC()
		roster := []task.HostID{1, 2, 3, 4}
		ref, err := NewReferee(Config{})
		if err != nil {
			t.Fatal(err)
		}
		nodes := make([]*Node, n)
		incs := make([]uint32, n)
		var flight []Msg
		answered := map[task.HostID]bool{}    // answered a check since its last report of death
		checks := map[task.HostID]RefEffect{} // the master's latest check of each host
		master := func(effs []RefEffect) {
			for _, re := range effs {
				switch re.Kind {
				case RefCheck:
					checks[re.Host] = re
				case RefDelete:
					if answered[re.Host] {
						t.Fatalf("the master deleted %v, which answered its check", re.Host)
					}
				}
			}
		}
		step := func(i int, ev Event) {
			effs := nodes[i].Step(now, ev)
			if inc := nodes[i].Incarnation(); inc < incs[i] {
				t.Fatalf("h%d: incarnation went back from %d to %d", i+1, incs[i], inc)
			} else {
				incs[i] = inc
			}
			if next := nodes[i].Next(); next.Before(now) {
				t.Fatalf("h%d: next step %v is before now %v", i+1, next, now)
			}
			self := task.HostID(i + 1)
			for _, e := range effs {
				switch e.Kind {
				case EffSend:
					m := e.Msg
					if m.From != self || m.To == self || len(m.Gossip) > nodes[i].cfg.MaxPiggyback {
						t.Fatalf("h%d sends %v", i+1, m)
					}
					w, err := AppendMsg(nil, m)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := ParseMsg(w, MaxGossip); err != nil {
						t.Fatalf("%v does not survive the wire: %v", m, err)
					}
					flight = append(flight, m)
				case EffReport:
					if e.Update.State == Dead {
						answered[e.Update.Host] = false
					}
					master(ref.Step(now, RefEvent{Kind: RefReport, From: self, Update: e.Update}))
				}
			}
		}
		for i := range n {
			nd, err := New(task.HostID(i+1), 0, Config{}, rand.New(rand.NewPCG(uint64(i), 7)))
			if err != nil {
				t.Fatal(err)
			}
			nodes[i] = nd
			ref.Step(now, RefEvent{Kind: RefAdmit, Host: task.HostID(i + 1)})
			step(i, Event{Kind: EvJoin, Roster: roster})
		}
		for len(b) >= 2 {
			op, arg := b[0], b[1]
			b = b[2:]
			switch op % 6 {
			case 0: // deliver
				if len(flight) > 0 {
					k := int(arg) % len(flight)
					m := flight[k]
					flight = append(flight[:k], flight[k+1:]...)
					if m.To >= 1 && m.To <= n {
						step(int(m.To-1), Event{Kind: EvMsg, Msg: m})
					}
				}
			case 1: // drop
				if len(flight) > 0 {
					k := int(arg) % len(flight)
					flight = append(flight[:k], flight[k+1:]...)
				}
			case 2: // time passes; a node ticks
				now = now.Add(time.Duration(arg) * 20 * time.Millisecond)
				step(int(arg)%n, Event{Kind: EvTick})
			case 3: // a forged or odd message
				l := min(len(b), int(arg)%(headerLen+2*updateLen+1))
				if m, err := ParseMsg(b[:l], MaxGossip); err == nil && m.To >= 1 && m.To <= n {
					step(int(m.To-1), Event{Kind: EvMsg, Msg: m})
				}
				b = b[l:]
			case 4: // the master checks a host, which answers
				h := task.HostID(1 + int(arg)%n)
				c, ok := checks[h]
				if !ok {
					break
				}
				delete(checks, h)
				for _, e := range nodes[h-1].Step(now, Event{Kind: EvCheck, Seq: c.Seq, Inc: c.Inc}) {
					if e.Kind == EffCheckAck {
						answered[h] = true
						master(ref.Step(now, RefEvent{Kind: RefCheckAck, Host: h, Seq: e.Seq, Inc: e.Inc}))
					}
				}
			case 5: // the master's clock; a rejoin answered
				now = now.Add(time.Duration(arg) * 10 * time.Millisecond)
				master(ref.Step(now, RefEvent{Kind: RefTick}))
				if i := int(arg) % n; nodes[i].Rejoining() {
					step(i, Event{Kind: EvRejoined})
				}
			}
		}
	})
}
