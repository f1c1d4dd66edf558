package npb

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

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

// sendInPlace passes a []int32, []float64 or []complex128 as the task
// runtime does to a receiver on its host: the payload's bytes are the
// slice's memory, so the race detector sees a sender that writes to a
// slice its receiver still reads.
func (c *localComm) sendInPlace(to, tag int, v any) error {
	var p task.Payload
	switch s := v.(type) {
	case []int32:
		p = rawView(task.EncInt32s, s)
	case []float64:
		p = rawView(task.EncFloat64s, s)
	case []complex128:
		p = rawView(task.EncComplex128s, s)
	}
	if p.Data == nil {
		return c.send(to, tag, v)
	}
	c.net.mu.Lock()
	c.net.boxes[to] = append(c.net.boxes[to], localMsg{c.me, tag, p})
	c.net.mu.Unlock()
	c.net.cond.Broadcast()
	return nil
}

// rawView is a payload whose bytes are s's memory (nil Data for an empty
// s, which sendInPlace then sends as a copy).
func rawView[T int32 | float64 | complex128](enc task.Encoding, s []T) task.Payload {
	if len(s) == 0 {
		return task.Payload{}
	}
	var zero T
	return task.Payload{Enc: enc, Data: unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(zero)))}
}

func (c *localComm) recv(from, tag int, v any) error {
	p, err := c.recvPayload(from, tag)
	if err != nil {
		return err
	}
	return p.Decode(v)
}
func (c *localComm) recvPayload(from, tag int) (task.Payload, error) {
	n := c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	for {
		box := n.boxes[c.me]
		for i, m := range box {
			if m.from == from && m.tag == tag {
				n.boxes[c.me] = append(box[:i:i], box[i+1:]...)
				return m.p, nil
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

// TestFTChunkedTranspose runs FT with transposes cut into chunks of a few
// lines, the last one short (the default chunk holds a whole class S
// block), and checks the checksums are bit-identical to one chunk a block.
func TestFTChunkedTranspose(t *testing.T) {
	for _, np := range []int{2, 4} {
		want := runLocal(t, "ft", "S", np)
		got := runRanks(t, "ft", "S", np, func(w worker, cm comm) (*Report, error) {
			w.(*FTWorker).chunk = 3*64 + 5 // 3 lines of 64
			return w.run(cm, &hooks{now: time.Now})
		})
		if got == nil || got.Verified != Successful || !sameValues(want.Values, got.Values) {
			t.Fatalf("np %d: chunked %+v, whole blocks %+v", np, got, want.Values)
		}
	}
}

// TestISExchangeChunks exchanges blocks of keys between two ranks in chunks
// of 4: blocks shorter than a chunk, of exactly one and two chunks (which
// end with an empty chunk), and longer, appended after segments already
// held; the chunks received, in order, are the block sent.
func TestISExchangeChunks(t *testing.T) {
	block := func(n, base int) []int32 {
		b := make([]int32, n)
		for i := range b {
			b[i] = int32(base + i)
		}
		return b
	}
	for _, c := range []struct{ n0, n1, held int }{{0, 0, 0}, {3, 4, 1}, {8, 3, 0}, {9, 8, 2}, {4, 13, 1}} {
		net := newLocalNet(2)
		outs := [][]int32{block(c.n0, 0), block(c.n1, 1000)}
		got := make([][][]int32, 2)
		ns := make([]int, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := &ISWorker{chunk: 4}
				held := make([][]int32, c.held)
				got[r], ns[r], errs[r] = w.exchange(&localComm{net, r}, 1-r, 1-r, outs[r], held)
			}()
		}
		wg.Wait()
		for r := range 2 {
			if errs[r] != nil {
				t.Fatalf("%+v rank %d: %v", c, r, errs[r])
			}
			if len(got[r]) < c.held {
				t.Fatalf("%+v rank %d: %d segments, fewer than the %d held", c, r, len(got[r]), c.held)
			}
			var all []int32
			for _, seg := range got[r][c.held:] {
				if len(seg) == 0 || len(seg) > 4 {
					t.Errorf("%+v rank %d: a segment of %d keys", c, r, len(seg))
				}
				all = append(all, seg...)
			}
			if want := outs[1-r]; !slices.Equal(all, want) || ns[r] != len(want) {
				t.Errorf("%+v rank %d: got %v (%d keys), want %v", c, r, all, ns[r], want)
			}
		}
	}
}

// TestISChunkedExchange runs IS with 1000-key chunks (the default chunk
// holds a whole class S exchange) and checks it still verifies, with the
// same values.
func TestISChunkedExchange(t *testing.T) {
	for _, np := range []int{2, 4} {
		want := runLocal(t, "is", "S", np)
		got := runRanks(t, "is", "S", np, func(w worker, cm comm) (*Report, error) {
			w.(*ISWorker).chunk = 1000
			return w.run(cm, &hooks{now: time.Now})
		})
		if got == nil || got.Verified != Successful || !sameValues(want.Values, got.Values) {
			t.Fatalf("np %d: chunked %+v, whole blocks %+v", np, got, want.Values)
		}
	}
}

// TestSpinPolicy checks the poll budget: full while polls receive, then
// after each failed poll a run of receives that block at once, doubling
// up to maxSkip, and full again after a poll that received.
func TestSpinPolicy(t *testing.T) {
	var s spinPolicy
	polls := func(n int) (spun int) {
		for range n {
			if s.budget() > 0 {
				spun++
			}
		}
		return spun
	}
	if s.budget() != spinMax {
		t.Fatal("a new policy does not poll")
	}
	s.record(true)
	for _, skip := range []int{1, 2, 4, 8, 16, 32, 64, 64} {
		s.record(false)
		if got := polls(skip); got != 0 {
			t.Fatalf("after a failure with run %d: %d of %d receives polled", skip, got, skip)
		}
		if s.budget() != spinMax {
			t.Fatalf("after a run of %d: the next receive does not poll", skip)
		}
	}
	s.record(true)
	if got := polls(10); got != 10 {
		t.Fatalf("after a success: %d of 10 receives polled", got)
	}
}

// TestRecvSlice receives slices sent as they are and in place, and
// refuses one of the wrong type or length, the message consumed.
func TestRecvSlice(t *testing.T) {
	net := newLocalNet(2)
	a, b := &localComm{net, 0}, &localComm{net, 1}
	want := []float64{1, 2, 3}
	if err := a.send(1, 7, want); err != nil {
		t.Fatal(err)
	}
	if err := a.sendInPlace(1, 7, []complex128{4i}); err != nil {
		t.Fatal(err)
	}
	if err := a.send(1, 7, want); err != nil {
		t.Fatal(err)
	}
	if err := a.send(1, 7, []int32{5}); err != nil {
		t.Fatal(err)
	}
	if got, err := recvSlice(b, 0, 7, 3, task.Payload.Float64s); err != nil || !slices.Equal(got, want) {
		t.Fatalf("3 float64s: %v %v", got, err)
	}
	if got, err := recvSlice(b, 0, 7, -1, task.Payload.Complex128s); err != nil || len(got) != 1 || got[0] != 4i {
		t.Fatalf("a complex128 in place, any length: %v %v", got, err)
	}
	if got, err := recvSlice(b, 0, 7, 2, task.Payload.Float64s); err == nil {
		t.Fatalf("3 float64s where 2 are wanted: %v, no error", got)
	}
	if got, err := recvSlice(b, 0, 7, 1, task.Payload.Float64s); !errors.Is(err, task.ErrDecode) {
		t.Fatalf("int32s as float64s: %v %v, want ErrDecode", got, err)
	}
}
