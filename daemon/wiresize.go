package daemon

import (
	"strconv"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/hostlist"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// WireSizes gives the bytes the master's messages take on a connection,
// frame header included, encoded as this daemon encodes them (wire.go's
// hello, call, reply and event, peer.go's frames): the cost model of
// daemon/sim's scale run (`dpvm sim scale`), which counts the messages.
// A host is described as the simulation names it ("h" and its ID, at
// "hID:7946", one core, this binary's build); a call's ID is counted as
// the 32-bit integer it is after 65,535 calls. The answer to a join
// leaves out the cluster secret and the revocation list (their size is
// the operator's, not the virtual machine's). Use NewWireSizes.
type WireSizes struct {
	// hosts[n] is the encoded size of the first n hosts' entries of the
	// host list (routing/hostlist's encoding), without the list's header
	// (joins list the hosts before).
	hosts []int
}

// NewWireSizes returns a WireSizes.
func NewWireSizes() *WireSizes { return &WireSizes{hosts: []int{0}} }

// wireCallID is the call ID the sizes count: an ID past 65,535, as a busy
// master's are (msgpack writes it in 5 bytes).
const wireCallID = 1 << 20

// wireFrameLen is the size on the wire of a frame of kind k with v's encoding.
func wireFrameLen(k routing.Kind, v any) int {
	b, err := msgpack.Marshal(v)
	if err != nil {
		// The values below are the daemon's own message types, which
		// always encode.
		panic("wire size: " + err.Error())
	}
	return len(routing.AppendFrame(nil, k, b))
}

// callLen is the size of a call of method with body args.
func callLen(method string, args any) int {
	b, err := msgpack.Marshal(args)
	if err != nil {
		panic("wire size: " + err.Error())
	}
	return wireFrameLen(routing.KindCall, &call{ID: wireCallID, Method: method, Body: b})
}

// replyLen is the size of a reply with body rep (nil: none).
func replyLen(rep any) int {
	r := &reply{ID: wireCallID}
	if rep != nil {
		b, err := msgpack.Marshal(rep)
		if err != nil {
			panic("wire size: " + err.Error())
		}
		r.Body = b
	}
	return wireFrameLen(routing.KindReply, r)
}

// simHost is host id as the sizes describe it.
func simHost(id task.HostID) HostInfo {
	name := "h" + strconv.FormatUint(uint64(id), 10)
	return HostInfo{ID: id, Name: name, Addr: name + ":7946", Cores: 1, Speed: 1, Build: ThisBuild()}
}

// JoinHello is a joining host's hello to the master.
func (s *WireSizes) JoinHello(id task.HostID) int {
	info := simHost(id)
	info.ID = 0
	return wireFrameLen(routing.KindHello, &hello{Version: ProtocolVersion, Name: info.Name, Addr: info.Addr, Join: true, Info: info})
}

// JoinAnswer is the master's answer to host id's join when hosts hosts
// are on its list (the master, the hosts before id, and id, listed at its
// admission) and routes routes are set: the whole host list (hostlist's
// encoding, at version hosts: one change per host) and the routing table
// (each route the same size as one of id's tasks').
func (s *WireSizes) JoinAnswer(id task.HostID, hosts, routes int) int {
	for len(s.hosts) <= hosts {
		n := len(s.hosts) - 1 // the entry of the n+1th host: the master, then h1, h2, …
		e := entryOf(simListed(task.HostID(n)))
		s.hosts = append(s.hosts, s.hosts[n]+len(hostlist.AppendSnapshot(nil, 0, []hostlist.Entry{e}))-2)
	}
	// The answer with a list of one byte and one route, then the lists'
	// real sizes in place of those.
	one := routing.Entry{TID: task.NewTID(id, 1), Route: routing.Route{Host: id, Epoch: 1}}
	h := &hello{Version: ProtocolVersion, Host: MasterID, Name: "master", Info: simHost(MasterID), Assigned: id,
		Seen: simHost(id).Addr, HostList: []byte{0}, Routes: []routing.Entry{one}}
	h.Info.Name, h.Info.Addr, h.Info.Master = "master", "master:7946", true
	base := wireFrameLen(routing.KindHello, h)
	e1, _ := msgpack.Marshal(&one)
	n := base - 2 - 1 - len(e1) - 1 // the list's bin header and byte; the routes' one-entry array
	list := uvarintLen(uint64(hosts)) + uvarintLen(uint64(hosts)) + s.hosts[hosts]
	n += binHeader(list) + list
	if routes > 0 {
		n += arrayHeader(routes) + routes*len(e1)
	} else {
		n -= 1 + len("rt") // an empty list is left out, its key too
	}
	return n
}

// simListed is the n+1th host on the simulation's list: the master, then
// h1, h2, ….
func simListed(n task.HostID) HostInfo {
	info := simHost(n)
	if n == 0 {
		info.Name, info.Addr, info.Master = "master", "master:7946", true
	}
	return info
}

// uvarintLen is the size of v as an unsigned varint.
func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// binHeader is the size of msgpack's header of a byte string of n bytes.
func binHeader(n int) int {
	switch {
	case n < 1<<8:
		return 2
	case n < 1<<16:
		return 3
	default:
		return 5
	}
}

// arrayHeader is the size of msgpack's header of an array of n items.
func arrayHeader(n int) int {
	switch {
	case n < 16:
		return 1
	case n < 1<<16:
		return 3
	default:
		return 5
	}
}

// HostAdd is the master's announcement of host id to each other host:
// the delta adding it to the host list, of version id+1 (the master's
// entry, then one change per host before it).
func (s *WireSizes) HostAdd(id task.HostID) int {
	d := hostlist.Delta{Seq: uint64(id) + 1, Op: hostlist.OpAdd, Entry: entryOf(simHost(id))}
	return wireFrameLen(routing.KindEvent, &event{Kind: evHosts, Deltas: hostlist.AppendDeltas(nil, []hostlist.Delta{d})})
}

// SpawnCall is a task's spawn of count tasks of typ with state bytes of
// state, from its host to the master; StartCall the master's start of
// them at the host it placed them on (count at that host).
func (s *WireSizes) SpawnCall(parent task.TID, typ string, state, count int) int {
	return callLen(mSpawn, spawnArgs{Parent: parent, Job: 1, Req: task.SpawnRequest{Type: typ, State: make([]byte, state), Count: count}})
}

// StartCall is the master's call starting count tasks of a spawn at the
// host it placed them on (its start ID drawn from the whole uint64 range,
// as startOn's are).
func (s *WireSizes) StartCall(parent task.TID, typ string, state, count int) int {
	return callLen(mStart, spawnArgs{Parent: parent, Job: 1, Req: task.SpawnRequest{Type: typ, State: make([]byte, state), Count: count}, Start: 1 << 63})
}

// TIDsReply is the answer to a spawn or a start: the tasks' TIDs.
func (s *WireSizes) TIDsReply(tids []task.TID) int { return replyLen(tidsReply{TIDs: tids}) }

// MoveCall is the master's call of a move's step to a host
// (daemon/migrate.go's callStep): tid's move m to route r, of a task of
// type typ and job job whose other end is peer, direct.
func (s *WireSizes) MoveCall(step move.Step, m move.ID, tid task.TID, r routing.Route, typ string, peer task.HostID, job uint64) int {
	a := migStep{TID: tid, Move: m, Epoch: r.Epoch, Route: r}
	switch step {
	case move.StepPrepare:
		a.Type, a.Host, a.Job = typ, peer, job
	case move.StepSuspend:
		a.Type, a.Job, a.Host, a.Timeout = typ, job, r.Host, 10*time.Second
	case move.StepSend:
		a.Host, a.Via, a.Name = r.Host, Direct, checkpointName(tid, r.Epoch)
	case move.StepRestore:
		a.Host, a.Via, a.Name, a.Timeout = peer, Direct, checkpointName(tid, r.Epoch), 10*time.Second
	}
	return callLen(stepMethods[step], a)
}

// MoveReply is a host's answer to a move's step; a send's counts the
// checkpoint's bytes.
func (s *WireSizes) MoveReply(step move.Step, bytes int) int {
	r := migReply{}
	if step == move.StepSend {
		r.Bytes = int64(bytes)
	}
	return replyLen(r)
}

// Route is the master's broadcast of tid's route r to each host.
func (s *WireSizes) Route(tid task.TID, r routing.Route) int {
	return wireFrameLen(routing.KindEvent, &event{Kind: evRoute, Routes: []routing.Entry{{TID: tid, Route: r}}})
}

// Ping is a host's heartbeat to the master; Pong the master's answer.
func (s *WireSizes) Ping() int { return len(routing.AppendFrame(nil, routing.KindPing, pingPad[:])) }

// Pong is the master's answer to a ping (the ping's body, echoed).
func (s *WireSizes) Pong() int { return len(routing.AppendFrame(nil, routing.KindPong, pingPad[:])) }

// LoadReport is host id's load report (scheduler.go's sendReport) with
// tasks tasks of one job.
func (s *WireSizes) LoadReport(id task.HostID, tasks int) int {
	info := simHost(id)
	info.Tasks, info.Load = tasks, float64(tasks)
	return wireFrameLen(routing.KindEvent, &event{Kind: evLoad, Load: &info, Jobs: []uint64{1}})
}
