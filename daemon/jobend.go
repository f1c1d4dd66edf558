package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dpvm/dpvm/ckpt"
	"github.com/dpvm/dpvm/ckpt/jobset"
	"github.com/dpvm/dpvm/task"
)

// How a job ends (master). The job's coordinator (jobRunning) follows its
// root task; when the root has ended:
//
//   - the root failed or was killed: the job's other tasks are killed;
//   - the root returned and asked for it (task.JobEnder, task.KillTasks):
//     they are killed too;
//   - otherwise the job waits until they have ended, as PVM's tasks
//     outlive their parent.
//
// Either way the job's other tasks that failed, and those killed at its
// end, are listed in the root's final state (TaskInfo.JobFailures), and a
// run whose job lists any fails, naming them (exitError); a task killed
// earlier by a task of the job or an operator is no failure. Only then is
// the job over: its command is answered and the master forgets it.

// ErrJobTasks marks a run whose job had other tasks that failed or were
// killed at its end (task.ErrJobTasks, for programs that import only the
// task API).
var ErrJobTasks = task.ErrJobTasks

// killsOnReturn reports whether a root task of type typ with state asks
// that its job's other tasks be killed when it returns (task.JobEnder).
// With no state the type's zero value answers.
func killsOnReturn(typ string, state []byte) bool {
	t, err := task.New(typ, state)
	if err != nil {
		return false
	}
	e, ok := t.(task.JobEnder)
	return ok && e.JobEnd() == task.KillTasks
}

// restoredKillsOnReturn reports whether the root of the checkpoint set
// setDir (manifest m) asks that its job's other tasks be killed when it
// returns: its choice may depend on its state (task.JobEnder), so a job
// restarted from the set asks the root's checkpoint, read only when the
// root's type implements JobEnder at all.
func (d *Daemon) restoredKillsOnReturn(setDir string, m *jobset.Manifest) bool {
	for _, e := range m.Entries {
		if e.TID != m.Root {
			continue
		}
		if t, err := task.New(e.Type, nil); err != nil {
			return false
		} else if _, ok := t.(task.JobEnder); !ok {
			return false
		}
		_, t, err := d.readCkptFile(ckpt.Dir{Path: setDir}, e.File)
		if err != nil {
			d.log.Warn("restart: the root's checkpoint does not say how its job ends; its tasks are waited for", "set", setDir, "root", e.TID, "error", err)
			return false
		}
		je, ok := t.(task.JobEnder)
		return ok && je.JobEnd() == task.KillTasks
	}
	return false
}

// settleJob follows job js to its end: its root's, then its other tasks',
// killing them when the root failed or asked for it. It records the
// outcome (js.final) and closes js.settled. A rollback while it waits for
// the other tasks (a host lost) restores the root too: it follows the
// root again.
func (d *Daemon) settleJob(js *jobState) {
	defer close(js.settled)
	for {
		_, gen, _ := js.rollingBack()
		info, err := d.waitJob(d.ctx, js)
		if err != nil {
			js.final = info
			return
		}
		kill := info.State != Exited || info.Status != 0 || js.killOnReturn
		failed := d.awaitJobTasks(d.ctx, js, kill)
		if ch, now, _ := js.rollingBack(); ch != nil || now != gen {
			continue
		}
		info.JobFailures = failed
		js.final = info
		if len(failed) > 0 {
			d.log.Warn("job ended with failed tasks", "job", js.id, "root", info.TID, "failed", failedList(failed))
		}
		return
	}
}

// awaitJobTasks waits until every task of job js but its root has ended,
// killing each first when kill is set, and returns those that failed and
// those it killed, in TID order. A task killed before (by a task of the
// job, as PVM's timing kills its slave, or by an operator) is no failure.
// It looks for the job's tasks on every host, and among those the master
// placed or a checkpoint round found, again until a look finds none it
// has not waited for (tasks spawned meanwhile).
func (d *Daemon) awaitJobTasks(ctx context.Context, js *jobState, kill bool) []TaskInfo {
	if kill {
		// No move of the job's tasks starts meanwhile: a task caught in
		// one is on no host's task list.
		defer d.mv.holdMoves(js.id)()
	}
	waited := map[task.TID]bool{js.root: true}
	var failed []TaskInfo
	for ctx.Err() == nil {
		var todo []task.TID
		add := func(t task.TID) { // each task once, in this look or an earlier one
			if !waited[t] {
				waited[t] = true
				todo = append(todo, t)
			}
		}
		ts, err := d.AllTasks(ctx, true)
		if err != nil {
			d.log.Debug("job end: task lists", "job", js.id, "error", err)
		}
		for _, t := range ts {
			if t.Job == js.id {
				add(t.TID)
			}
		}
		js.mu.Lock()
		for _, tids := range js.seen {
			for _, t := range tids {
				add(t)
			}
		}
		js.mu.Unlock()
		if len(todo) == 0 {
			break
		}
		slices.Sort(todo)
		for _, t := range todo {
			killed := false
			if kill {
				err := d.KillTask(ctx, t)
				killed = err == nil
				if err != nil && !errors.Is(err, task.ErrNoSuchTask) {
					d.log.Warn("job end: kill", "job", js.id, "task", t, "error", err)
				}
			}
			info, err := d.Wait(ctx, t)
			switch {
			case errors.Is(err, task.ErrNoSuchTask):
				// Ended long ago and forgotten, or never started.
			case err != nil:
				if ctx.Err() != nil {
					return failed
				}
				failed = append(failed, TaskInfo{TID: t, Job: js.id, State: Failed, Status: -1, Err: "not followed to its end: " + err.Error()})
			case info.State == Killed && !killed:
				// Killed before the job's end, on purpose.
			case info.State != Exited || info.Status != 0:
				failed = append(failed, info)
			}
		}
	}
	slices.SortFunc(failed, func(a, b TaskInfo) int { return cmp.Compare(a.TID, b.TID) })
	return failed
}

// waitJobEnd waits until job js is over (settleJob) and returns its
// root's final state with the job's failed tasks; an error when the
// root could not be followed (the job lost, ctx done).
func (d *Daemon) waitJobEnd(ctx context.Context, js *jobState) (TaskInfo, error) {
	info, err := d.waitJob(ctx, js)
	if err != nil {
		return info, err
	}
	select {
	case <-js.settled:
		return js.final, nil
	case <-ctx.Done():
		return info, fmt.Errorf("wait for job %d's other tasks: %w", js.id, ctx.Err())
	}
}

// failedList names a job's failed tasks and how each ended.
func failedList(ts []TaskInfo) string {
	var b strings.Builder
	for i, t := range ts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%v", t.TID)
		if t.Type != "" {
			fmt.Fprintf(&b, " (%s)", t.Type)
		}
		switch {
		case t.State == Killed:
			b.WriteString(" killed with its job")
		case t.State == Exited:
			fmt.Fprintf(&b, " exited with status %d", t.Status)
		default:
			fmt.Fprintf(&b, " %s", t.State)
		}
		if t.Err != "" && t.Err != "killed" {
			fmt.Fprintf(&b, ": %s", t.Err)
		}
	}
	return b.String()
}

// WaitJob waits until job has ended (master): its root task and its other
// tasks, as a run of it ends. It returns the root's final state with the
// job's failed tasks and those killed at its end (TaskInfo.JobFailures);
// ExitError turns it into the run's result. A job that has already ended
// and been forgotten is ErrNoJob.
func (d *Daemon) WaitJob(ctx context.Context, job uint64) (TaskInfo, error) {
	js, err := d.job(job)
	if err != nil {
		return TaskInfo{}, err
	}
	return d.waitJobEnd(ctx, js)
}
