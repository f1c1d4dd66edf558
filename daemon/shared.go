package daemon

import (
	"context"
	"fmt"
	"sync"

	"github.com/dpvm/dpvm/task"
)

// hosted implements task.HostSharer: the tasks of a job on this daemon,
// goroutines of one process, share the values they ask for by key.
var _ task.HostSharer = (*hosted)(nil)

// HostShare returns the value h's job holds here under key, building it
// with build when there is none (see task.Shared for the rules).
func (h *hosted) HostShare(key string, build func() (any, error)) (any, error) {
	return h.d.shared.get(h, key, build)
}

// sharedValues holds the values tasks share on this daemon (task.Shared), by job
// and key. A value stays while a task that asked for it runs here: each
// such task is a user until its context ends (it exited, was killed, or
// was suspended to move away), and the entry goes with its last user. The
// zero value is ready to use.
type sharedValues struct {
	mu sync.Mutex
	m  map[shareKey]*sharedValue
}

type shareKey struct {
	job uint64
	key string
}

// sharedValue is one shared value: ready is closed once build has returned val
// or err; users are the tasks holding it, under sharedValues.mu.
type sharedValue struct {
	ready chan struct{}
	val   any
	err   error
	users map[*hosted]struct{}
}

// get returns k's value for h, building it on h's goroutine when no entry
// exists, or waiting for the build under way.
func (s *sharedValues) get(h *hosted, key string, build func() (any, error)) (any, error) {
	if err := h.alive(); err != nil {
		return nil, err
	}
	k := shareKey{h.job, key}
	s.mu.Lock()
	if s.m == nil {
		s.m = map[shareKey]*sharedValue{}
	}
	e := s.m[k]
	if e == nil {
		e = &sharedValue{ready: make(chan struct{}), users: map[*hosted]struct{}{}}
		s.m[k] = e
		s.mu.Unlock()
		return s.build(h, k, e, build)
	}
	s.mu.Unlock()
	select {
	case <-e.ready:
	case <-h.dead():
		return nil, task.ErrKilled
	}
	if e.err != nil {
		return nil, e.err
	}
	s.mu.Lock()
	if s.m[k] == nil {
		// Its last user left while this one waited: the value is
		// whole, and this task holds it now.
		s.m[k] = e
	}
	s.useLocked(h, k, e)
	s.mu.Unlock()
	return e.val, nil
}

// build runs build for entry e, which it publishes to the tasks waiting
// for it; a failed build (or a panic, which goes on up h's goroutine)
// removes the entry, so that the next call builds again.
func (s *sharedValues) build(h *hosted, k shareKey, e *sharedValue, build func() (any, error)) (v any, err error) {
	done := false
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !done {
			err = fmt.Errorf("building the shared value panicked")
		}
		e.val, e.err = v, err
		close(e.ready)
		if err != nil {
			if s.m[k] == e {
				delete(s.m, k)
			}
			return
		}
		s.useLocked(h, k, e)
	}()
	v, err = build()
	done = true
	return v, err
}

// useLocked makes h a user of e until h's context ends.
func (s *sharedValues) useLocked(h *hosted, k shareKey, e *sharedValue) {
	if _, ok := e.users[h]; ok {
		return
	}
	e.users[h] = struct{}{}
	context.AfterFunc(h.ctx, func() { s.release(h, k, e) })
}

// release drops h from e's users, and e with its last user.
func (s *sharedValues) release(h *hosted, k shareKey, e *sharedValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(e.users, h)
	if len(e.users) == 0 && s.m[k] == e {
		delete(s.m, k)
	}
}

// held is the number of values shared here and their users, for tests and
// status.
func (s *sharedValues) held() (values, users int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.m {
		values++
		users += len(e.users)
	}
	return values, users
}
