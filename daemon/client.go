package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/dpvm/dpvm/daemon/load"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// Client controls a running virtual machine through its master daemon, as
// the dpvm CLI and console do. It authenticates with a user certificate
// (role admin or user), which may call control methods only: it can neither
// join the machine nor inject messages, and a user may not call the
// methods that act on the whole machine.
type Client struct {
	tr   transport.Endpoint
	addr string // the master's, to connect again
	// conn, st, info, closed and err are the current connection's; a
	// run whose connection drops replaces them (reconnect), holding wmu
	// and mu.
	conn transport.Conn
	st   transport.Stream
	info HostInfo // the master

	wmu    sync.Mutex
	mu     sync.Mutex
	calls  pendingCalls
	closed chan struct{} // closed when the current connection ends
	err    error         // why it ended
	out    io.Writer     // where a running job's output goes
	notes  func(JobNote) // told what befalls a running job
	job    uint64        // the job the run under way started (0: none known)
	done   bool          // Close was called
}

// ReconnectFor bounds how long a run whose connection to the master
// dropped tries to connect again to follow its job; the master keeps the
// job for as long as it takes to delete a silent host (5 s by default).
const ReconnectFor = 30 * time.Second

// OnJobNote makes fn hear what befalls the jobs this client runs (Run,
// RunJob, Restart): a rollback after a host was lost, and to which
// checkpoint, or the job's loss. fn runs on the client's reader: it must
// not block.
func (c *Client) OnJobNote(fn func(JobNote)) {
	c.mu.Lock()
	c.notes = fn
	c.mu.Unlock()
}

// Dial connects to the master daemon at addr over QUIC.
func Dial(ctx context.Context, addr string, cred *pki.Credential) (*Client, error) {
	return DialNetwork(ctx, transport.QUICNetwork{}, addr, cred)
}

// DialNetwork connects to the master daemon at addr on the given network.
func DialNetwork(ctx context.Context, nw transport.Network, addr string, cred *pki.Credential) (*Client, error) {
	if cred == nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, pki.ErrNoCredential)
	}
	if !cred.Role.Client() {
		return nil, fmt.Errorf("connect to %s: %s's is a host certificate: a client needs a user certificate ('dpvm cert user'): %w", addr, cred.Name, ErrForbidden)
	}
	tr, err := nw.Dialer(addr, cred, transport.Config{HandshakeTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	c := &Client{tr: tr, addr: addr}
	if err := c.handshake(ctx, addr); err != nil {
		tr.Close()
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	return c, nil
}

func (c *Client) handshake(ctx context.Context, addr string) error {
	g, err := greet(ctx, c.tr, addr, &hello{Name: "dpvm"}, routing.DefaultMaxFrame)
	if err != nil {
		return err
	}
	if g.reply.Host != MasterID || !g.conn.Peer().Master {
		g.conn.Close("not the master")
		return fmt.Errorf("%s is host %v, not the master: give the master's address", addr, g.reply.Host)
	}
	closed := make(chan struct{})
	c.wmu.Lock()
	c.mu.Lock()
	c.conn, c.st, c.info, c.closed, c.err = g.conn, g.st, g.reply.Info, closed, nil
	c.mu.Unlock()
	c.wmu.Unlock()
	go c.readLoop(g.r, closed)
	return nil
}

// reconnect connects to the master again, trying with backoff for at
// most ReconnectFor.
func (c *Client) reconnect(ctx context.Context) error {
	c.mu.Lock()
	old := c.conn
	c.mu.Unlock()
	old.Close("reconnecting")
	deadline := time.Now().Add(ReconnectFor)
	wait := 50 * time.Millisecond
	for {
		c.mu.Lock()
		done := c.done
		c.mu.Unlock()
		if done {
			return errors.New("the client is closed")
		}
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.handshake(hctx, c.addr)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("connect to %s again: %w", c.addr, err)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
		wait = min(2*wait, time.Second)
	}
}

// readLoop reads the connection whose end closes closed.
func (c *Client) readLoop(r *routing.Reader, closed chan struct{}) {
	var err error
	for {
		var f routing.Frame
		f, err = r.Next()
		if err != nil {
			break
		}
		if f.Kind == routing.KindEvent {
			var e event
			if err = decodeMsg(f.Body, &e); err != nil {
				break
			}
			switch {
			case e.Kind == evOutput:
				c.mu.Lock()
				w := c.out
				c.mu.Unlock()
				if w != nil {
					_, _ = w.Write(e.Output)
				}
			case e.Kind == evJobNote && e.Note != nil && e.Note.Kind == NoteStarted:
				c.mu.Lock()
				c.job = e.Note.Job
				c.mu.Unlock()
			case e.Kind == evJobNote && e.Note != nil:
				c.mu.Lock()
				fn := c.notes
				c.mu.Unlock()
				if fn != nil {
					fn(*e.Note)
				}
			}
			continue
		}
		if f.Kind != routing.KindReply {
			continue // pongs and anything else a client does not need
		}
		var rep reply
		if err = decodeMsg(f.Body, &rep); err != nil {
			break
		}
		c.calls.deliver(&rep)
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("the master closed the connection")
	}
	c.mu.Lock()
	if c.closed == closed {
		c.err = err
	}
	c.mu.Unlock()
	close(closed)
}

// Close ends the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	c.done = true
	conn := c.conn
	c.mu.Unlock()
	if conn != nil {
		conn.Close("client done")
	}
	return c.tr.Close()
}

// Master describes the master daemon.
func (c *Client) Master() HostInfo { return c.info }

func (c *Client) call(ctx context.Context, method string, args, out any) error {
	id, ch, b, err := c.calls.start(method, args)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	_, err = c.st.Write(routing.AppendFrame(nil, routing.KindCall, b))
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	c.wmu.Unlock()
	if err != nil {
		c.calls.forget(id)
		return fmt.Errorf("send to the master: %w", err)
	}
	// The master's answer says what went wrong and the caller knows
	// which operation it asked for: neither is repeated here.
	err = c.calls.await(ctx, id, ch, closed, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.err
	}, out)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		c.cancel(id)
	}
	return err
}

// cancel tells the master that the call id is given up, so that the work
// it does for it stops; the answer to that is not awaited.
func (c *Client) cancel(id uint64) {
	cid, _, b, err := c.calls.start(mCancel, cancelArgs{ID: id})
	if err != nil {
		return
	}
	c.calls.forget(cid)
	c.wmu.Lock()
	_, _ = c.st.Write(routing.AppendFrame(nil, routing.KindCall, b))
	c.wmu.Unlock()
}

// CallRaw sends the control call method with body, msgpack bytes sent as
// they are, and returns the answer's body undecoded. The other methods of
// Client are the API; CallRaw is for diagnostics and for tests of what a
// daemon makes of any call: whether the certificate may make it
// (ErrForbidden), and what a malformed body gets (routing.ErrMalformed).
func (c *Client) CallRaw(ctx context.Context, method string, body []byte) ([]byte, error) {
	var out msgpack.RawMessage
	err := c.call(ctx, method, msgpack.RawMessage(body), &out)
	return out, err
}

// Hosts lists the virtual machine's hosts.
func (c *Client) Hosts(ctx context.Context) ([]HostInfo, error) {
	hosts, _, err := c.Conf(ctx)
	return hosts, err
}

// Conf lists the virtual machine's hosts, each with its liveness, and says
// how the master detects failed hosts.
func (c *Client) Conf(ctx context.Context) ([]HostInfo, Detection, error) {
	var rep confReply
	err := c.call(ctx, mConf, struct{}{}, &rep)
	var x Detection
	if rep.Detection != nil {
		x = *rep.Detection
	}
	return rep.Hosts, x, err
}

// Tasks lists the running tasks of every host, and the remembered exited
// ones too with all.
func (c *Client) Tasks(ctx context.Context, all bool) ([]TaskInfo, error) {
	var rep psReply
	err := c.call(ctx, mPS, psArgs{All: all, Gather: true}, &rep)
	return rep.Tasks, err
}

// PS is Tasks with the checkpoint progress of the master's jobs.
func (c *Client) PS(ctx context.Context, all bool) ([]TaskInfo, []JobCheckpointStatus, error) {
	var rep psReply
	err := c.call(ctx, mPS, psArgs{All: all, Gather: true}, &rep)
	return rep.Tasks, rep.Jobs, err
}

// Spawn starts count tasks of a registered type with the given state
// (msgpack of the task struct; nil for the zero value), on the named host
// or anywhere ("").
func (c *Client) Spawn(ctx context.Context, typ string, state []byte, count int, host string) ([]task.TID, error) {
	var rep tidsReply
	err := c.call(ctx, mSpawn, spawnArgs{Req: task.SpawnRequest{Type: typ, State: state, Count: count, Host: host}}, &rep)
	return rep.TIDs, err
}

// SpawnRoots starts count tasks as the roots of as many new jobs, each
// with the checkpoints opts asks for; their output goes to the master's.
func (c *Client) SpawnRoots(ctx context.Context, typ string, state []byte, count int, host string, opts JobOptions) ([]task.TID, error) {
	var rep tidsReply
	err := c.call(ctx, mSpawn, spawnArgs{Req: task.SpawnRequest{Type: typ, State: state, Count: count, Host: host}, Roots: true, Opts: opts}, &rep)
	return rep.TIDs, err
}

// SpawnOneJob starts count tasks as one new job with the checkpoints opts
// asks for, as PVM's console starts 'spawn -count': the first task is the
// job's root, and the tasks share the job's groups (a group name not
// beginning with task.VMWide names the same group for all of them). If
// not every task starts, those that did are killed. Their output goes to
// the master's.
func (c *Client) SpawnOneJob(ctx context.Context, typ string, state []byte, count int, host string, opts JobOptions) ([]task.TID, error) {
	var rep tidsReply
	err := c.call(ctx, mSpawn, spawnArgs{Req: task.SpawnRequest{Type: typ, State: state, Count: count, Host: host}, OneJob: true, Opts: opts}, &rep)
	return rep.TIDs, err
}

// Wait waits for task tid to end and says how it ended.
func (c *Client) Wait(ctx context.Context, tid task.TID) (TaskInfo, error) {
	var info TaskInfo
	err := c.call(ctx, mWait, tidArgs{TID: tid}, &info)
	return info, err
}

// Kill kills a task.
func (c *Client) Kill(ctx context.Context, tid task.TID) error {
	return c.call(ctx, mKill, tidArgs{TID: tid}, nil)
}

// KillJob kills every task of job jN and returns how many it killed.
func (c *Client) KillJob(ctx context.Context, job uint64) (int, error) {
	var rep intReply
	err := c.call(ctx, mKillJob, jobArgs{Job: job}, &rep)
	return rep.N, err
}

// Delete removes a host (by name or "h<ID>"; "name:N" or "id:hN" where a
// name is another host's ID) from the virtual machine.
func (c *Client) Delete(ctx context.Context, host string) error {
	return c.call(ctx, mDelete, hostArgs{Host: host}, nil)
}

// Halt stops the whole virtual machine. The master may hang up before its
// answer arrives; that counts as done.
func (c *Client) Halt(ctx context.Context) error {
	err := c.call(ctx, mHalt, struct{}{}, nil)
	if errors.Is(err, ErrNotConnected) {
		return nil
	}
	return err
}

// Ping makes a round trip to the master.
func (c *Client) Ping(ctx context.Context) error {
	return c.call(ctx, mSendCheck, struct{}{}, nil)
}

// Run runs a program's root task (a registered type with its state) on the
// virtual machine as a new job, copies the output of the job's tasks to out
// as it arrives, and returns the root task's final state once the job has
// ended: its root and its other tasks (waited for, or killed as the root
// asks: task.JobEnder), those that failed or were killed at the end in
// TaskInfo.JobFailures; ExitError gives the run's verdict. Closing the
// client (or cancelling ctx) kills the job.
func (c *Client) Run(ctx context.Context, typ string, state []byte, out io.Writer) (TaskInfo, error) {
	return c.RunJob(ctx, typ, state, JobOptions{}, out)
}

// RunJob is Run with the job's checkpoint options.
func (c *Client) RunJob(ctx context.Context, typ string, state []byte, opts JobOptions, out io.Writer) (TaskInfo, error) {
	return c.run(ctx, runArgs{Req: task.SpawnRequest{Type: typ, State: state, Count: 1}, Opts: opts}, out)
}

// Restart restarts a job from the newest complete checkpoint under dir (a
// job's checkpoint directory in the shared directory, or one of its sets)
// on the hosts the virtual machine has now, copies its output to out, and
// returns its root task's final state when it exits, as Run does.
func (c *Client) Restart(ctx context.Context, dir string, opts JobOptions, out io.Writer) (TaskInfo, error) {
	return c.run(ctx, runArgs{Restart: dir, Opts: opts}, out)
}

// run runs or restarts a job and follows it to its end. When the
// connection to the master drops, it connects again and follows the job
// there (the master keeps it a while); when ctx ends, it kills the job.
func (c *Client) run(ctx context.Context, a runArgs, out io.Writer) (TaskInfo, error) {
	c.mu.Lock()
	c.out, c.job = out, 0
	c.mu.Unlock()
	var rep runReply
	err := c.call(ctx, mRun, a, &rep)
	for errors.Is(err, ErrNotConnected) && ctx.Err() == nil {
		c.mu.Lock()
		job := c.job
		c.mu.Unlock()
		if job == 0 {
			break // not started, or not known to have started
		}
		if rerr := c.reconnect(ctx); rerr != nil {
			err = fmt.Errorf("%w; job %d cannot be followed, no master at %s within %v (%w); once a master runs there again (`dpvm daemon --master --recover`), `dpvm restart DIR/job-j%d` (DIR: the shared directory) runs it from its newest checkpoint: %w",
				err, job, c.addr, ReconnectFor, rerr, job, ErrJobLostWithMaster)
			break
		}
		err = c.call(ctx, mRun, runArgs{Attach: job}, &rep)
		if errors.Is(err, ErrNoJob) {
			err = c.lostWithMaster(ctx, job, err)
		}
	}
	if ctx.Err() != nil {
		c.mu.Lock()
		job := c.job
		c.mu.Unlock()
		if job != 0 {
			// The master would keep the job a while for this command
			// to come back: it does not.
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = c.call(kctx, mKillJob, jobArgs{Job: job}, nil)
			cancel()
		}
		c.Close() // and the master kills the job
	}
	c.mu.Lock()
	c.job = 0
	c.mu.Unlock()
	return rep.Info, err
}

// A run whose job was lost with its master kills the job's tasks that
// the hosts bring back to the recovered master lostKillTries times,
// lostKillEvery apart (the hosts register again within a second or two of
// a master's return).
const (
	lostKillTries = 10
	lostKillEvery = 500 * time.Millisecond
)

// ErrJobLostWithMaster is returned by a run whose job the master it
// connected to again does not know: the master it started on was lost
// (a master recovered with --recover takes hosts and tasks back, not
// jobs), so the job's coordinator, output and result are gone.
var ErrJobLostWithMaster = errors.New("the job was lost with its master")

// lostWithMaster ends a run whose job the master does not know after a
// reconnection (cause): it kills what is left of the job's tasks, which
// no master would follow or checkpoint and which a restart of the job
// would meet under the same TIDs, and returns ErrJobLostWithMaster
// saying how to run the job again.
func (c *Client) lostWithMaster(ctx context.Context, job uint64, cause error) error {
	// The hosts register again with the recovered master at their own
	// pace, each bringing its tasks back: kill for a while.
	n := 0
	var kerr error
	for i := 0; i < lostKillTries; i++ {
		if i > 0 {
			select {
			case <-time.After(lostKillEvery):
			case <-ctx.Done():
			}
		}
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		var rep intReply
		kerr = c.call(kctx, mKillJob, jobArgs{Job: job}, &rep)
		cancel()
		if errors.Is(kerr, ErrNoJob) {
			kerr = nil // none of its tasks is back (yet)
		}
		n += rep.N
		if kerr != nil || ctx.Err() != nil {
			break
		}
	}
	killed := fmt.Sprintf("its %d tasks left were killed", n)
	if kerr != nil {
		killed = fmt.Sprintf("killing its tasks left failed: %v", kerr)
	}
	return fmt.Errorf("job %d was lost with its master (%v; a master recovered with --recover does not take jobs back); %s; run it again from its newest checkpoint with `dpvm restart DIR/job-j%d` (DIR: the shared directory): %w",
		job, cause, killed, job, ErrJobLostWithMaster)
}

// Checkpoint takes a coordinated checkpoint of a job now, into dir (every
// host must reach it; empty: the shared directory).
func (c *Client) Checkpoint(ctx context.Context, job uint64, dir string) (JobCheckpoint, error) {
	var r JobCheckpoint
	err := c.call(ctx, mCheckpoint, jobArgs{Job: job, Dir: dir}, &r)
	return r, err
}

// ExitError turns a root task's final state into an error carrying its exit
// status, as Run does: nil for a clean exit.
func ExitError(info TaskInfo) error { return exitError(info) }

// Migrate moves a task to the named host, its checkpoint travelling via, and
// returns when the move has committed.
func (c *Client) Migrate(ctx context.Context, tid task.TID, to string, via Via) (MigrateResult, error) {
	var res MigrateResult
	err := c.call(ctx, mMigrate, migrateArgs{TID: tid, To: to, Via: via}, &res)
	return res, err
}

// SchedStatus returns the master scheduler's last check.
func (c *Client) SchedStatus(ctx context.Context) (SchedStatus, error) {
	var st SchedStatus
	err := c.call(ctx, mSchedStatus, struct{}{}, &st)
	return st, err
}

// InjectLoad sets an overlay on a host's load figures (emulated interactive
// users, load, free memory), or clears it.
func (c *Client) InjectLoad(ctx context.Context, host string, o load.Overlay, clear bool) error {
	return c.call(ctx, mInject, injectArgs{Host: host, Overlay: o, Clear: clear}, nil)
}

// SpawnJob starts a parallel job of a registered type mapped with SED: at
// least minSize and at most maxSize tasks (0: no bound) in the delay class
// with the smallest expected delay.
func (c *Client) SpawnJob(ctx context.Context, typ string, state []byte, minSize, maxSize int) ([]task.TID, error) {
	var rep tidsReply
	err := c.call(ctx, mSpawn, spawnArgs{Req: task.SpawnRequest{Type: typ, State: state, Count: 1}, MinSize: minSize, MaxSize: maxSize}, &rep)
	return rep.TIDs, err
}

// Runner runs programs' root tasks as jobs on the client's virtual
// machine, with the checkpoints opts asks for (RunJob, then ExitError).
func (c *Client) Runner(opts JobOptions) task.Runner {
	return task.RunnerFunc(func(ctx context.Context, root task.Task, out io.Writer) error {
		typ, state, err := task.EncodeState(root)
		if err != nil {
			return err
		}
		info, err := c.RunJob(ctx, typ, state, opts, out)
		if err != nil {
			return err
		}
		return ExitError(info)
	})
}
