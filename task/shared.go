package task

import "fmt"

// HostSharer is implemented by endpoints whose tasks share memory with the
// other tasks of their job on the same host (the daemon's does: all its
// tasks are goroutines of one process). HostShare returns the value the
// task's job holds under key on the endpoint's host, calling build to make
// it when there is none; see Shared for the rules.
type HostSharer interface {
	HostShare(key string, build func() (any, error)) (any, error)
}

// Shared returns a read-only value that the tasks of the caller's job on
// the caller's host hold once between them (the matrix of a sparse solver,
// a table of coefficients): the first call for key on a host calls build,
// on the caller's goroutine, and every task of the job there that asks for
// key afterwards gets the same value without building it. Calls that come
// while it is being built wait for it. The rules:
//
//   - The value is read-only: neither build's caller nor any other task
//     writes to it once build has returned. Build it whole before
//     returning it.
//   - It is derived data, never state: what build makes must depend only
//     on key (and on what every task of the job that uses key agrees on).
//     A checkpoint does not contain it, so keep it out of the task's
//     exported fields (an unexported field or a local variable).
//   - A task that moves, or is restored from a checkpoint after its job
//     rolls back, calls Shared again from Run and gets the value of its
//     new host: that host's copy when a task of its job there holds one,
//     else one it builds, its private copy until others ask for it. Its
//     old host's copy is dropped when the last task of the job that asked
//     for it there has ended or left.
//   - A failed build's error goes to its caller and to the calls that
//     waited for it; the next call builds again. A task killed while it
//     waits gets ErrKilled.
//   - Waiting is not a safe point: the task is not moved or checkpointed
//     while it builds or waits.
//
// Where the endpoint cannot share (a task run without the runtime, a test
// endpoint), every call builds a private value. Two jobs never share a
// value, even under the same key.
func Shared[T any](c *Ctx, key string, build func() (T, error)) (T, error) {
	var zero T
	hs, ok := c.ep.(HostSharer)
	if !ok {
		return build()
	}
	c.enter()
	v, err := hs.HostShare(key, func() (any, error) { return build() })
	c.leave()
	if err != nil {
		return zero, fmt.Errorf("shared %q: %w", key, err)
	}
	t, ok := v.(T)
	if !ok {
		return zero, fmt.Errorf("shared %q: the host holds a %T, want %T: %w", key, v, zero, ErrDecode)
	}
	return t, nil
}
