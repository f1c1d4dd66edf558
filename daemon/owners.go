package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/task"
)

// maxOwnedTasks bounds the tasks outside any job whose owner the master
// remembers; past it the oldest entries are forgotten (their tasks become
// an admin's to control).
const maxOwnedTasks = 1 << 16

// owners is who started what (master): the person whose user certificate
// started a job, or spawned tasks outside any job. A user may kill,
// migrate and checkpoint only what they own; an admin anything. Owners
// live in the master's memory: after a master recovery, only admins
// control the jobs that were running.
type owners struct {
	mu    sync.Mutex
	jobs  map[uint64]string
	tasks map[task.TID]string
	order []task.TID // tasks in the order recorded, for forgetting
}

func (o *owners) setJob(job uint64, name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.jobs == nil {
		o.jobs = map[uint64]string{}
	}
	o.jobs[job] = name
}

func (o *owners) setTasks(tids []task.TID, name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.tasks == nil {
		o.tasks = map[task.TID]string{}
	}
	for _, t := range tids {
		if len(o.order) >= maxOwnedTasks {
			delete(o.tasks, o.order[0])
			o.order = o.order[1:]
		}
		o.tasks[t] = name
		o.order = append(o.order, t)
	}
}

func (o *owners) job(job uint64) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, ok := o.jobs[job]
	return n, ok
}

func (o *owners) task(t task.TID) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, ok := o.tasks[t]
	return n, ok
}

// callerKey carries the certificate of the person a control call came
// from in its context.
type callerKey struct{}

func withCaller(ctx context.Context, c pki.Peer) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// callerOf is the person a control call came from, if a person's.
func callerOf(ctx context.Context) (pki.Peer, bool) {
	c, ok := ctx.Value(callerKey{}).(pki.Peer)
	return c, ok && c.Role.Client()
}

// ownJob records the caller of ctx, if a person, as job's owner.
func (d *Daemon) ownJob(ctx context.Context, job uint64) {
	if c, ok := callerOf(ctx); ok {
		d.owners.setJob(job, c.Name)
	}
}

// taskJob is the job task tid belongs to, asked of its host.
func (d *Daemon) taskJob(ctx context.Context, tid task.TID) (uint64, error) {
	var rep psReply
	if err := d.callHost(ctx, d.routeHost(tid), mPS, psArgs{All: true}, &rep); err != nil {
		return 0, err
	}
	for _, t := range rep.Tasks {
		if t.TID == tid {
			return t.Job, nil
		}
	}
	return 0, fmt.Errorf("%v: %w", tid, task.ErrNoSuchTask)
}

// checkTaskOwner says whether user may act on task tid: it is one they
// spawned outside any job, or one of a job they own.
func (d *Daemon) checkTaskOwner(ctx context.Context, user string, tid task.TID) error {
	if o, ok := d.owners.task(tid); ok {
		if o == user {
			return nil
		}
		return fmt.Errorf("%v is %s's: %w", tid, o, ErrForbidden)
	}
	job, err := d.taskJob(ctx, tid)
	if err != nil {
		return err
	}
	return d.checkJobOwner(user, job, tid.String())
}

func (d *Daemon) checkJobOwner(user string, job uint64, what string) error {
	o, ok := d.owners.job(job)
	if job == 0 || !ok {
		return fmt.Errorf("%s belongs to no job of %s (an admin's to control): %w", what, user, ErrForbidden)
	}
	if o != user {
		return fmt.Errorf("%s is of job %d, %s's: %w", what, job, o, ErrForbidden)
	}
	return nil
}

// ErrOutsideShared is a directory a client named for a checkpoint or a
// restart that lies outside the shared directory and Config.AllowDirs:
// daemons never write or read where any client says.
var ErrOutsideShared = errors.New("outside the shared directory")

// confineDir checks that dir, as a client names it, lies within the
// shared directory or one of Config.AllowDirs, symbolic links resolved.
func (d *Daemon) confineDir(dir string) error {
	if dir == "" {
		return nil
	}
	real, err := resolveDir(dir)
	if err != nil {
		return fmt.Errorf("directory %s: %w", dir, err)
	}
	roots := append([]string{d.cfg.SharedDir}, d.cfg.AllowDirs...)
	for _, r := range roots {
		if r == "" {
			continue
		}
		rr, err := resolveDir(r)
		if err != nil {
			continue
		}
		if rel, err := filepath.Rel(rr, real); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return nil
		}
	}
	return fmt.Errorf("directory %s: %w (%s) or an allowed directory (--allow-dir)", dir, ErrOutsideShared, d.cfg.SharedDir)
}

// resolveDir makes dir absolute and resolves the symbolic links of its
// longest existing prefix.
func resolveDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	rest := ""
	for p := abs; ; p = filepath.Dir(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest), nil
		}
		if p == filepath.Dir(p) {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}
