package task

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by the API wrap these with context; test
// them with errors.Is.
var (
	// ErrNoSuchTask: the addressed task does not exist or has exited
	// (Kill, Migrate, a communicator rank that holds no
	// task), or, for Send and Mcast, the TID is one no task can have.
	ErrNoSuchTask = errors.New("no such task")
	// ErrNoSuchHost: the named host is not part of the virtual machine.
	ErrNoSuchHost = errors.New("no such host")
	// ErrNoSuchGroup: the group has no members.
	ErrNoSuchGroup = errors.New("no such group")
	// ErrNotInGroup: the task is not a member of the group.
	ErrNotInGroup = errors.New("not a member of the group")
	// ErrUnknownType: the task type is not registered in this binary.
	ErrUnknownType = errors.New("unknown task type")
	// ErrBadTID: a TID could not be parsed, or names no single task
	// where one is needed (the zero TID or AnyTask as a group member).
	ErrBadTID = errors.New("malformed TID")
	// ErrBadTag: a message tag is negative (only Recv may use AnyTag) or
	// larger than MaxTag.
	ErrBadTag = errors.New("bad message tag")
	// ErrTimeout: a receive with a timeout found no matching message.
	ErrTimeout = errors.New("timed out")
	// ErrKilled: the task has been killed; Run should return.
	ErrKilled = errors.New("task killed")
	// ErrDecode: a message could not be decoded into the given value.
	ErrDecode = errors.New("cannot decode message")
	// ErrEncode: a value could not be encoded.
	ErrEncode = errors.New("cannot encode value")
	// ErrSuspended is returned by SafePoint when the runtime has
	// checkpointed the task to move or save it. Run must return it
	// unchanged; the runtime calls Run again on the restored state.
	ErrSuspended = errors.New("task suspended at a safe point")
	// ErrNoComm: a collective was called on a communicator that is not
	// set up (no Spawn, JoinComm or GroupComm filled it).
	ErrNoComm = errors.New("communicator not set up")
	// ErrHalted: the virtual machine is shutting down.
	ErrHalted = errors.New("virtual machine halted")
)

// ExitError carries a task's exit status. Run returns it (or calls Ctx.Exit)
// to end with a status other than 0 or 1.
type ExitError struct {
	Status int
}

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Status) }

// Exit returns an error that ends a task with the given status when Run
// returns it. Exit(0) returns nil.
func Exit(status int) error {
	if status == 0 {
		return nil
	}
	return &ExitError{Status: status}
}

// ExitStatus maps the error a task's Run returned to its exit status: 0 for
// nil, the status of an ExitError, 1 for any other error.
func ExitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Status
	}
	return 1
}
