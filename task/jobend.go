package task

import "errors"

// ErrJobTasks marks the result of a run whose job had other tasks that
// failed or were killed at its end (see JobEnder); the error names them.
var ErrJobTasks = errors.New("tasks of the job failed or were killed")

// JobEnd says what becomes of a job's other tasks when its root task
// returns.
type JobEnd int

const (
	// WaitForTasks (the default) keeps the job going until its other
	// tasks have ended too, as PVM's tasks outlive their parent; the job's
	// result is still the root's, and a task of it that failed fails the
	// run.
	WaitForTasks JobEnd = iota
	// KillTasks kills the tasks still running when the root returns; the
	// run reports them (each a task killed with its job) and fails.
	KillTasks
)

// JobEnder is implemented by a root task that chooses how its job ends
// when it returns (without it: WaitForTasks). The runtime asks the root's
// state as the job starts, so a program's flag may decide:
//
//	func (r *Root) JobEnd() task.JobEnd {
//		if r.KillOnReturn {
//			return task.KillTasks
//		}
//		return task.WaitForTasks
//	}
type JobEnder interface {
	JobEnd() JobEnd
}
