package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"dpvm/task"
)

// hosted implements task.Endpoint: the calls a task's Ctx makes.
var _ task.Endpoint = (*hosted)(nil)

func (h *hosted) Self() task.TID                                   { return h.tid }
func (h *hosted) Parent() task.TID                                 { return h.parent }
func (h *hosted) HostName() string                                 { return h.d.cfg.Name }
func (h *hosted) Context() context.Context                         { return h.ctx }
func (h *hosted) Output() io.Writer                                { return h.d.out }
func (h *hosted) Logger() *slog.Logger                             { return h.d.log.With("tid", h.tid) }
func (h *hosted) Exit(status int)                                  { h.exitStatus, h.exitCalled = status, true }
func (h *hosted) alive() error                                     { return h.ctxErr(nil) }
func (h *hosted) dead() <-chan struct{}                            { return h.ctx.Done() }
func (h *hosted) Probe(from task.TID, tag int) (task.Status, bool) { return h.mb.probe(from, tag) }

// ctxErr returns ErrKilled once the task is dead, else ctx's error.
func (h *hosted) ctxErr(ctx context.Context) error {
	if h.ctx.Err() != nil {
		return task.ErrKilled
	}
	if ctx != nil {
		return ctx.Err()
	}
	return nil
}

func (h *hosted) Send(ctx context.Context, to []task.TID, tag int, p task.Payload) error {
	if err := h.ctxErr(ctx); err != nil {
		return err
	}
	var errs []error
	for i, t := range to {
		body := p
		if i < len(to)-1 && p.Enc == task.EncBytes {
			// Receivers of a []byte own the bytes they get: copy for all
			// but the last, which gets the original once no copy is left
			// to make from it.
			body.Data = bytes.Clone(p.Data)
		}
		if err := h.d.deliver(h.tid, t, tag, body); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (h *hosted) Recv(ctx context.Context, from task.TID, tag int, wait bool) (task.Message, bool, error) {
	if err := h.ctxErr(ctx); err != nil {
		return task.Message{}, false, err
	}
	e, ok, err := h.mb.get(ctx, h.dead(), from, tag, wait)
	if err != nil || !ok {
		if err != nil && h.ctx.Err() != nil {
			err = task.ErrKilled
		}
		return task.Message{}, false, err
	}
	return task.Message{From: e.from, Tag: e.tag, Payload: e.body}, true, nil
}

func (h *hosted) Spawn(ctx context.Context, req task.SpawnRequest) ([]task.TID, error) {
	if err := h.ctxErr(ctx); err != nil {
		return nil, err
	}
	return h.d.Spawn(ctx, h.tid, req)
}

func (h *hosted) Kill(ctx context.Context, tid task.TID) error {
	if err := h.ctxErr(ctx); err != nil {
		return err
	}
	return h.d.Kill(tid)
}

func (h *hosted) Notify(ctx context.Context, kind task.NotifyKind, tag int, tids []task.TID) error {
	if err := h.ctxErr(ctx); err != nil {
		return err
	}
	d := h.d
	w := watcher{who: h.tid, tag: tag}
	switch kind {
	case task.TaskExit:
		for _, t := range tids {
			d.mu.Lock()
			_, live := d.tasks[t]
			if live {
				d.watch[t] = append(d.watch[t], w)
			}
			old := d.gone[t]
			d.mu.Unlock()
			if !live {
				// Already gone (or never existed): PVM tells at once.
				n := task.Notice{Kind: task.TaskExit, TID: t, Status: -1, Err: "no such task"}
				if old != nil {
					d.mu.Lock()
					n.Status, n.Err = old.status, old.err
					d.mu.Unlock()
				}
				d.notify(t, w, n)
			}
		}
	case task.HostDelete:
		d.mu.Lock()
		if len(tids) == 0 {
			d.hostW = append(d.hostW, hostWatcher{watcher: w, kind: kind})
		}
		for _, t := range tids {
			d.hostW = append(d.hostW, hostWatcher{watcher: w, kind: kind, host: t.Host()})
		}
		d.mu.Unlock()
	case task.HostAdd:
		d.mu.Lock()
		d.hostW = append(d.hostW, hostWatcher{watcher: w, kind: kind})
		d.mu.Unlock()
	default:
		return fmt.Errorf("unknown notify kind %v", kind)
	}
	return nil
}

func (h *hosted) Join(ctx context.Context, group string) (int, error) {
	if err := h.ctxErr(ctx); err != nil {
		return -1, err
	}
	return h.d.groups.join(group, h.tid)
}

func (h *hosted) Leave(ctx context.Context, group string) error {
	if err := h.ctxErr(ctx); err != nil {
		return err
	}
	return h.d.groups.leave(group, h.tid)
}

func (h *hosted) Members(ctx context.Context, group string) ([]task.TID, error) {
	if err := h.ctxErr(ctx); err != nil {
		return nil, err
	}
	return h.d.groups.members(group)
}

func (h *hosted) Barrier(ctx context.Context, group string, count int) error {
	if err := h.ctxErr(ctx); err != nil {
		return err
	}
	err := h.d.groups.wait(ctx, h.dead(), group, h.tid, count)
	if err != nil && h.ctx.Err() != nil {
		err = task.ErrKilled
	}
	return err
}

// SafePoint is where a pending checkpoint would be taken. On a single host
// nothing is ever pending; a killed task learns of it here.
func (h *hosted) SafePoint(task.Task) error { return h.alive() }
