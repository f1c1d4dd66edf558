package sim

import (
	"slices"
	"strings"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// Wire gives the bytes a message to or from the master takes on the
// wire, frame header included, as the daemon encodes it: a scale run
// counts each message the master sends or receives and adds its size.
// daemon.WireSizes is the daemon's (`dpvm sim scale` uses it); the
// simulation itself encodes none of these messages.
type Wire interface {
	// JoinHello is host id's hello asking to join; JoinAnswer the
	// master's answer, with its whole host list, when hosts hosts (the
	// master's own entry and id's included) are on the list and routes
	// routes are registered; HostAdd the master's delta announcing id to
	// each host that joined before it.
	JoinHello(id task.HostID) int
	JoinAnswer(id task.HostID, hosts, routes int) int
	HostAdd(id task.HostID) int
	// SpawnCall is a task's call to the master spawning count tasks of
	// typ with state bytes of state; StartCall the master's call
	// starting count of them at the host it placed them on; TIDsReply
	// the answer to either.
	SpawnCall(parent task.TID, typ string, state, count int) int
	StartCall(parent task.TID, typ string, state, count int) int
	TIDsReply(tids []task.TID) int
	// MoveCall is the master's call of a move's step at a host (peer:
	// the move's other end); MoveReply the host's answer (bytes: the
	// checkpoint's, for the send step).
	MoveCall(step move.Step, m move.ID, tid task.TID, r routing.Route, typ string, peer task.HostID, job uint64) int
	MoveReply(step move.Step, bytes int) int
	// Route is the master's broadcast of one route to one host.
	Route(tid task.TID, r routing.Route) int
	// Ping is a host's heartbeat, Pong the master's answer; LoadReport a
	// host's load report, with tasks tasks of one job.
	Ping() int
	Pong() int
	LoadReport(id task.HostID, tasks int) int
}

// Kinds of message a scale run counts (KindCount.Kind).
const (
	KindJoin     = "join.hello"  // a host's hello (in), the master's answer (out)
	KindHostAdd  = "event.hosts" // the master's delta announcing a new host (out)
	KindSpawn    = "call.spawn"  // a task's spawn (in), its answer (out)
	KindStart    = "call.start"  // the master's start at a host (out), its answer (in)
	KindMoveCall = "call.move."  // + the step: a move's step (out), its answer (in)
	KindRoute    = "event.route" // a route broadcast to a host (out)
	KindPing     = "ping"        // a host's heartbeat (in), the master's pong (out)
	KindLoad     = "event.load"  // a host's load report (in)
)

// KindCount is what the master sent and received of one kind of
// message: messages and bytes, in (to the master) and out (from it).
type KindCount struct {
	Kind     string `json:"kind"`
	MsgsIn   int64  `json:"msgs_in"`
	MsgsOut  int64  `json:"msgs_out"`
	BytesIn  int64  `json:"bytes_in"`
	BytesOut int64  `json:"bytes_out"`
}

// meter counts the master's messages by kind during a scale run (nil
// in other runs): what the master receives (in) and sends (out), and
// when it last sent anything to each host (the master answers a ping
// only after a silence).
type meter struct {
	wire  Wire
	kinds map[string]*KindCount
	// lastOut is, by host ID, when the master last sent the host
	// anything (-1: never).
	lastOut []time.Duration
}

func newMeter(wire Wire, hosts int) *meter {
	m := &meter{wire: wire, kinds: map[string]*KindCount{}, lastOut: make([]time.Duration, hosts+1)}
	for i := range m.lastOut {
		m.lastOut[i] = -1
	}
	return m
}

func (m *meter) kind(k string) *KindCount {
	c := m.kinds[k]
	if c == nil {
		c = &KindCount{Kind: k}
		m.kinds[k] = c
	}
	return c
}

// in counts n messages of kind k to the master, of bytes bytes each.
func (m *meter) in(k string, n, bytes int) {
	c := m.kind(k)
	c.MsgsIn += int64(n)
	c.BytesIn += int64(n) * int64(bytes)
}

// out counts a message of kind k of bytes bytes from the master to host
// to, sent at now.
func (m *meter) out(k string, to task.HostID, bytes int, now time.Duration) {
	c := m.kind(k)
	c.MsgsOut++
	c.BytesOut += int64(bytes)
	if int(to) < len(m.lastOut) {
		m.lastOut[to] = now
	}
}

// take returns the counts since the last take, by kind in name order,
// and starts counting afresh.
func (m *meter) take() []KindCount {
	out := make([]KindCount, 0, len(m.kinds))
	for _, c := range m.kinds {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b KindCount) int { return strings.Compare(a.Kind, b.Kind) })
	m.kinds = map[string]*KindCount{}
	return out
}

// zeroWire is the Wire of a scale run given none: every message counts
// 0 bytes.
type zeroWire struct{}

func (zeroWire) JoinHello(task.HostID) int                { return 0 }
func (zeroWire) JoinAnswer(task.HostID, int, int) int     { return 0 }
func (zeroWire) HostAdd(task.HostID) int                  { return 0 }
func (zeroWire) SpawnCall(task.TID, string, int, int) int { return 0 }
func (zeroWire) StartCall(task.TID, string, int, int) int { return 0 }
func (zeroWire) TIDsReply([]task.TID) int                 { return 0 }
func (zeroWire) MoveReply(move.Step, int) int             { return 0 }
func (zeroWire) Route(task.TID, routing.Route) int        { return 0 }
func (zeroWire) Ping() int                                { return 0 }
func (zeroWire) Pong() int                                { return 0 }
func (zeroWire) LoadReport(task.HostID, int) int          { return 0 }
func (zeroWire) MoveCall(move.Step, move.ID, task.TID, routing.Route, string, task.HostID, uint64) int {
	return 0
}
