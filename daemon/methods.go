package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/task"
)

// caller is who may call a control method, by the certificate of the
// connection the call comes on. A call a daemon makes to itself is always
// allowed.
type caller uint8

const (
	// callHost: host daemons only (any host certificate).
	callHost caller = iota + 1
	// callMaster: the master's host certificate only: the steps of moves,
	// job checkpoints and restarts it drives on the hosts.
	callMaster
	// callUser: users and admins, and host daemons.
	callUser
	// callAdmin: admins, and host daemons: calls that act on the whole
	// virtual machine rather than on one's own jobs.
	callAdmin
)

// String is the caller as daemon/pki/README.md's table names it.
func (c caller) String() string {
	switch c {
	case callHost:
		return "host"
	case callMaster:
		return "master"
	case callUser:
		return "user"
	case callAdmin:
		return "admin"
	}
	return fmt.Sprintf("caller(%d)", uint8(c))
}

// ownRule is what a user's call must own to act on it; admins and host
// daemons are not held to it.
type ownRule uint8

const (
	// ownNone: the call acts on nothing a user owns.
	ownNone ownRule = iota
	// ownTask: the caller owns the task named: one they spawned outside
	// any job, or one of a job they own.
	ownTask
	// ownJob: the caller owns the job named.
	ownJob
	// ownJobDir: the caller owns the job named, and the directory named
	// lies within the shared directory (or an allowed one).
	ownJobDir
	// ownSpawn: the caller owns the job and the parent task named, if
	// any; the spawn counts against the caller's quotas.
	ownSpawn
	// ownRun: a new job is the caller's and counts against their quota; a
	// re-attach names a job of the caller's; a restart's directory lies within the shared directory, and its
	// checkpoint is the caller's (its manifest names them as its owner).
	ownRun
	// ownCall: the call named is the caller's own, made on the same
	// connection (a connection's calls are the only ones it can name).
	ownCall
)

// String is the rule as daemon/pki/README.md's table states it.
func (o ownRule) String() string {
	switch o {
	case ownNone:
		return "none"
	case ownTask:
		return "caller owns the task"
	case ownJob:
		return "caller owns the job"
	case ownJobDir:
		return "caller owns the job; directory inside the shared one"
	case ownSpawn:
		return "caller owns the job and parent named; caller's quotas"
	case ownRun:
		return "caller's quotas; an attach: caller owns the job; a restart: caller owns the checkpoint, directory inside the shared one"
	case ownCall:
		return "the call is the caller's (same connection)"
	}
	return fmt.Sprintf("ownRule(%d)", uint8(o))
}

// method is one control method: its name, who may call it, what a user's
// call must own, whether only the master serves it, and its handler. The
// handler decodes its own request (bounded: see decodeMsg) and checks the
// ownership rule on it before acting.
type method struct {
	name   string
	who    caller
	owns   ownRule
	master bool // served by the master only
	serve  func(d *Daemon, ctx context.Context, p *peer, body []byte) (any, error)
	// local serves a call this daemon makes to itself with the request
	// as it is (typed false: args is not the method's request type).
	local func(d *Daemon, ctx context.Context, args any) (res any, typed bool, err error)
}

// none is the answer of a method that answers nothing but success.
type none struct{}

// answer is a handler's answer as a call gives it back: nil for none.
func answer[R any](r R) any {
	if _, ok := any(r).(none); ok {
		return nil
	}
	return r
}

// op declares a method whose request is an A and answer an R: the body is
// decoded into an A, the rule checked on it for a user's call, and h
// called with it; a call the daemon makes to itself with an A skips the
// codec both ways.
func op[A, R any](name string, who caller, owns ownRule, master bool, h func(d *Daemon, ctx context.Context, p *peer, a *A) (R, error)) method {
	return method{name: name, who: who, owns: owns, master: master,
		serve: func(d *Daemon, ctx context.Context, p *peer, body []byte) (any, error) {
			var a A
			if err := decodeMsg(body, &a); err != nil {
				return nil, err
			}
			if err := d.checkRule(ctx, p, owns, &a); err != nil {
				return nil, err
			}
			r, err := h(d, ctx, p, &a)
			return answer(r), err
		},
		local: func(d *Daemon, ctx context.Context, args any) (any, bool, error) {
			a, ok := args.(A)
			if !ok {
				return nil, false, nil
			}
			r, err := h(d, ctx, nil, &a)
			return answer(r), true, err
		}}
}

// op0 declares a method without a request (its body is not read) and
// with an answer R.
func op0[R any](name string, who caller, master bool, h func(d *Daemon, ctx context.Context, p *peer) (R, error)) method {
	return method{name: name, who: who, owns: ownNone, master: master,
		serve: func(d *Daemon, ctx context.Context, p *peer, _ []byte) (any, error) {
			r, err := h(d, ctx, p)
			return answer(r), err
		},
		local: func(d *Daemon, ctx context.Context, _ any) (any, bool, error) {
			r, err := h(d, ctx, nil)
			return answer(r), true, err
		}}
}

// methodTable is every control method a daemon serves, with who may call
// it and what a user's call must own side by side (declared in
// declareMethods). Dispatch (serveMethod) and authorization (authorize,
// checkRule) read it and nothing else; daemon/pki/README.md's table of
// methods is checked against it. methods indexes it by name.
var (
	methodTable []method
	methods     map[string]*method
)

// init fills methodTable at start: the handlers it names reach the
// daemon's calls, which read the table (a variable's initializer may not
// refer to itself).
func init() {
	methodTable = declareMethods()
	methods = make(map[string]*method, len(methodTable))
	for i := range methodTable {
		if methods[methodTable[i].name] != nil {
			panic("control method " + methodTable[i].name + " declared twice")
		}
		methods[methodTable[i].name] = &methodTable[i]
	}
}

// declareMethods is the table of control methods.
func declareMethods() []method {
	return []method{
		// Clients' calls.
		op(mRun, callUser, ownRun, true, (*Daemon).serveRun),
		op(mSpawn, callUser, ownSpawn, true, (*Daemon).serveSpawn),
		op(mKill, callUser, ownTask, false, func(d *Daemon, ctx context.Context, p *peer, a *tidArgs) (none, error) {
			if err := d.checkActing(ctx, p, mKill, a.By, a.TID); err != nil {
				return none{}, err
			}
			return none{}, d.KillTask(ctx, a.TID)
		}),
		op(mKillJob, callUser, ownJob, true, func(d *Daemon, ctx context.Context, _ *peer, a *jobArgs) (intReply, error) {
			n, err := d.KillJob(ctx, a.Job)
			return intReply{N: n}, err
		}),
		op(mCheckpoint, callUser, ownJobDir, true, func(d *Daemon, ctx context.Context, _ *peer, a *jobArgs) (JobCheckpoint, error) {
			return d.CheckpointJob(ctx, a.Job, a.Dir)
		}),
		op(mMigrate, callUser, ownTask, true, func(d *Daemon, ctx context.Context, p *peer, a *migrateArgs) (MigrateResult, error) {
			if err := d.checkActing(ctx, p, mMigrate, a.By, a.TID); err != nil {
				return MigrateResult{}, err
			}
			return d.Migrate(ctx, a.TID, a.To, a.Via)
		}),
		op(mWait, callUser, ownNone, false, func(d *Daemon, ctx context.Context, _ *peer, a *tidArgs) (TaskInfo, error) {
			return d.Wait(ctx, a.TID)
		}),
		op(mPS, callUser, ownNone, false, func(d *Daemon, ctx context.Context, _ *peer, a *psArgs) (psReply, error) {
			if a.Gather && d.isMaster() {
				ts, err := d.AllTasks(ctx, a.All)
				return psReply{Tasks: ts, Jobs: d.JobStatuses()}, err
			}
			return psReply{Tasks: d.Tasks(a.All)}, nil
		}),
		op0(mConf, callUser, true, func(d *Daemon, _ context.Context, _ *peer) (confReply, error) {
			x := d.Detection()
			return confReply{Hosts: d.Hosts(), Detection: &x}, nil
		}),
		op0(mSchedStatus, callUser, true, func(d *Daemon, _ context.Context, _ *peer) (SchedStatus, error) {
			return d.SchedStatus(), nil
		}),
		op0(mSendCheck, callUser, false, func(*Daemon, context.Context, *peer) (none, error) { return none{}, nil }),
		op(mCancel, callUser, ownCall, false, func(_ *Daemon, _ context.Context, p *peer, a *cancelArgs) (none, error) {
			if p != nil {
				p.cancelCall(a.ID) // only the caller's own connection's calls
			}
			return none{}, nil
		}),
		op(mInject, callAdmin, ownNone, true, func(d *Daemon, ctx context.Context, _ *peer, a *injectArgs) (none, error) {
			return none{}, d.injectAt(ctx, a.Host, a.Overlay, a.Clear)
		}),
		op(mDelete, callAdmin, ownNone, true, func(d *Daemon, ctx context.Context, _ *peer, a *hostArgs) (none, error) {
			return none{}, d.DeleteHost(ctx, a.Host)
		}),
		op0(mHalt, callAdmin, true, func(d *Daemon, _ context.Context, _ *peer) (none, error) {
			// Not a tracked goroutine: halting waits for those.
			go d.HaltVM()
			return none{}, nil
		}),

		// Host daemons' calls for their tasks.
		op(mJoin, callHost, ownNone, true, func(d *Daemon, _ context.Context, _ *peer, a *groupArgs) (intReply, error) {
			inst, err := d.groups.join(a.Group, a.TID)
			return intReply{N: inst}, err
		}),
		op(mLeave, callHost, ownNone, true, func(d *Daemon, _ context.Context, _ *peer, a *groupArgs) (none, error) {
			return none{}, d.groups.leave(a.Group, a.TID)
		}),
		op(mMembers, callHost, ownNone, true, func(d *Daemon, _ context.Context, _ *peer, a *groupArgs) (tidsReply, error) {
			m, err := d.groups.members(a.Group)
			return tidsReply{TIDs: m}, err
		}),
		op(mBarrier, callHost, ownNone, true, func(d *Daemon, ctx context.Context, _ *peer, a *groupArgs) (none, error) {
			return none{}, d.groups.wait(ctx, d.ctx.Done(), nil, a.Group, a.TID, a.Count, d.releaseBarrier)
		}),
		op(mLeaveAll, callHost, ownNone, true, func(d *Daemon, _ context.Context, _ *peer, a *groupArgs) (none, error) {
			d.groups.leaveAll(a.TID)
			return none{}, nil
		}),
		op(mNotify, callHost, ownNone, true, func(d *Daemon, ctx context.Context, _ *peer, a *notifyArgs) (none, error) {
			return none{}, d.registerExitWatch(ctx, *a)
		}),
		// The swim failure detector's reports: a host speaks for itself
		// (the reporter is the connection's host).
		op(mSwimReport, callHost, ownNone, true, func(d *Daemon, ctx context.Context, p *peer, a *swimUpdate) (none, error) {
			return d.serveSwimReport(ctx, p, a)
		}),
		op(mSwimCheckAck, callHost, ownNone, true, func(d *Daemon, ctx context.Context, p *peer, a *swimCheckArgs) (none, error) {
			return d.serveSwimCheckAck(ctx, p, a)
		}),

		// The master's calls to a host for its tasks: starting the tasks
		// it placed (counted against the quotas: a host's spawns go
		// through the master), and watching a task's exit.
		op(mStart, callMaster, ownNone, false, func(d *Daemon, ctx context.Context, _ *peer, a *spawnArgs) (tidsReply, error) {
			tids, err := d.starts.serve(ctx, a.Start, func() ([]task.TID, error) {
				return d.startSpawn(ctx, a.Parent, a.Job, a.Req, a.Hold, a.First)
			})
			d.fault("start:served")
			if taken := (errNumsTaken{}); errors.As(err, &taken) {
				return tidsReply{Taken: taken.last}, nil // the master numbers them again
			}
			return tidsReply{TIDs: tids}, err
		}),
		op(mSiblings, callMaster, ownNone, false, func(d *Daemon, _ context.Context, _ *peer, a *siblingsArgs) (none, error) {
			return none{}, d.releaseSiblings(a.TIDs)
		}),
		op(mWatch, callMaster, ownNone, false, func(d *Daemon, _ context.Context, _ *peer, a *notifyArgs) (none, error) {
			return none{}, d.watchLocal(*a)
		}),

		// The master's steps of moves.
		op(mMigInfo, callMaster, ownNone, false, func(d *Daemon, _ context.Context, _ *peer, a *migStep) (migReply, error) {
			h := d.ht.task(a.TID)
			if h == nil {
				return migReply{}, fmt.Errorf("%v: %w", a.TID, task.ErrNoSuchTask)
			}
			return migReply{Type: h.typ, Job: h.job}, nil
		}),
		op(mMigPrep, callMaster, ownNone, false, func(d *Daemon, _ context.Context, _ *peer, a *migStep) (none, error) {
			return none{}, d.prepareArrival(*a)
		}),
		op(mMigSusp, callMaster, ownNone, false, func(d *Daemon, ctx context.Context, _ *peer, a *migStep) (none, error) {
			return none{}, d.suspendForMove(ctx, *a)
		}),
		op(mMigSend, callMaster, ownNone, false, func(d *Daemon, ctx context.Context, _ *peer, a *migStep) (migReply, error) {
			t0 := time.Now()
			n, err := d.sendCheckpoint(ctx, *a)
			d.met.Transferred(string(a.Via), time.Since(t0), err)
			return migReply{Bytes: n}, err
		}),
		op(mMigLoad, callMaster, ownNone, false, func(d *Daemon, ctx context.Context, _ *peer, a *migStep) (none, error) {
			return none{}, d.restoreArrival(ctx, *a)
		}),
		op(mMigDone, callMaster, ownNone, false, func(d *Daemon, _ context.Context, _ *peer, a *migStep) (none, error) {
			d.commitDeparture(*a)
			return none{}, nil
		}),
		op(mMigBack, callMaster, ownNone, false, func(d *Daemon, ctx context.Context, _ *peer, a *migStep) (none, error) {
			return none{}, d.resumeDeparture(ctx, *a)
		}),
		op(mMigDrop, callMaster, ownNone, false, func(d *Daemon, _ context.Context, _ *peer, a *migStep) (migReply, error) {
			return migReply{Installed: d.cancelArrival(*a)}, nil
		}),

		// The master's steps of job checkpoints and rollbacks.
		op(mCkPause, callMaster, ownNone, false, func(d *Daemon, ctx context.Context, _ *peer, a *ckStep) (ckReply, error) {
			return d.pauseJob(ctx, *a)
		}),
		op(mCkQuiet, callMaster, ownNone, false, func(d *Daemon, _ context.Context, _ *peer, a *ckStep) (ckReply, error) {
			return d.quietJob(*a)
		}),
		op(mCkWrite, callMaster, ownNone, false, func(d *Daemon, _ context.Context, _ *peer, a *ckStep) (ckReply, error) {
			return d.writeJob(*a)
		}),
		op(mCkResume, callMaster, ownNone, false, func(d *Daemon, _ context.Context, _ *peer, a *ckStep) (none, error) {
			return none{}, d.resumeJobStep(*a)
		}),
		op(mCkKill, callMaster, ownNone, false, func(d *Daemon, ctx context.Context, _ *peer, a *ckStep) (none, error) {
			return none{}, d.killJob(ctx, *a)
		}),

		// The master's steps of restarts.
		op(mCkLoad, callMaster, ownNone, false, func(d *Daemon, _ context.Context, _ *peer, a *restoreArgs) (ckStep, error) {
			return d.loadStaged(*a)
		}),
		op(mCkGo, callMaster, ownNone, false, func(d *Daemon, _ context.Context, _ *peer, a *restoreArgs) (none, error) {
			d.startStaged(*a)
			return none{}, nil
		}),
		op(mCkDrop, callMaster, ownNone, false, func(d *Daemon, _ context.Context, _ *peer, a *restoreArgs) (none, error) {
			d.dropStaged(*a)
			return none{}, nil
		}),
		op(mCkFloor, callMaster, ownNone, false, func(d *Daemon, _ context.Context, _ *peer, a *restoreArgs) (none, error) {
			d.raiseTIDFloor(a.Floor)
			return none{}, nil
		}),

		// Load injection on a host, which the master forwards.
		op(mInjectHere, callMaster, ownNone, false, func(d *Daemon, _ context.Context, _ *peer, a *injectArgs) (none, error) {
			return none{}, d.InjectLoad(a.Overlay, a.Clear)
		}),
		// The swim failure detector: the master checks an accused host, and
		// tells a host what it learnt.
		op(mSwimCheck, callMaster, ownNone, false, func(d *Daemon, ctx context.Context, p *peer, a *swimCheckArgs) (none, error) {
			return d.serveSwimCheck(ctx, p, a)
		}),
		op(mSwimGossip, callMaster, ownNone, false, func(d *Daemon, ctx context.Context, p *peer, a *swimUpdate) (none, error) {
			return d.serveSwimGossip(ctx, p, a)
		}),
	}
}

// methodNames lists the control methods in the table's order.
func methodNames() []string {
	out := make([]string, 0, len(methodTable))
	for _, m := range methodTable {
		out = append(out, m.name)
	}
	return out
}

// authorize says whether the holder of p's certificate may call method. A
// call this daemon makes to itself (p nil) is always allowed; an unknown
// method is refused.
func authorize(p *peer, name string) error {
	m := methods[name]
	if m == nil {
		return fmt.Errorf("unknown method %q", name)
	}
	if p == nil {
		return nil
	}
	c := p.cert
	switch {
	case c.Role.Client():
		switch m.who {
		case callUser:
		case callAdmin:
			if c.Role != pki.RoleAdmin {
				return fmt.Errorf("method %q needs an admin certificate (%s): %w", name, c, ErrForbidden)
			}
		default:
			return fmt.Errorf("method %q is not open to clients (%s): %w", name, c, ErrForbidden)
		}
	case c.Role == pki.RoleDaemon:
		if m.who == callMaster && !c.Master {
			return fmt.Errorf("method %q is the master's to call, not %s's: %w", name, c.Name, ErrForbidden)
		}
	default:
		return fmt.Errorf("method %q: unknown role %q: %w", name, c.Role, ErrForbidden)
	}
	return nil
}

// serveMethod authorizes a control call and runs its handler. p is the
// connection it came from, nil for calls this daemon makes to itself.
func (d *Daemon) serveMethod(ctx context.Context, p *peer, name string, body []byte) (any, error) {
	if err := authorize(p, name); err != nil {
		return nil, err
	}
	if err := d.hostCallClaim(p, name, body); err != nil {
		return nil, err
	}
	m := methods[name]
	if m.master && !d.isMaster() {
		return nil, fmt.Errorf("method %q: this daemon is not the master", name)
	}
	if p != nil && p.cert.Role.Client() {
		ctx = withCaller(ctx, p.cert)
	}
	return m.serve(d, ctx, p, body)
}

// checkRule checks a client's call against its method's rule: the
// directories it names, for any client; what it acts on, for a user.
func (d *Daemon) checkRule(ctx context.Context, p *peer, r ownRule, args any) error {
	if p == nil || !p.cert.Role.Client() {
		return nil
	}
	user := p.cert.Role == pki.RoleUser
	switch a := args.(type) {
	case *tidArgs:
		if r == ownTask && user {
			return d.checkTaskOwner(ctx, p.cert.Name, a.TID)
		}
	case *migrateArgs:
		if r == ownTask && user {
			return d.checkTaskOwner(ctx, p.cert.Name, a.TID)
		}
	case *jobArgs:
		if r == ownJobDir {
			if err := d.confineDir(a.Dir); err != nil {
				return err
			}
		}
		if (r == ownJob || r == ownJobDir) && user {
			return d.checkJobOwner(p.cert.Name, a.Job, "")
		}
	case *spawnArgs:
		if r == ownSpawn && user {
			if a.Job != 0 {
				if err := d.checkJobOwner(p.cert.Name, a.Job, ""); err != nil {
					return err
				}
			}
			if !a.Parent.IsZero() {
				return d.checkTaskOwner(ctx, p.cert.Name, a.Parent)
			}
		}
	case *runArgs:
		// The checkpoint's owner is checked as its manifest is read
		// (RestartJob): the rule needs what the file says.
		// A command re-attaching to a job (after its connection to the
		// master dropped) may follow only a job of its own.
		if r == ownRun && user && a.Attach != 0 {
			if err := d.checkJobOwner(p.cert.Name, a.Attach, ""); err != nil {
				return err
			}
		}
		if r == ownRun {
			return d.confineDir(a.Restart)
		}
	}
	return nil
}

// serveSpawn places and starts tasks for a client or a host: a parallel
// job mapped with SED, one job per root, one job of all the tasks, or tasks
// of a job (or none).
func (d *Daemon) serveSpawn(ctx context.Context, _ *peer, a *spawnArgs) (tidsReply, error) {
	if a.MinSize > 0 || a.MaxSize > 0 {
		tids, err := d.SpawnJob(ctx, a.Parent, a.Req, a.MinSize, a.MaxSize)
		return tidsReply{TIDs: tids}, err
	}
	if a.OneJob && a.Parent.IsZero() {
		tids, err := d.spawnOneJob(ctx, a.Req, a.Opts)
		return tidsReply{TIDs: tids}, err
	}
	if a.Roots && a.Parent.IsZero() {
		tids, err := d.spawnRoots(ctx, a.Req, a.Opts)
		return tidsReply{TIDs: tids}, err
	}
	tids, err := d.spawnAnywhere(ctx, a.Parent, a.Job, a.Req)
	return tidsReply{TIDs: tids}, err
}

// serveRun runs a program's root task, or restarts a job, for a client.
func (d *Daemon) serveRun(ctx context.Context, p *peer, a *runArgs) (runReply, error) {
	if p == nil {
		return runReply{}, fmt.Errorf("method %q is for clients", mRun)
	}
	info, err := d.runJob(ctx, p, *a)
	return runReply{Info: info}, err
}
