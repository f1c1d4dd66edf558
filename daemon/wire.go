package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// ProtocolVersion is the version of the daemons' wire protocol, checked
// in the handshake: daemons of different versions do not form one virtual
// machine. A tool that speaks the wire by hand (integration's forger)
// sends it.
const ProtocolVersion = 2 // 2: the host list as versioned deltas (hostlist.go)

// hello opens every connection, in both directions.
type hello struct {
	Version int         `msgpack:"v"`
	Host    task.HostID `msgpack:"h"` // the sender's host ID (0: not yet assigned, or a client)
	Name    string      `msgpack:"n"`
	Addr    string      `msgpack:"a,omitempty"` // where the sender listens
	// Advertised: Addr was set by the operator (--advertise) and is used
	// as it is; otherwise the master takes the IP its connection came
	// from, with Addr's port.
	Advertised bool `msgpack:"ad,omitempty"`
	// Detector is a joining host's failure detector when it is not the
	// master's heartbeats (Config.Detector): the master refuses a host
	// whose detector is not its own.
	Detector string `msgpack:"det,omitempty"`
	// RouteProto is a joining host's route protocol when it is not routes
	// on demand (Config.Routes): the master refuses a host whose
	// protocol is not its own.
	RouteProto string `msgpack:"rp,omitempty"`
	// Dialled is the address a joining host reached the master by.
	Dialled string `msgpack:"dl,omitempty"`
	// Seen is, in the master's answer, the address it records for the
	// joining host: where the other daemons will dial it.
	Seen string   `msgpack:"se,omitempty"`
	Join bool     `msgpack:"j,omitempty"` // a new daemon asking the master for a host ID
	Info HostInfo `msgpack:"i"`
	// Set by the master in its answer to a join.
	Assigned task.HostID `msgpack:"as,omitempty"`
	// HostList is the master's whole host list with its version
	// (routing/hostlist's encoding), in its answer to a registration.
	HostList []byte          `msgpack:"hl,omitempty"`
	Routes   []routing.Entry `msgpack:"rt,omitempty"`
	// HostsV is, in every hello of the master's, its host list's
	// version: a host whose list is older asks for the whole list.
	HostsV uint64 `msgpack:"hv,omitempty"`
	// HostsID names, in the master's answer to a registration, its host
	// list: a master started anew (recovering) has another.
	HostsID uint64 `msgpack:"hi,omitempty"`
	// Rejoin: a host registering again, with what it runs, after its
	// master was lost (Host is its host ID).
	Rejoin bool          `msgpack:"rj,omitempty"`
	Report *rejoinReport `msgpack:"rr,omitempty"`
	// TIDFloor is the largest task number of the new host's ID taken by
	// tasks restored from a job checkpoint: its own tasks number above it.
	TIDFloor uint32 `msgpack:"tf,omitempty"`
	// Secrets is, in the master's answer to a host, the cluster secret
	// (over the connection both ends authenticated with host certificates).
	Secrets []pki.Secret `msgpack:"sk,omitempty"`
	// Revoked is, in the master's answer to a host, its revocation list.
	Revoked []string `msgpack:"rv,omitempty"`
	Err     string   `msgpack:"e,omitempty"`
	// RetryAfter, with Err, is a busy master's answer to a registration:
	// try again after this long.
	RetryAfter time.Duration `msgpack:"ra,omitempty"`
	// Deleted is, in a live master's answer to a host registering again,
	// that the master had deleted it: the host stops the tasks Lost names
	// before anything else, then tells the master (evRejoined).
	Deleted bool       `msgpack:"dd,omitempty"`
	Lost    []task.TID `msgpack:"lo,omitempty"`
}

// HostInfo describes a host of the virtual machine.
type HostInfo struct {
	ID     task.HostID `msgpack:"id" json:"id"`
	Name   string      `msgpack:"n" json:"name"`
	Addr   string      `msgpack:"a" json:"addr"`
	Cores  int         `msgpack:"c" json:"cores"`
	Speed  float64     `msgpack:"s" json:"speed"`
	MemMiB int64       `msgpack:"m" json:"mem_mib"`
	// Reported in heartbeats.
	Load       float64 `msgpack:"l" json:"load"`
	Tasks      int     `msgpack:"t" json:"tasks"`
	MemFreeMiB int64   `msgpack:"f,omitempty" json:"mem_free_mib,omitempty"` // 0: unknown
	Users      int     `msgpack:"u,omitempty" json:"users,omitempty"`
	External   float64 `msgpack:"x,omitempty" json:"external_load,omitempty"` // runnable processes not the daemon's
	Alpha      float64 `msgpack:"al,omitempty" json:"alpha,omitempty"`        // speed factor: 2 is twice as slow
	MaxUsers   int     `msgpack:"mu,omitempty" json:"max_users,omitempty"`
	Emulated   bool    `msgpack:"em,omitempty" json:"emulated,omitempty"` // some figures are emulated (static, trace, injected)
	LoadSource string  `msgpack:"ls,omitempty" json:"load_source,omitempty"`
	// Master marks the master daemon.
	Master bool `msgpack:"M" json:"master"`
	// Build is the binary the host runs; every host of a virtual machine
	// runs the master's.
	Build Build `msgpack:"B" json:"build"`
	// Liveness is, in the master's list, how its failure detector sees
	// the host: "alive", "suspected" (silent for SilentMS milliseconds),
	// or "rejoining" (registered again after its deletion, stopping its
	// lost tasks). Empty from a daemon that is not the master.
	Liveness string `msgpack:"lv,omitempty" json:"liveness,omitempty"`
	SilentMS int64  `msgpack:"sm,omitempty" json:"silent_ms,omitempty"`
}

// call is a control request; the answer is a reply with the same ID.
type call struct {
	ID     uint64             `msgpack:"i"`
	Method string             `msgpack:"m"`
	Body   msgpack.RawMessage `msgpack:"b"`
}

type reply struct {
	ID   uint64             `msgpack:"i"`
	Err  string             `msgpack:"e,omitempty"`
	Code string             `msgpack:"c,omitempty"` // names a sentinel error
	Body msgpack.RawMessage `msgpack:"b,omitempty"`
}

// event is a one-way notice: broadcasts from the master, reports to it.
type event struct {
	Kind   string          `msgpack:"k"`
	Host   *HostInfo       `msgpack:"h,omitempty"` // host-delete
	Routes []routing.Entry `msgpack:"r,omitempty"` // route
	TID    task.TID        `msgpack:"t,omitempty"` // exited
	Output []byte          `msgpack:"o,omitempty"` // output
	Job    uint64          `msgpack:"j,omitempty"` // output
	Group  string          `msgpack:"g,omitempty"` // barrier events
	TIDs   []task.TID      `msgpack:"ts,omitempty"`
	Count  int             `msgpack:"c,omitempty"`
	Code   string          `msgpack:"cd,omitempty"` // a sentinel error's code, with Reason
	Reason string          `msgpack:"why,omitempty"`
	Load   *HostInfo       `msgpack:"l,omitempty"`  // load report
	Jobs   []uint64        `msgpack:"js,omitempty"` // load report: the jobs with tasks on the host
	Note   *JobNote        `msgpack:"n,omitempty"`  // job-note
	// Serials is the master's revocation list (revoked).
	Serials []string `msgpack:"sr,omitempty"`
	// Deltas are changes of the master's host list (hosts), HostList
	// the whole list (host-list), in routing/hostlist's encodings.
	Deltas   []byte `msgpack:"hd,omitempty"`
	HostList []byte `msgpack:"hl,omitempty"`
	// Epoch (host-back) is the master's epoch clock when the host came
	// back: every route it sets naming the host from then on is newer.
	Epoch uint64 `msgpack:"ep,omitempty"`
}

// Event kinds.
const (
	// evHosts: changes of the master's host list (hostlist.go); a host
	// that finds a gap in them asks for the whole list (evHostsAsk) and
	// the master answers with it (evHostList).
	evHosts    = "hosts"
	evHostsAsk = "hosts-ask"
	evHostList = "host-list"
	// evHostDel: the master tells a host it deletes that it is deleted.
	evHostDel = "host-delete"
	// evHostBack: on demand, the master tells the hosts that a host it
	// deleted is back (readmitted under its old ID), with its epoch
	// clock then (route.EvHostUp).
	evHostBack = "host-back"
	evRoute    = "route"
	evExited   = "exited"   // a daemon tells the master a task has ended
	evOutput   = "output"   // task output forwarded to the master's console
	evHalt     = "halt"     // the master tells a daemon to stop
	evLoad     = "load"     // a daemon's periodic report to the master
	evJobNote  = "job-note" // the master tells a job's client what befell the job
	evRevoked  = "revoked"  // the master's revocation list, whole
	// evRejoined: a host registered again after its deletion has stopped
	// its lost tasks; the master announces it to the others.
	evRejoined = "rejoined"
	// Barriers between hosts: a member's arrival and its withdrawal (host
	// to master), and the release of a host's members (master to host).
	evBarrier        = "barrier"
	evBarrierCancel  = "barrier-cancel"
	evBarrierRelease = "barrier-release"
)

// Error codes carry sentinel errors across the wire, so errors.Is works on
// the caller's side. Append only.
var errorCodes = map[string]error{
	"no-such-task":  task.ErrNoSuchTask,
	"no-such-host":  task.ErrNoSuchHost,
	"no-such-group": task.ErrNoSuchGroup,
	"not-in-group":  task.ErrNotInGroup,
	"unknown-type":  task.ErrUnknownType,
	"killed":        task.ErrKilled,
	"halted":        task.ErrHalted,
	"unsupported":   ErrUnsupported,
	"no-safe-point": ErrNoSafePoint,
	"moving":        ErrMoving,
	"no-shared-dir": ErrNoSharedDir,
	"limit":         ErrLimit,
	"internal":      ErrInternal,
	"forbidden":     ErrForbidden,
	"outside":       ErrOutsideShared,
	"aborted":       ErrAborted,
	"no-such-job":   ErrNoJob,
	"withdrawn":     errBarrierWithdrawn,
}

// errBarrierWithdrawn is the master's answer to a barrier-cancel event
// that took the task's arrival back.
var errBarrierWithdrawn = errors.New("barrier arrival withdrawn")

// codeOf returns the code of the sentinel err wraps, if any.
func codeOf(err error) string {
	for code, s := range errorCodes {
		if errors.Is(err, s) {
			return code
		}
	}
	return ""
}

// remoteError is an error received in a reply.
type remoteError struct {
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

func replyError(r *reply) error {
	if r.Err == "" {
		return nil
	}
	return &remoteError{msg: r.Err, sentinel: errorCodes[r.Code]}
}

func encodeMsg(v any) ([]byte, error) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return b, nil
}

func decodeMsg(b []byte, v any) error {
	b, err := task.SafeMsgpack(b, controlLimits)
	if err != nil {
		return fmt.Errorf("decode %T: %w: %w", v, routing.ErrMalformed, err)
	}
	if err := msgpack.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %T: %w: %v", v, routing.ErrMalformed, err)
	}
	return nil
}

// Control request bodies.
type (
	spawnArgs struct {
		Parent task.TID          `msgpack:"p"`
		Job    uint64            `msgpack:"j,omitempty"`
		Req    task.SpawnRequest `msgpack:"r"`
		// MinSize and MaxSize (> 0) ask for a parallel job mapped with
		// SED: as many tasks as the fastest delay class offers, between
		// them; Req.Count is then ignored.
		MinSize int `msgpack:"mn,omitempty"`
		MaxSize int `msgpack:"mx,omitempty"`
		// Roots makes each task the root of a job of its own, with Opts;
		// OneJob makes the tasks one new job with Opts, the first its root.
		Roots  bool       `msgpack:"ro,omitempty"`
		OneJob bool       `msgpack:"oj,omitempty"`
		Opts   JobOptions `msgpack:"o,omitempty"`
		// Hold (mStart) says the spawn spans hosts: the tasks wait for
		// the master's mSiblings before they run.
		Hold bool `msgpack:"h,omitempty"`
		// Start (mStart) is the master's ID of the start: one asked
		// again answers what the first did (starts.go).
		Start uint64 `msgpack:"st,omitempty"`
		// First (mStart), when not 0, is the number of the first task:
		// the master hands out the numbers of the tasks it starts on a
		// host (First, First+1, …), and a task it does not know yet
		// speaks for the job only with one of them (startedAs).
		First uint32 `msgpack:"f,omitempty"`
	}
	// siblingsArgs are the tasks a spawn started, in spawn order.
	siblingsArgs struct {
		TIDs []task.TID `msgpack:"t"`
	}
	runReply struct {
		Info TaskInfo `msgpack:"i"`
		Job  uint64   `msgpack:"j,omitempty"`
	}
	// runArgs runs a program's root task for a client, or (with Restart)
	// restarts a job from a checkpoint.
	runArgs struct {
		Req     task.SpawnRequest `msgpack:"r"`
		Opts    JobOptions        `msgpack:"o"`
		Restart string            `msgpack:"rs,omitempty"`
		// Attach follows the running job Attach instead, for a client
		// whose connection dropped while it ran the job: its output
		// comes to this connection, and the answer is the job's end.
		Attach uint64 `msgpack:"at,omitempty"`
	}
	jobArgs struct {
		Job uint64 `msgpack:"j"`
		Dir string `msgpack:"d,omitempty"`
	}
	tidsReply struct {
		TIDs []task.TID `msgpack:"t"`
		// Taken (mStart), with no TIDs, says the numbers from First were
		// taken here (a master that lost count: recovered, or a task
		// started here by SpawnTask): the last number this host took,
		// above which the master hands out numbers again.
		Taken uint32 `msgpack:"n,omitempty"`
	}
	tidArgs struct {
		TID task.TID `msgpack:"t"`
		// By is, in a host's kill, the task acting: one the host runs,
		// whose owner must own TID (checkActing).
		By task.TID `msgpack:"b,omitempty"`
	}
	groupArgs struct {
		Group string   `msgpack:"g"`
		TID   task.TID `msgpack:"t"`
		Count int      `msgpack:"c,omitempty"`
	}
	intReply struct {
		N int `msgpack:"n"`
	}
	notifyArgs struct {
		Kind    task.NotifyKind `msgpack:"k"`
		Watcher task.TID        `msgpack:"w"`
		Tag     int             `msgpack:"g"`
		TIDs    []task.TID      `msgpack:"t"`
	}
	psArgs struct {
		All    bool `msgpack:"a"`
		Gather bool `msgpack:"g"` // at the master: every host's tasks
	}
	psReply struct {
		Tasks []TaskInfo `msgpack:"t"`
		// Jobs is the checkpoint progress of the master's jobs (Gather).
		Jobs []JobCheckpointStatus `msgpack:"j,omitempty"`
	}
	confReply struct {
		Hosts []HostInfo `msgpack:"h"`
		// Detection is the master's failure detection.
		Detection *Detection `msgpack:"d,omitempty"`
	}
	hostArgs struct {
		Host string `msgpack:"h"`
	}
	// cancelArgs names a call of the caller's, on the same connection.
	cancelArgs struct {
		ID uint64 `msgpack:"i"`
	}
)

// Control methods.
const (
	mRun         = "run"            // at the master: run a program's root task for a client, with its output
	mSpawn       = "spawn"          // at the master: place and start tasks
	mStart       = "start"          // at a daemon: start tasks here
	mSiblings    = "start.siblings" // at a daemon: run the tasks held for their spawn's list
	mKill        = "kill"           // anywhere: kill a task (forwarded to its host)
	mKillJob     = "job.kill"       // at the master: kill every task of a job
	mJoin        = "group.join"     // at the master: the group server
	mLeave       = "group.leave"
	mMembers     = "group.members"
	mBarrier     = "group.barrier"
	mLeaveAll    = "group.leaveall"
	mNotify      = "notify"       // at the master: register a notification
	mWatch       = "notify.watch" // at a daemon: watch a local task's exit
	mPS          = "ps"           // anywhere: tasks (the master gathers all hosts')
	mWait        = "wait"         // anywhere: wait for a task to exit
	mSchedStatus = "sched.status" // at the master: the scheduler's last check
	mInject      = "load.inject"  // at the master: inject load on a host
	mInjectHere  = "load.here"    // at a daemon: inject load on this host
	mConf        = "conf"         // at the master: the hosts
	mDelete      = "delete"       // at the master: remove a host
	mHalt        = "halt"         // at the master: stop the virtual machine
	mSendCheck   = "ping"         // anywhere: a no-op round trip
	mCheckpoint  = "checkpoint"   // at the master: checkpoint a job now
	mCancel      = "call.cancel"  // anywhere: cancel a call of the caller's under way
	// The swim failure detector (swim.go): a host's reports and answers to
	// the master's checks, and the master's checks and news to a host.
	mSwimReport   = "swim.report"
	mSwimCheckAck = "swim.checkack"
	mSwimCheck    = "swim.check"
	mSwimGossip   = "swim.gossip"
)

// decodeCall decodes the body of a call frame as decodeMsg would, but the
// call's Body is a slice of b, not a copy: msgpack's decoder copies a raw
// field, growing its buffer as it reads (for a call of 40 MiB, 2.7 times
// its size allocated), so a large call would otherwise live twice. b must
// stay unchanged while the call is served (a copy of a reader's reused
// buffer, or a frame the reader gave away).
func decodeCall(b []byte) (*call, error) {
	b, err := task.SafeMsgpack(b, controlLimits)
	if err != nil {
		return nil, fmt.Errorf("decode call: %w: %w", routing.ErrMalformed, err)
	}
	bad := func(err error) (*call, error) {
		return nil, fmt.Errorf("decode call: %w: %v", routing.ErrMalformed, err)
	}
	r := bytes.NewReader(b) // a ByteScanner: the decoder reads it unbuffered
	dec := msgpack.NewDecoder(r)
	n, err := dec.DecodeMapLen()
	if err != nil {
		return bad(err)
	}
	c := &call{}
	for range max(n, 0) { // -1: nil, an empty call
		key, err := dec.DecodeString()
		if err != nil {
			return bad(err)
		}
		switch key {
		case "i":
			c.ID, err = dec.DecodeUint64()
		case "m":
			c.Method, err = dec.DecodeString()
		default: // the body, or a field this daemon does not know: passed over
			at := len(b) - r.Len()
			var size int
			if size, err = task.MsgpackLen(b[at:], controlLimits); err == nil {
				if key == "b" && b[at] != msgpcode.Nil { // nil: no body, as msgpack reads it
					c.Body = msgpack.RawMessage(b[at : at+size : at+size])
				}
				_, err = r.Seek(int64(at+size), io.SeekStart)
			}
		}
		if err != nil {
			return bad(err)
		}
	}
	return c, nil
}
