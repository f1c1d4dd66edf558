package daemon

import (
	"slices"
	"sync"

	"github.com/dpvm/dpvm/task"
)

// arrival is a task of this host arriving at a barrier of the master.
type arrival struct {
	group string
	count int
	tid   task.TID
}

// arrivals is a host's side of the master's barriers: its tasks waiting
// in one, and their arrivals on their way to the master. It owns that
// state under its own lock, taken with no other lock held and held across
// nothing that locks or calls another daemon; the daemon drives it
// (remoteBarrier, arrive, unarrive, barrierReleased) and does the
// sending.
//
// Arrivals are sent in batches: the first task to arrive becomes the
// sender and sends, one event per barrier, what has queued meanwhile,
// until nothing is left; the tasks that arrive while it sends only queue.
type arrivals struct {
	mu      sync.Mutex
	wait    map[task.TID]chan error // tasks waiting in a barrier, released through their channel
	pending map[task.TID]arrival    // the barrier each waiting task is in, reported to a recovered master
	queue   []arrival               // arrivals not yet sent to the master
	sending bool                    // a task is sending the queue
	flight  chan struct{}           // closed once the batch taken from queue has been sent
}

func newArrivals() *arrivals {
	return &arrivals{wait: map[task.TID]chan error{}, pending: map[task.TID]arrival{}}
}

// waitIn registers a task waiting in a barrier and returns the channel its
// release comes on (buffered: a release never blocks).
func (a *arrivals) waitIn(x arrival) chan error {
	ch := make(chan error, 1)
	a.mu.Lock()
	a.wait[x.tid] = ch
	a.pending[x.tid] = x
	a.mu.Unlock()
	return ch
}

// forget drops the tasks' waits, released or not.
func (a *arrivals) forget(tids ...task.TID) {
	a.mu.Lock()
	for _, t := range tids {
		delete(a.wait, t)
		delete(a.pending, t)
	}
	a.mu.Unlock()
}

// enqueue queues x for the master and reports whether the caller is to
// send the queue (nobody else is sending it).
func (a *arrivals) enqueue(x arrival) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.queue = append(a.queue, x)
	if a.sending {
		return false
	}
	a.sending = true
	return true
}

// nextBatch takes the queue for the sender, with the channel to close
// once the batch has been sent (batchSent); an empty batch ends the
// sender's turn.
func (a *arrivals) nextBatch() ([]arrival, chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	batch := a.queue
	a.queue = nil
	if len(batch) == 0 {
		a.sending = false
		a.flight = nil
		return nil, nil
	}
	a.flight = make(chan struct{})
	return batch, a.flight
}

// unqueue takes back tid's arrival if it has not been taken for sending,
// and reports whether it did. Otherwise it returns the channel closed once
// the batch being sent is out (nil: none is being sent).
func (a *arrivals) unqueue(tid task.TID) (bool, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, x := range a.queue {
		if x.tid == tid {
			a.queue = slices.Delete(a.queue, i, i+1)
			return true, nil
		}
	}
	return false, a.flight
}

// release lets the waiting tasks among tids go, with err.
func (a *arrivals) release(tids []task.TID, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range tids {
		if ch := a.wait[t]; ch != nil {
			delete(a.wait, t)
			delete(a.pending, t)
			ch <- err
		}
	}
}

// waiting lists the barriers the host's tasks wait in, for a recovered
// master.
func (a *arrivals) waiting() []arrivalMsg {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]arrivalMsg, 0, len(a.pending))
	for tid, x := range a.pending {
		out = append(out, arrivalMsg{Group: x.group, Count: x.count, TID: tid})
	}
	return out
}
