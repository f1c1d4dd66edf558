package daemon

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/dpvm/dpvm/task"
)

// spawnSet is the tasks one spawn started, in spawn order: what each of
// them gets from Ctx.Siblings (pvm_siblings). The tasks of one spawn hosted
// here share it. A spawn that spans hosts starts its tasks held: none runs
// until the master, once every host has started its share, sends the whole
// list (mSiblings). The list is set once, before ready is closed, and never
// changes after; a restored task's set is complete from the start, its list
// read from its checkpoint.
type spawnSet struct {
	once  sync.Once
	tids  []task.TID    // the whole spawn's, once ready is closed
	ready chan struct{} // closed when tids is set

	mu    sync.Mutex
	local []task.TID // the spawn's tasks started here

	// next is the number of the spawn's next task here, handed out by
	// the master (0: the host numbers it); guarded by the hosting lock.
	next uint32
}

// number is the number of a task of set (nil: a task started alone)
// started now (ht.mu held): the next the master handed out for the set,
// or the host's own next.
func (s *spawnSet) number(ht *hosting) uint32 {
	if s != nil && s.next != 0 {
		n := s.next
		s.next++
		return n
	}
	ht.nextNum++
	ht.ownNum = ht.nextNum
	return ht.nextNum
}

// errNumsTaken is a start whose task numbers, handed out by the master,
// this host has taken already: last is the last number it took.
type errNumsTaken struct{ first, last uint32 }

func (e errNumsTaken) Error() string {
	return fmt.Sprintf("task numbers from %d are taken here (up to %d)", e.first, e.last)
}

// reserveNums sets aside the numbers first to first+n-1 that the master
// handed out for a start of n tasks here, or says they are taken: this
// host numbered a task with one of them by itself. Numbers the master
// hands out for other starts are never the same, whatever order the
// starts come in.
func (d *Daemon) reserveNums(set *spawnSet, first uint32, n int) error {
	d.ht.mu.Lock()
	defer d.ht.mu.Unlock()
	last := uint64(first) + uint64(max(n, 1)) - 1
	if first <= d.ht.ownNum || last > math.MaxUint32 {
		return errNumsTaken{first: first, last: d.ht.nextNum}
	}
	d.ht.nextNum = max(d.ht.nextNum, uint32(last))
	set.next = first
	return nil
}

// ownNums makes every task number this host has used or set aside so
// far its own, as if it had taken them itself: a host registering again
// may find a master that lost count of the numbers it handed out (one
// recovered), whose starts numbered with them are then answered Taken
// rather than start a task under a TID in use.
func (d *Daemon) ownNums() {
	d.ht.mu.Lock()
	d.ht.ownNum = d.ht.nextNum
	d.ht.mu.Unlock()
}

func newSpawnSet() *spawnSet { return &spawnSet{ready: make(chan struct{})} }

// readySet is the set of a task whose siblings are known: tids.
func readySet(tids []task.TID) *spawnSet {
	s := newSpawnSet()
	s.complete(tids)
	return s
}

// complete sets the list; only the first call counts.
func (s *spawnSet) complete(tids []task.TID) {
	s.once.Do(func() {
		s.tids = tids
		close(s.ready)
	})
}

// list is the spawn's tasks, or nil while they are not known.
func (s *spawnSet) list() []task.TID {
	if s == nil {
		return nil
	}
	select {
	case <-s.ready:
		return s.tids
	default:
		return nil
	}
}

// started records a task of the spawn started here.
func (s *spawnSet) started(tid task.TID) {
	s.mu.Lock()
	s.local = append(s.local, tid)
	s.mu.Unlock()
}

// siblings is the task's spawn, in spawn order: the task alone when
// nothing says otherwise (a task started by SpawnTask, or restored from a
// checkpoint that names none).
func (h *hosted) siblings() []task.TID {
	if l := h.sibs.list(); len(l) > 0 {
		return l
	}
	return []task.TID{h.tid}
}

// awaitSiblings holds a task started by a spawn that spans hosts until its
// siblings are known. It returns ErrKilled when the task is killed first,
// and an error when the list does not come within MasterGrace (the master
// lost before it finished the spawn): the task then ends without running.
func (d *Daemon) awaitSiblings(h *hosted) error {
	if h.sibs == nil {
		return nil
	}
	select {
	case <-h.sibs.ready:
		return nil
	default:
	}
	wait := d.cfg.MasterGrace
	if wait <= 0 {
		wait = d.cfg.DeadAfter
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-h.sibs.ready:
		return nil
	case <-h.ctx.Done():
		return task.ErrKilled
	case <-t.C:
		return fmt.Errorf("%v: the master did not complete the spawn that started it within %v", h.tid, wait)
	}
}

// startSpawn starts req.Count tasks of job on this daemon, as startLocal
// does, sharing one spawnSet. With hold false the spawn is this host's
// alone and the tasks' siblings are those it started, known before the
// first runs (startTasks): none waits for them (awaitSiblings). With hold
// true they wait for the master's mSiblings. With first not 0, the tasks
// are numbered from first, as the master handed out (reserveNums).
func (d *Daemon) startSpawn(ctx context.Context, parent task.TID, job uint64, req task.SpawnRequest, hold bool, first uint32) ([]task.TID, error) {
	set := newSpawnSet()
	if first != 0 {
		if err := checkSpawnCount(req.Count, d.cfg.MaxSpawn); err != nil {
			return nil, err
		}
		if err := d.reserveNums(set, first, req.Count); err != nil {
			return nil, err
		}
	}
	return d.startTasks(ctx, parent, job, req, set, !hold)
}

// releaseSiblings completes the held spawn whose tasks are tids, in spawn
// order (mSiblings, from the master): every task of it started here must
// be listed.
func (d *Daemon) releaseSiblings(tids []task.TID) error {
	if len(tids) > d.cfg.MaxSpawn {
		return fmt.Errorf("siblings: %d tasks, at most %d in one spawn: %w", len(tids), d.cfg.MaxSpawn, ErrLimit)
	}
	var listed map[task.TID]struct{} // tids as a set, made once a set here needs it
	for _, t := range tids {
		h := d.ht.task(t)
		if h == nil || h.sibs == nil || h.sibs.list() != nil {
			continue
		}
		if listed == nil {
			listed = make(map[task.TID]struct{}, len(tids))
			for _, l := range tids {
				listed[l] = struct{}{}
			}
		}
		h.sibs.mu.Lock()
		local := slices.Clone(h.sibs.local)
		h.sibs.mu.Unlock()
		for _, l := range local {
			if _, ok := listed[l]; !ok {
				return fmt.Errorf("siblings: %v started here is not among the %d listed", l, len(tids))
			}
		}
		h.sibs.complete(slices.Clone(tids))
	}
	return nil
}

// releaseSpawn sends the tasks a spawn that spans hosts started, in spawn
// order, to the hosts that started them (master), so that they run, even
// when the spawn's caller has gone. A host that does not take it loses its
// share of the spawn: its tasks give up waiting (awaitSiblings).
func (d *Daemon) releaseSpawn(hosts []task.HostID, tids []task.TID) {
	if len(tids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.MoveStepTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, h := range hosts { // every host at once
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.callHost(ctx, h, mSiblings, siblingsArgs{TIDs: tids}, nil); err != nil {
				d.log.Warn("could not start a spawn's tasks held on a host", "host", h, "tasks", len(tids), "error", err)
			}
		}()
	}
	wg.Wait()
}
