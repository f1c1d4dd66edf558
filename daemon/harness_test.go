package daemon

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// fnTask runs a test function registered under its Fn key, with Arg as an
// argument, so tests can spawn tasks with behaviour of their own.
type fnTask struct {
	Fn  string
	Arg int
}

var (
	fnMu   sync.Mutex
	fns    = map[string]func(c *task.Ctx, arg int) error{}
	fnNext atomic.Int64
)

func init() { task.Register("daemon.test.fn", &fnTask{}) }

func (f *fnTask) Run(c *task.Ctx) error {
	fnMu.Lock()
	fn := fns[f.Fn]
	fnMu.Unlock()
	return fn(c, f.Arg)
}

// fn registers body and returns a task prototype running it.
func fn(t testing.TB, body func(c *task.Ctx, arg int) error) *fnTask {
	key := strconv.FormatInt(fnNext.Add(1), 10)
	fnMu.Lock()
	fns[key] = body
	fnMu.Unlock()
	t.Cleanup(func() {
		fnMu.Lock()
		delete(fns, key)
		fnMu.Unlock()
	})
	return &fnTask{Fn: key}
}

// newTestDaemon returns a daemon halted when the test ends, with its output
// captured in the returned buffer.
func newTestDaemon(t testing.TB) (*Daemon, *syncBuffer) {
	out := &syncBuffer{}
	d := New(Config{Output: out})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Halt(ctx); err != nil {
			t.Errorf("halt: %v", err)
		}
	})
	return d, out
}

// runRoot runs body as a root task and waits for it, failing the test if it
// does not exit with status 0.
func runRoot(t testing.TB, d *Daemon, body func(c *task.Ctx, arg int) error) TaskInfo {
	t.Helper()
	tid, err := d.SpawnTask(fn(t, body))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	info, err := d.Wait(ctx, tid)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != Exited || info.Status != 0 {
		t.Fatalf("root task %v ended %v status %d: %s", tid, info.State, info.Status, info.Err)
	}
	return info
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
