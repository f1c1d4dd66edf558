package swim

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/routing/internal/transcript"
	"github.com/dpvm/dpvm/task"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the transcripts under testdata/ with what the machines do now")

// TestTranscripts replays the scripted scenarios of testdata/*.txt, in the
// format of routing/move's: a command, a line "----", the transcript it
// produces (the effects, in order, or "ok"), a blank line; lines starting
// with # are comments. Commands drive one Node and one Referee, on one
// virtual clock starting at +0s:
//
//	node <self> <h1,h2,...>       a Node (seeded rand 1) joined to the roster
//	tick <duration>               advance the clock and step EvTick
//	wait <duration>               advance the clock only
//	run <duration>                tick at every Next() within the duration,
//	                              each effect prefixed by its time
//	recv <msg>                    step EvMsg; <msg> as Msg.String prints it
//	check s<seq> #<inc>           step EvCheck
//	gossip <update>               step EvGossip; <update> as Update.String
//	rejoined | forget <host>      step EvRejoined, EvForget
//	view                          the node's view, health and next step
//	ref admit <host> #<inc>       the Referee: RefAdmit
//	ref report <from> <update>    RefReport
//	ref ack <host> s<seq> #<inc>  RefCheckAck
//	ref tick <duration>           advance the clock and step RefTick
//
// go test ./routing/swim -run TestTranscripts -rewrite updates them.
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s := &script{t: t, start: time.Unix(0, 0).UTC()}
			s.now = s.start
			ref, err := NewReferee(Config{})
			if err != nil {
				t.Fatal(err)
			}
			s.ref = ref
			transcript.Run(t, f, *rewrite, s.run)
		})
	}
}

type script struct {
	t          *testing.T
	start, now time.Time
	node       *Node
	ref        *Referee
}

func (s *script) run(cmd string) string {
	t := s.t
	f := strings.Fields(cmd)
	var lines []string
	effects := func(effs []Effect) {
		for _, e := range effs {
			lines = append(lines, e.String())
		}
	}
	refEffects := func(effs []RefEffect) {
		for _, e := range effs {
			lines = append(lines, e.String())
		}
	}
	switch f[0] {
	case "node":
		var roster []task.HostID
		for _, x := range strings.Split(f[2], ",") {
			roster = append(roster, host(t, x))
		}
		n, err := New(host(t, f[1]), 0, Config{}, rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			t.Fatal(err)
		}
		s.node = n
		effects(n.Step(s.now, Event{Kind: EvJoin, Roster: roster}))
	case "tick":
		s.now = s.now.Add(dur(t, f[1]))
		effects(s.node.Step(s.now, Event{Kind: EvTick}))
	case "wait":
		s.now = s.now.Add(dur(t, f[1]))
	case "run":
		end := s.now.Add(dur(t, f[1]))
		for next := s.node.Next(); !next.After(end); next = s.node.Next() {
			s.now = next
			for _, e := range s.node.Step(s.now, Event{Kind: EvTick}) {
				lines = append(lines, fmt.Sprintf("+%v %v", s.now.Sub(s.start), e))
			}
		}
		s.now = end
	case "recv":
		m, err := parseMsg(strings.TrimPrefix(cmd, "recv "))
		if err != nil {
			t.Fatal(err)
		}
		effects(s.node.Step(s.now, Event{Kind: EvMsg, Msg: m}))
	case "check":
		effects(s.node.Step(s.now, Event{Kind: EvCheck, Seq: uint32(num(t, strings.TrimPrefix(f[1], "s"))), Inc: uint32(num(t, strings.TrimPrefix(f[2], "#")))}))
	case "gossip":
		u, err := parseUpdate(strings.TrimPrefix(cmd, "gossip "))
		if err != nil {
			t.Fatal(err)
		}
		effects(s.node.Step(s.now, Event{Kind: EvGossip, Update: u}))
	case "rejoined":
		effects(s.node.Step(s.now, Event{Kind: EvRejoined}))
	case "forget":
		effects(s.node.Step(s.now, Event{Kind: EvForget, Host: host(t, f[1])}))
	case "view":
		n := s.node
		for _, h := range n.roster {
			st, inc, _ := n.State(h)
			lines = append(lines, fmt.Sprintf("%v %v#%d", h, st, inc))
		}
		lines = append(lines, fmt.Sprintf("health %d, rejoining %v, next +%v", n.Awareness(), n.Rejoining(), n.Next().Sub(s.start)))
	case "ref":
		switch f[1] {
		case "admit":
			refEffects(s.ref.Step(s.now, RefEvent{Kind: RefAdmit, Host: host(t, f[2]), Inc: uint32(num(t, strings.TrimPrefix(f[3], "#")))}))
		case "report":
			u, err := parseUpdate(strings.Join(f[3:], " "))
			if err != nil {
				t.Fatal(err)
			}
			refEffects(s.ref.Step(s.now, RefEvent{Kind: RefReport, From: host(t, f[2]), Update: u}))
		case "ack":
			refEffects(s.ref.Step(s.now, RefEvent{Kind: RefCheckAck, Host: host(t, f[2]), Seq: uint32(num(t, strings.TrimPrefix(f[3], "s"))), Inc: uint32(num(t, strings.TrimPrefix(f[4], "#")))}))
		case "tick":
			s.now = s.now.Add(dur(t, f[2]))
			refEffects(s.ref.Step(s.now, RefEvent{Kind: RefTick}))
		default:
			t.Fatalf("unknown command %q", cmd)
		}
	default:
		t.Fatalf("unknown command %q", cmd)
	}
	if len(lines) == 0 {
		return "ok"
	}
	return strings.Join(lines, "\n")
}

var (
	msgRE    = regexp.MustCompile(`^(\S+) (h\d+)→(h\d+) #(\d+) s(\d+)(?: target (h\d+))?((?: \[[^\]]*\])*)$`)
	updateRE = regexp.MustCompile(`^(alive|suspect|dead) (h\d+)#(\d+)(?: by (h\d+|h0))?$`)
)

// parseMsg reads a Msg as Msg.String prints it.
func parseMsg(s string) (Msg, error) {
	g := msgRE.FindStringSubmatch(s)
	if g == nil {
		return Msg{}, fmt.Errorf("not a message: %q", s)
	}
	var m Msg
	for k := Ping; k <= Nack; k++ {
		if k.String() == g[1] {
			m.Kind = k
		}
	}
	if m.Kind == 0 {
		return Msg{}, fmt.Errorf("no message kind %q", g[1])
	}
	from, _ := task.ParseHostID(g[2])
	to, _ := task.ParseHostID(g[3])
	inc, _ := strconv.ParseUint(g[4], 10, 32)
	seq, _ := strconv.ParseUint(g[5], 10, 32)
	m.From, m.To, m.Inc, m.Seq = from, to, uint32(inc), uint32(seq)
	if g[6] != "" {
		m.Target, _ = task.ParseHostID(g[6])
	}
	for _, part := range strings.Split(g[7], "]") {
		part = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(part), "["))
		if part == "" {
			continue
		}
		u, err := parseUpdate(part)
		if err != nil {
			return Msg{}, err
		}
		m.Gossip = append(m.Gossip, u)
	}
	return m, nil
}

// parseUpdate reads an Update as Update.String prints it.
func parseUpdate(s string) (Update, error) {
	g := updateRE.FindStringSubmatch(strings.TrimSpace(s))
	if g == nil {
		return Update{}, fmt.Errorf("not an update: %q", s)
	}
	var u Update
	for st := Alive; st <= Dead; st++ {
		if st.String() == g[1] {
			u.State = st
		}
	}
	u.Host, _ = task.ParseHostID(g[2])
	inc, _ := strconv.ParseUint(g[3], 10, 32)
	u.Inc = uint32(inc)
	u.From = u.Host
	if g[4] != "" {
		u.From, _ = task.ParseHostID(g[4])
	}
	return u, nil
}

func host(t *testing.T, s string) task.HostID {
	h, err := task.ParseHostID(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func num(t *testing.T, s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func dur(t *testing.T, s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
