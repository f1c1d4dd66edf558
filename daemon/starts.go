package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dpvm/dpvm/task"
)

// Starts asked again. A start (mStart) is not idempotent: it starts
// tasks. When the connection it went on is lost before its answer, the
// master cannot tell whether the host started them. Each start therefore
// carries an ID of the master's (spawnArgs.Start), and the host remembers
// the starts it served by ID: the master asks again, on a new connection,
// and the host answers what it did the first time instead of starting
// the tasks twice.

// maxStartRecords bounds the starts a daemon remembers; a start asked
// again is asked within a few connection attempts, long before as many
// newer starts have come.
const maxStartRecords = 4096

// startRecords are the starts this daemon served, by the master's ID,
// oldest first in order (at most maxStartRecords); the zero value is
// ready to use.
type startRecords struct {
	mu    sync.Mutex
	byID  map[uint64]*startRecord
	order []uint64
}

// startRecord is one start's outcome, set once before done is closed.
type startRecord struct {
	done chan struct{}
	tids []task.TID
	err  error
}

// serve runs start (the start of ID id) once: a start asked again waits
// for the first's outcome and answers it. An ID of zero (a caller that
// gives none) runs start each time.
func (s *startRecords) serve(ctx context.Context, id uint64, start func() ([]task.TID, error)) ([]task.TID, error) {
	if id == 0 {
		return start()
	}
	s.mu.Lock()
	if r := s.byID[id]; r != nil {
		s.mu.Unlock()
		select {
		case <-r.done:
			return r.tids, r.err
		case <-ctx.Done():
			return nil, fmt.Errorf("start asked again: %w", ctx.Err())
		}
	}
	if s.byID == nil {
		s.byID = map[uint64]*startRecord{}
	}
	r := &startRecord{done: make(chan struct{})}
	s.byID[id] = r
	s.order = append(s.order, id)
	if len(s.order) > maxStartRecords {
		delete(s.byID, s.order[0])
		s.order = s.order[1:]
	}
	s.mu.Unlock()
	defer close(r.done)
	r.tids, r.err = start()
	return r.tids, r.err
}

// startNumbered starts the tasks of a on host h (startOn), numbered by
// the master: a start on another host carries the numbers handed out for
// it (registry.allocNums), which its tasks speak with until the answer is
// in (a start outside any job too, so that the host's count and the
// master's stay the same). A host that has taken those numbers already
// says up to which (a master that lost count: recovered, or a task the
// host started by itself) and is asked again with numbers above, at most
// 3 times. settle ends the start's window once the caller has recorded
// the answer.
func (d *Daemon) startNumbered(ctx context.Context, h task.HostID, a spawnArgs) (rep tidsReply, settle func(), err error) {
	for try := 1; ; try++ {
		a.First = 0
		if h != d.cfg.HostID {
			a.First = d.reg.allocNums(h, a.Req.Count)
		}
		settle = d.reg.expectNums(h, a.Job, a.First, a.Req.Count)
		rep, err = d.startOn(ctx, h, a)
		if err == nil && len(rep.TIDs) == 0 && rep.Taken != 0 {
			d.reg.numsTaken(h, rep.Taken)
			if try < 3 {
				settle()
				continue
			}
			err = fmt.Errorf("start on %v: %w", h, errNumsTaken{first: a.First, last: rep.Taken})
		}
		var last uint32
		for _, t := range rep.TIDs {
			if t.Host() == h {
				last = max(last, t.Num())
			}
		}
		d.reg.numsTaken(h, last)
		return rep, settle, err
	}
}

// startOn asks host h to start the tasks of a (a.Start set here). When
// the host cannot be reached — the connection the call went on was lost,
// or the host is registering again after that loss — it asks again with
// the same ID, every Heartbeat for up to DeadAfter (a host silent that
// long is deemed lost anyway): the host answers a start it has served
// with what it started.
func (d *Daemon) startOn(ctx context.Context, h task.HostID, a spawnArgs) (tidsReply, error) {
	a.Start = d.startIDs.Add(1)
	if a.Start == 0 {
		a.Start = d.startIDs.Add(1)
	}
	var rep tidsReply
	err := d.callHost(ctx, h, mStart, a, &rep)
	if !errors.Is(err, ErrNotConnected) {
		return rep, err
	}
	deadline := time.NewTimer(d.cfg.DeadAfter)
	defer deadline.Stop()
	again := time.NewTicker(d.cfg.Heartbeat)
	defer again.Stop()
	for errors.Is(err, ErrNotConnected) {
		select {
		case <-again.C:
		case <-deadline.C:
			return rep, err
		case <-ctx.Done():
			return rep, err
		case <-d.ctx.Done():
			return rep, err
		}
		d.log.Debug("start: the host was not reached; asking again", "host", h, "start", a.Start, "error", err)
		rep = tidsReply{}
		err = d.callHost(ctx, h, mStart, a, &rep)
	}
	return rep, err
}
