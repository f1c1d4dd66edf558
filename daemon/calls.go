package daemon

import (
	"context"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// pendingCalls matches control replies to the requests waiting for them,
// for a daemon's connections and a client's alike.
type pendingCalls struct {
	mu   sync.Mutex
	next uint64
	m    map[uint64]chan *reply
}

// start registers a new request and encodes it as a call frame body.
func (pc *pendingCalls) start(method string, args any) (id uint64, ch chan *reply, frame []byte, err error) {
	body, err := encodeMsg(args)
	if err != nil {
		return 0, nil, nil, err
	}
	ch = make(chan *reply, 1)
	pc.mu.Lock()
	if pc.m == nil {
		pc.m = map[uint64]chan *reply{}
	}
	pc.next++
	id = pc.next
	pc.m[id] = ch
	pc.mu.Unlock()
	frame, err = encodeMsg(&call{ID: id, Method: method, Body: msgpack.RawMessage(body)})
	if err != nil {
		pc.forget(id)
		return 0, nil, nil, err
	}
	return id, ch, frame, nil
}

// deliver hands a reply to the request waiting for it, if any still is.
func (pc *pendingCalls) deliver(r *reply) {
	pc.mu.Lock()
	ch := pc.m[r.ID]
	delete(pc.m, r.ID)
	pc.mu.Unlock()
	if ch != nil {
		ch <- r
	}
}

func (pc *pendingCalls) forget(id uint64) {
	pc.mu.Lock()
	delete(pc.m, id)
	pc.mu.Unlock()
}

// await waits for request id's reply and decodes its body into out (if not
// nil). gone is closed when the connection ends; lost then says why.
func (pc *pendingCalls) await(ctx context.Context, id uint64, ch chan *reply, gone <-chan struct{}, lost func() error, out any) error {
	select {
	case r := <-ch:
		if err := replyError(r); err != nil {
			return err
		}
		if out != nil && len(r.Body) > 0 {
			return decodeMsg(r.Body, out)
		}
		return nil
	case <-gone:
		pc.forget(id)
		return fmt.Errorf("%w: %v", ErrNotConnected, lost())
	case <-ctx.Done():
		pc.forget(id)
		return ctx.Err()
	}
}
