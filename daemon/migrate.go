package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/dpvm/dpvm/ckpt"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// Via is how a migrating task's checkpoint travels.
type Via string

// Migration modes.
const (
	// Direct streams the checkpoint from the origin daemon to the
	// destination over a QUIC stream, encoding and transfer overlapped.
	Direct Via = "direct"
	// Indirect writes the checkpoint to the shared directory, from which
	// the destination reads it.
	Indirect Via = "indirect"
)

// ParseVia parses "direct" or "indirect" ("" is direct).
func ParseVia(s string) (Via, error) {
	switch Via(s) {
	case "", Direct:
		return Direct, nil
	case Indirect:
		return Indirect, nil
	}
	return "", fmt.Errorf("migration mode %q: want direct or indirect", s)
}

// Migration errors.
var (
	// ErrNoSafePoint: the task did not reach a safe point in time; it goes
	// on running where it was.
	ErrNoSafePoint = errors.New("task reached no safe point in time")
	// ErrMoving: the task is already being moved.
	ErrMoving = errors.New("task is already moving")
	// ErrNoSharedDir: indirect migration needs a shared directory.
	ErrNoSharedDir = errors.New("no shared directory configured (--shared-dir)")
)

// MigrateResult describes a completed migration.
type MigrateResult struct {
	TID   task.TID    `msgpack:"t" json:"tid"`
	From  task.HostID `msgpack:"f" json:"from"`
	To    task.HostID `msgpack:"o" json:"to"`
	Via   Via         `msgpack:"v" json:"via"`
	Epoch uint64      `msgpack:"e" json:"epoch"`
	// Seconds is the whole move, from the request to the commit.
	Seconds float64 `msgpack:"s" json:"seconds"`
	// FreezeMS is how long the task was stopped: from its suspension at a
	// safe point until it ran again at the destination.
	FreezeMS float64 `msgpack:"z" json:"freeze_ms"`
	// CheckpointBytes is the checkpoint's size.
	CheckpointBytes int64 `msgpack:"b" json:"checkpoint_bytes"`
}

// moveRequest asks a running task to suspend at its next safe point.
type moveRequest struct {
	to    task.HostID
	epoch uint64
	done  chan error // nil once suspended
}

// leaving is a task suspended on this daemon (the origin) while it moves:
// what an abort needs to resume it here.
type leaving struct {
	h        *hosted
	meta     ckpt.Meta
	dest     routing.Route
	file     string        // indirect: the checkpoint file to remove on commit
	resolved chan struct{} // closed on commit or abort
}

// arriving is a task prepared on this daemon (the destination): messages
// for it are held, unacknowledged, until it is restored.
type arriving struct {
	typ   string
	epoch uint64
	from  task.HostID
	held  []heldMsg
	// received is filled by a direct transfer.
	received chan transferred
}

type heldMsg struct {
	host task.HostID // the daemon to acknowledge to
	env  routing.Envelope
}

type transferred struct {
	meta *ckpt.Meta
	t    task.Task
	err  error
}

// Control request bodies for migration.
type (
	migrateArgs struct {
		TID     task.TID      `msgpack:"t"`
		To      string        `msgpack:"o"`
		Via     Via           `msgpack:"v"`
		Timeout time.Duration `msgpack:"w,omitempty"`
	}
	migStep struct {
		TID     task.TID      `msgpack:"t"`
		Type    string        `msgpack:"y,omitempty"`
		Host    task.HostID   `msgpack:"h,omitempty"` // the other end
		Epoch   uint64        `msgpack:"e,omitempty"`
		Via     Via           `msgpack:"v,omitempty"`
		Name    string        `msgpack:"n,omitempty"` // indirect: file name
		Route   routing.Route `msgpack:"r"`           // abort: the way back
		Timeout time.Duration `msgpack:"w,omitempty"`
	}
	migReply struct {
		Type  string `msgpack:"y,omitempty"`
		Bytes int64  `msgpack:"b,omitempty"`
	}
	streamHeader struct {
		TID   task.TID `msgpack:"t"`
		Epoch uint64   `msgpack:"e"`
	}
)

// Migration control methods.
const (
	mMigrate = "migrate"     // at the master: move a task
	mMigInfo = "mig.info"    // at the origin: the task's type
	mMigPrep = "mig.prepare" // at the destination
	mMigSusp = "mig.suspend" // at the origin: suspend at a safe point
	mMigSend = "mig.send"    // at the origin: write the checkpoint
	mMigLoad = "mig.restore" // at the destination: read it, restore, run
	mMigDone = "mig.commit"  // at the origin: forget the task
	mMigBack = "mig.resume"  // at the origin: abort, resume here
	mMigDrop = "mig.cancel"  // at the destination: abort
)

func (d *Daemon) ckptKey() []byte {
	if d.cfg.Key == nil {
		return nil
	}
	return d.cfg.Key.Secret("checkpoint-mac")
}

// Migrate moves task tid to the host named to (master): the protocol of
// DESIGN §5. It returns when the task runs at the destination, or after an
// abort, when it runs at its origin again.
func (d *Daemon) Migrate(ctx context.Context, tid task.TID, to string, via Via) (MigrateResult, error) {
	res := MigrateResult{TID: tid, Via: via}
	defer d.schedDirty() // moved, or perhaps half-way: the scheduler lists again
	fail := func(err error) (MigrateResult, error) {
		return res, fmt.Errorf("migrate %v to %s: %w", tid, to, err)
	}
	if !d.isMaster() || d.nw == nil {
		return fail(errors.New("only the master of a multi-host virtual machine migrates"))
	}
	if via == Indirect && d.cfg.SharedDir == "" {
		return fail(ErrNoSharedDir)
	}
	b, err := d.hostByName(to)
	if err != nil {
		return fail(err)
	}
	d.migMu.Lock()
	if d.migs[tid] != nil {
		d.migMu.Unlock()
		return fail(ErrMoving)
	}
	mig := &migration{tid: tid}
	d.migs[tid] = mig
	d.migMu.Unlock()
	defer func() {
		d.migMu.Lock()
		delete(d.migs, tid)
		d.migMu.Unlock()
	}()

	d.rmu.Lock()
	cur := d.routes.Lookup(tid)
	d.rmu.Unlock()
	a := cur.Host
	res.From, res.To = a, b
	if !d.hostKnown(a) {
		return fail(task.ErrNoSuchTask)
	}
	if a == b {
		return fail(fmt.Errorf("it already runs on %v", b))
	}
	start := time.Now()
	var info migReply
	if err := d.callHost(ctx, a, mMigInfo, migStep{TID: tid}, &info); err != nil {
		return fail(err)
	}
	epoch := cur.Epoch + 1
	res.Epoch = epoch
	back := routing.Route{Host: a, Epoch: epoch + 1}
	name := fmt.Sprintf("%s-%d.ckpt", tid, epoch)
	if err := d.callHost(ctx, b, mMigPrep, migStep{TID: tid, Type: info.Type, Host: a, Epoch: epoch}, nil); err != nil {
		return fail(fmt.Errorf("prepare %v: %w", b, err))
	}
	// Suspend at a safe point; on failure the task runs on where it is.
	timeout := d.cfg.MoveTimeout
	if err := d.callHost(ctx, a, mMigSusp, migStep{TID: tid, Host: b, Epoch: epoch, Timeout: timeout}, nil); err != nil {
		_ = d.callHost(ctx, b, mMigDrop, migStep{TID: tid, Route: cur}, nil)
		return fail(err)
	}
	frozen := time.Now()
	// From here on, a failure aborts back to the origin.
	d.migMu.Lock()
	mig.from, mig.to, mig.back = a, b, back
	d.migMu.Unlock()
	abort := func(cause error) (MigrateResult, error) {
		d.log.Warn("migration aborted", "tid", tid, "from", a, "to", b, "cause", cause)
		d.abortMove(mig)
		return fail(fmt.Errorf("aborted, %v runs on %v again: %w", tid, a, cause))
	}
	d.setRoute(tid, routing.Route{Host: b, Epoch: epoch})
	var sent migReply
	if err := d.callHost(ctx, a, mMigSend, migStep{TID: tid, Host: b, Epoch: epoch, Via: via, Name: name}, &sent); err != nil {
		return abort(fmt.Errorf("transfer: %w", err))
	}
	res.CheckpointBytes = sent.Bytes
	d.fault("migrate:sent")
	if err := d.callHost(ctx, b, mMigLoad, migStep{TID: tid, Host: a, Epoch: epoch, Via: via, Name: name, Timeout: timeout}, nil); err != nil {
		return abort(fmt.Errorf("restore on %v: %w", b, err))
	}
	d.migMu.Lock()
	if mig.aborted { // the destination was lost meanwhile; the task runs at its origin
		d.migMu.Unlock()
		return fail(fmt.Errorf("aborted, %v runs on %v again: the destination was lost", tid, a))
	}
	mig.restored = true // from now on the task lives at the destination
	d.migMu.Unlock()
	d.fault("migrate:restored")
	res.FreezeMS = float64(time.Since(frozen).Microseconds()) / 1e3
	if err := d.callHost(ctx, a, mMigDone, migStep{TID: tid}, nil); err != nil {
		d.log.Warn("commit at the origin", "tid", tid, "error", err)
	}
	res.Seconds = time.Since(start).Seconds()
	d.log.Info("migrated", "tid", tid, "from", a, "to", b, "via", via, "bytes", res.CheckpointBytes,
		"seconds", res.Seconds, "freeze_ms", res.FreezeMS)
	return res, nil
}

// setRoute records a route in the master's table and broadcasts it.
func (d *Daemon) setRoute(tid task.TID, r routing.Route) {
	e := routing.Entry{TID: tid, Route: r}
	d.applyRoutes([]routing.Entry{e})
	d.broadcast(&event{Kind: evRoute, Routes: []routing.Entry{e}}, 0)
}

// handleMigration serves the migration steps at the origin and the
// destination.
func (d *Daemon) handleMigration(ctx context.Context, p *peer, method string, body []byte) (any, error) {
	var a migStep
	if err := decodeMsg(body, &a); err != nil {
		return nil, err
	}
	switch method {
	case mMigInfo:
		d.mu.Lock()
		h := d.tasks[a.TID]
		d.mu.Unlock()
		if h == nil {
			return nil, fmt.Errorf("%v: %w", a.TID, task.ErrNoSuchTask)
		}
		return migReply{Type: h.typ}, nil
	case mMigPrep:
		return nil, d.prepareArrival(a)
	case mMigSusp:
		return nil, d.suspendForMove(ctx, a)
	case mMigSend:
		n, err := d.sendCheckpoint(ctx, a)
		return migReply{Bytes: n}, err
	case mMigLoad:
		return nil, d.restoreArrival(ctx, a)
	case mMigDone:
		d.commitDeparture(a.TID)
		return nil, nil
	case mMigBack:
		return nil, d.resumeDeparture(a.TID, a.Route)
	case mMigDrop:
		d.cancelArrival(a.TID, a.Route)
		return nil, nil
	}
	return nil, fmt.Errorf("unknown method %q", method)
}

// prepareArrival readies this daemon (the destination) to receive a task.
func (d *Daemon) prepareArrival(a migStep) error {
	if _, err := task.New(a.Type, nil); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, here := d.tasks[a.TID]; here {
		return fmt.Errorf("%v already runs here", a.TID)
	}
	if d.incoming[a.TID] != nil {
		return fmt.Errorf("%v: %w", a.TID, ErrMoving)
	}
	d.incoming[a.TID] = &arriving{typ: a.Type, epoch: a.Epoch, from: a.Host, received: make(chan transferred, 1)}
	return nil
}

// suspendForMove asks a local task to suspend at its next safe point and
// waits until it has, or the timeout passes (then the request is
// withdrawn and the task runs on).
func (d *Daemon) suspendForMove(ctx context.Context, a migStep) error {
	d.mu.Lock()
	h := d.tasks[a.TID]
	d.mu.Unlock()
	if h == nil {
		return fmt.Errorf("%v: %w", a.TID, task.ErrNoSuchTask)
	}
	req := &moveRequest{to: a.Host, epoch: a.Epoch, done: make(chan error, 1)}
	if !h.moveReq.CompareAndSwap(nil, req) {
		return fmt.Errorf("%v: %w", a.TID, ErrMoving)
	}
	select { // wake the task if it waits in RecvSafe
	case h.moveKick <- struct{}{}:
	default:
	}
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-req.done: // suspended, or it exited first (see finish)
		return err
	case <-t.C:
	case <-ctx.Done():
	}
	// Withdraw the request, unless the task took it meanwhile.
	if h.moveReq.CompareAndSwap(req, nil) {
		h.warnNoSafePoint("move", timeout)
		return fmt.Errorf("%v within %v: %w", a.TID, timeout, ErrNoSafePoint)
	}
	return <-req.done
}

// suspend is called by the task's own goroutine at a safe point when a move
// is pending: it takes the task out of service and captures what moves
// with it. Messages for it are refused from now on (senders hold them).
func (d *Daemon) suspend(h *hosted, req *moveRequest) error {
	d.rmu.Lock()
	d.mu.Lock()
	if cur := d.tasks[h.tid]; cur != h {
		d.mu.Unlock()
		d.rmu.Unlock()
		req.done <- fmt.Errorf("%v: %w", h.tid, task.ErrNoSuchTask)
		return task.ErrKilled
	}
	delete(d.tasks, h.tid)
	m := d.metaLocked(h, h.mb.drain())
	m.Epoch = req.epoch
	d.inbox.Forget(h.tid)
	d.outbox.ForgetSender(h.tid)
	delete(d.watch, h.tid)
	d.hostW = slices.DeleteFunc(d.hostW, func(w hostWatcher) bool { return w.who == h.tid })
	d.moving[h.tid] = &leaving{h: h, meta: m, dest: routing.Route{Host: req.to, Epoch: req.epoch}, resolved: make(chan struct{})}
	h.moved = true
	h.mb.close()
	d.mu.Unlock()
	d.rmu.Unlock()
	h.cancel() // its goroutine ends now; calls it might still make fail
	close(h.done)
	d.log.Debug("task suspended for a move", "tid", h.tid, "to", req.to)
	req.done <- nil
	return task.ErrSuspended
}

// sendCheckpoint writes a suspended task's checkpoint to the destination
// (direct) or the shared directory (indirect) and returns its size.
func (d *Daemon) sendCheckpoint(ctx context.Context, a migStep) (int64, error) {
	d.mu.Lock()
	l := d.moving[a.TID]
	d.mu.Unlock()
	if l == nil {
		return 0, fmt.Errorf("%v is not suspended here", a.TID)
	}
	key := d.ckptKey()
	if a.Via == Indirect {
		if d.cfg.SharedDir == "" {
			return 0, ErrNoSharedDir
		}
		// At rest in a directory other hosts can write, the checkpoint
		// carries a MAC: GMAC tags computed on all cores (ckpt.AuthGMAC).
		// The file lives only until the destination has read it, so the
		// directory is not synced after the rename (Transient), and the
		// destination reads it while its fdatasync runs in the
		// background: neither the task's freeze nor the commit waits for
		// the disk. Nothing the move relies on needs the bytes on the disk
		// (the destination verifies what it reads; a lost file aborts the
		// move, and the task resumes here); a failed sync is logged.
		n, sync, err := ckpt.Dir{Path: d.cfg.SharedDir, Transient: true}.SaveThenSync(a.Name, func(w io.Writer) error {
			_, err := ckpt.WriteWith(w, key, &l.meta, l.h.t, ckpt.WriteOptions{Auth: ckpt.AuthGMAC})
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("write %s to the shared directory: %w", a.Name, err)
		}
		d.goFunc(func() {
			if err := sync(); err != nil {
				d.log.Warn("checkpoint file not synced", "tid", a.TID, "error", err)
			}
		})
		d.mu.Lock()
		l.file = a.Name
		d.mu.Unlock()
		return n, nil
	}
	p, err := d.peerFor(ctx, a.Host)
	if err != nil {
		return 0, err
	}
	st, err := p.conn.OpenStream(ctx)
	if err != nil {
		return 0, fmt.Errorf("open a stream to %v: %w", a.Host, err)
	}
	hdr, err := encodeMsg(&streamHeader{TID: a.TID, Epoch: a.Epoch})
	if err != nil {
		return 0, err
	}
	if _, err := st.Write(routing.AppendFrame(nil, routing.KindStream, hdr)); err != nil {
		return 0, fmt.Errorf("send the checkpoint to %v: %w", a.Host, err)
	}
	// The stream is authenticated and protected by the connection (mutual
	// TLS under the cluster key, AEAD): the checkpoint carries no MAC of
	// its own, only a CRC-32C (ckpt.AuthChannel).
	n, err := ckpt.WriteWith(st, key, &l.meta, l.h.t, ckpt.WriteOptions{Auth: ckpt.AuthChannel})
	if err != nil {
		return n, fmt.Errorf("send the checkpoint to %v: %w", a.Host, err)
	}
	if err := st.Close(); err != nil {
		return n, fmt.Errorf("send the checkpoint to %v: %w", a.Host, err)
	}
	return n, nil
}

// acceptStreams serves the extra streams a peer opens: direct checkpoint
// transfers.
func (d *Daemon) acceptStreams(p *peer) {
	for {
		st, err := p.conn.AcceptStream(d.ctx)
		if err != nil {
			return
		}
		d.goFunc(func() { d.receiveCheckpoint(p, st) })
	}
}

// receiveCheckpoint reads a checkpoint sent directly by another daemon for
// a task prepared here, and hands it to the waiting restore.
func (d *Daemon) receiveCheckpoint(p *peer, st io.ReadWriteCloser) {
	defer st.Close()
	r := routing.NewReader(st, 1<<10)
	f, err := r.Next()
	if err != nil || f.Kind != routing.KindStream {
		d.log.Warn("refused a stream", "peer", p.name(), "error", err)
		return
	}
	var h streamHeader
	if err := decodeMsg(f.Body, &h); err != nil {
		return
	}
	d.mu.Lock()
	arr := d.incoming[h.TID]
	d.mu.Unlock()
	if arr == nil || arr.epoch != h.Epoch || arr.from != p.info.ID {
		d.log.Warn("refused a checkpoint for a task not prepared here", "tid", h.TID, "peer", p.name())
		return
	}
	// The peer is an authenticated daemon of the cluster: its stream may
	// carry a checkpoint without a MAC, and its numeric blocks are
	// allocated in full as their headers arrive (up to MaxState) instead of
	// growing by doubling.
	meta, t, err := ckpt.ReadLimits(st, d.ckptKey(), ckpt.Limits{Channel: true, Prealloc: ckpt.DefaultMaxState})
	select {
	case arr.received <- transferred{meta: meta, t: t, err: err}:
	default:
	}
}

// restoreArrival reads a prepared task's checkpoint (waiting for a direct
// transfer, or from the shared directory), restores it and runs it.
func (d *Daemon) restoreArrival(ctx context.Context, a migStep) error {
	d.mu.Lock()
	arr := d.incoming[a.TID]
	d.mu.Unlock()
	if arr == nil {
		return fmt.Errorf("%v is not prepared here", a.TID)
	}
	if d.cfg.Fault == "exit-on-restore" {
		d.log.Error("fault injected: exiting in the middle of a migration", "tid", a.TID)
		os.Exit(137)
	}
	var got transferred
	if a.Via == Indirect {
		dir := ckpt.Dir{Path: d.cfg.SharedDir}
		f, err := dir.Open(a.Name)
		if err != nil {
			return fmt.Errorf("read %s from the shared directory: %w", a.Name, err)
		}
		got.meta, got.t, got.err = ckpt.Read(f, d.ckptKey())
		f.Close()
		if got.err == nil {
			// Deleted once read, outside the task's freeze.
			defer d.goFunc(func() { _ = dir.Remove(a.Name) })
		}
	} else {
		timeout := a.Timeout
		if timeout <= 0 {
			timeout = 30 * time.Second
		}
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case got = <-arr.received:
		case <-t.C:
			return fmt.Errorf("no checkpoint arrived within %v", timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if got.err != nil {
		return fmt.Errorf("checkpoint of %v: %w", a.TID, got.err)
	}
	if got.meta.TID != a.TID || got.meta.Epoch != arr.epoch || got.meta.Type != arr.typ {
		return fmt.Errorf("checkpoint is of %v epoch %d (%s), want %v epoch %d (%s)",
			got.meta.TID, got.meta.Epoch, got.meta.Type, a.TID, arr.epoch, arr.typ)
	}
	d.install(got.meta, got.t, arr, nil)
	return nil
}

// install puts a task restored from meta and its state into service on
// this daemon: its mailbox, sequence state and registrations, then the
// messages held for it (through the inbox, in sequence order), then its
// goroutine. It takes the task out of the arriving (destination) or
// leaving (origin, after an abort) state in the same critical section in
// which it enters service, so that no message ever finds it in neither —
// such a message would be refused as for a task that has exited, and its
// sender would drop it.
func (d *Daemon) install(m *ckpt.Meta, t task.Task, arr *arriving, left *leaving) {
	ctx, cancel := context.WithCancel(d.ctx)
	h := &hosted{d: d, tid: m.TID, parent: m.Parent, job: m.Job, typ: m.Type, t: t, ctx: ctx, cancel: cancel,
		started: time.Now(), done: make(chan struct{}), moveKick: make(chan struct{}, 1)}
	for _, g := range m.Groups { // the host's record, for a recovered master
		if h.groups == nil {
			h.groups = map[string]int{}
		}
		h.groups[g.Group] = g.Inst
	}
	for _, e := range m.Mailbox {
		h.mb.putEnvelope(e)
	}
	acks := map[task.HostID][]byte{}
	d.rmu.Lock()
	d.inbox.SetReceiverState(m.TID, m.InSeq, m.Early)
	d.outbox.SetSenderState(m.TID, m.OutSeq)
	d.mu.Lock()
	var held []heldMsg
	if arr != nil {
		held = arr.held
		delete(d.incoming, m.TID)
	}
	if left != nil {
		delete(d.moving, m.TID)
	}
	d.tasks[m.TID] = h
	for _, w := range m.Watchers {
		d.watch[m.TID] = append(d.watch[m.TID], watcher{who: w.Who, tag: w.Tag})
	}
	for _, w := range m.HostWatches {
		d.hostW = append(d.hostW, hostWatcher{watcher: watcher{who: m.TID, tag: w.Tag}, kind: w.Kind, host: w.Host})
	}
	d.wg.Add(1)
	d.mu.Unlock()
	d.tasksChanged()
	for _, x := range held {
		if x.env.Seq == 0 {
			h.mb.putEnvelope(x.env)
			continue
		}
		a := d.inbox.Accept(x.env, func(e routing.Envelope) {
			h.mb.putEnvelope(e)
		})
		if x.host == d.cfg.HostID {
			d.outbox.Ack(a)
		} else {
			acks[x.host] = routing.AppendAck(acks[x.host], a)
		}
	}
	// Messages this daemon's own tasks held for the task go in too.
	var local []routing.Envelope
	if r := d.routes.Lookup(m.TID); r.Host == d.cfg.HostID {
		_, local = d.outbox.Reroute(m.TID, r, time.Now())
	}
	for _, e := range local {
		a := d.inbox.Accept(e, func(x routing.Envelope) {
			h.mb.putEnvelope(x)
		})
		d.outbox.Ack(a)
	}
	d.rmu.Unlock()
	for host, b := range acks {
		if p, err := d.peerFor(d.ctx, host); err == nil {
			p.frame(routing.KindAcks, b)
		}
	}
	d.log.Debug("task restored", "tid", m.TID, "type", m.Type, "mailbox", len(m.Mailbox), "held", len(held))
	go d.run(h)
}

// commitDeparture forgets a task that now runs elsewhere (origin).
func (d *Daemon) commitDeparture(tid task.TID) {
	d.mu.Lock()
	l := d.moving[tid]
	delete(d.moving, tid)
	d.mu.Unlock()
	if l == nil {
		return
	}
	if l.file != "" {
		_ = ckpt.Dir{Path: d.cfg.SharedDir}.Remove(l.file)
	}
	close(l.resolved)
}

// resumeDeparture aborts a move at the origin: the task runs here again,
// from the state it was suspended with, at route back.
func (d *Daemon) resumeDeparture(tid task.TID, back routing.Route) error {
	d.mu.Lock()
	l := d.moving[tid]
	d.mu.Unlock()
	if l == nil {
		return fmt.Errorf("%v is not suspended here", tid)
	}
	if l.file != "" {
		_ = ckpt.Dir{Path: d.cfg.SharedDir}.Remove(l.file)
	}
	d.rmu.Lock()
	d.routes.Update(tid, back)
	d.rmu.Unlock()
	m := l.meta
	d.install(&m, l.h.t, nil, l)
	close(l.resolved)
	return nil
}

// cancelArrival aborts a move at the destination: messages held for the
// task are refused, naming the way back.
func (d *Daemon) cancelArrival(tid task.TID, back routing.Route) {
	d.mu.Lock()
	arr := d.incoming[tid]
	delete(d.incoming, tid)
	d.mu.Unlock()
	d.rmu.Lock()
	d.routes.Update(tid, back)
	var held []heldMsg
	if arr != nil {
		held = arr.held
	}
	refusals := map[task.HostID][]byte{}
	for _, x := range held {
		if x.host == d.cfg.HostID {
			continue // still in this daemon's outbox: rerouted below
		}
		refusals[x.host] = routing.AppendRefusal(refusals[x.host], routing.Refusal{To: tid, Route: back})
	}
	h, envs := d.outbox.Reroute(tid, back, time.Now())
	d.rmu.Unlock()
	for host, b := range refusals {
		if p, err := d.peerFor(d.ctx, host); err == nil {
			p.frame(routing.KindRefuse, b)
		}
	}
	if len(envs) > 0 {
		d.transmit(h, envs)
	}
}

// migration is a move under way, as the master tracks it.
type migration struct {
	tid      task.TID
	from, to task.HostID // set once the task is suspended
	back     routing.Route
	aborted  bool
	restored bool // the destination runs the task: too late to abort
}

// abortMove sends a suspended task back to its origin, once: the origin
// resumes it, then the route back is broadcast, then the destination
// drops what it held. The master calls it when a move fails, and when the
// destination host is lost — before it tells anyone the host is gone, so
// that messages held for the task follow the route back instead of being
// dropped with the lost host.
func (d *Daemon) abortMove(m *migration) {
	d.migMu.Lock()
	if m.aborted || m.restored || m.from == 0 {
		d.migMu.Unlock()
		return
	}
	m.aborted = true
	d.migMu.Unlock()
	actx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.callHost(actx, m.from, mMigBack, migStep{TID: m.tid, Route: m.back}, nil); err != nil {
		d.log.Error("resume after an aborted migration", "tid", m.tid, "error", err)
	}
	d.setRoute(m.tid, m.back)
	go func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.callHost(dctx, m.to, mMigDrop, migStep{TID: m.tid, Route: m.back}, nil)
	}()
}

// abortMovesTo aborts the moves whose destination is host h (master).
func (d *Daemon) abortMovesTo(h task.HostID) {
	d.migMu.Lock()
	var ms []*migration
	for _, m := range d.migs {
		if m.to == h && !m.aborted {
			ms = append(ms, m)
		}
	}
	d.migMu.Unlock()
	for _, m := range ms {
		d.log.Warn("migration aborted: its destination was lost", "tid", m.tid, "from", m.from, "to", h)
		d.abortMove(m)
	}
}
