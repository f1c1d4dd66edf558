package npb

import (
	"sync"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// localNet connects np ranks inside one process through the task API's
// payload codec, so a kernel's decomposition can be tested without a
// runtime.
type localNet struct {
	mu    sync.Mutex
	cond  *sync.Cond
	boxes [][]localMsg // per receiver
}

type localMsg struct {
	from, tag int
	p         task.Payload
}

type localComm struct {
	net *localNet
	me  int
}

func newLocalNet(np int) *localNet {
	n := &localNet{boxes: make([][]localMsg, np)}
	n.cond = sync.NewCond(&n.mu)
	return n
}

func (c *localComm) rank() int { return c.me }
func (c *localComm) size() int { return len(c.net.boxes) }
func (c *localComm) send(to, tag int, v any) error {
	p, err := task.Encode(v)
	if err != nil {
		return err
	}
	c.net.mu.Lock()
	c.net.boxes[to] = append(c.net.boxes[to], localMsg{c.me, tag, p})
	c.net.mu.Unlock()
	c.net.cond.Broadcast()
	return nil
}
func (c *localComm) recv(from, tag int, v any) error {
	n := c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	for {
		box := n.boxes[c.me]
		for i, m := range box {
			if m.from == from && m.tag == tag {
				n.boxes[c.me] = append(box[:i:i], box[i+1:]...)
				return m.p.Decode(v)
			}
		}
		n.cond.Wait()
	}
}

// runLocal runs kernel on np ranks connected by a localNet and returns rank
// 0's report.
func runLocal(t testing.TB, kernel, class string, np int) *Report {
	t.Helper()
	rep := runRanks(t, kernel, class, np, func(w worker, cm comm) (*Report, error) {
		return w.run(cm, &hooks{now: time.Now})
	})
	if rep == nil {
		t.Fatalf("%s class %s np %d: rank 0 returned no report", kernel, class, np)
	}
	return rep
}

// runRanks runs np workers of kernel, each with body on its own rank of a
// localNet, and returns rank 0's report.
func runRanks(t testing.TB, kernel, class string, np int, body func(w worker, cm comm) (*Report, error)) *Report {
	t.Helper()
	net := newLocalNet(np)
	reps := make([]*Report, np)
	errs := make([]error, np)
	var wg sync.WaitGroup
	for r := range np {
		w, err := newWorker(kernel, class, np)
		if err != nil {
			t.Fatal(err)
		}
		w.place().C.Rank = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[r], errs[r] = body(w, &localComm{net, r})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%s class %s np %d rank %d: %v", kernel, class, np, r, err)
		}
	}
	return reps[0]
}
