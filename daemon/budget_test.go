package daemon

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// acquire takes n bytes for a frame of a daemon's connection of cert,
// waiting for room until conn or stop is closed (connBudget.Acquire's
// take, without a connection).
func (b *frameBudget) acquire(cert string, n int, conn, stop <-chan struct{}) error {
	return b.take(cert, false, n, conn, stop)
}

// release gives back n bytes of a daemon connection of cert's.
func (b *frameBudget) release(cert string, n int) { b.give(cert, false, n) }

// TestFrameBudget: bytes are taken within the total and each
// certificate's share, a taker waits for room and gets it when another
// gives back, a wait ends with its connection, and a frame that could
// never fit is refused.
func TestFrameBudget(t *testing.T) {
	synctest.Test(t, testFrameBudget)
}

func testFrameBudget(t *testing.T) {
	b := newFrameBudget(10, 6, 10)
	never := make(chan struct{})
	if err := b.acquire("alice", 6, never, never); err != nil {
		t.Fatal(err)
	}
	if err := b.acquire("bob", 4, never, never); err != nil {
		t.Fatal(err)
	}
	if err := b.acquire("bob", 7, never, never); !errors.Is(err, ErrLimit) {
		t.Fatalf("more than a certificate's share: %v", err)
	}
	// alice's share is spent: her next frame waits until she gives back.
	got := make(chan error, 1)
	go func() { got <- b.acquire("alice", 1, never, never) }()
	synctest.Wait() // it waits, durably
	select {
	case err := <-got:
		t.Fatalf("took past alice's share: %v", err)
	default:
	}
	b.release("alice", 6)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// The total is spent (1 + 4 + 5): carol waits, until her connection
	// ends.
	if err := b.acquire("carol", 5, never, never); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { got <- b.acquire("carol", 1, closed, never) }()
	close(closed)
	if err := <-got; !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("a wait on a closed connection: %v", err)
	}
	b.release("alice", 1)
	b.release("bob", 4)
	b.release("carol", 5)
	if now, peak := b.held(); now != 0 || peak != 10 || len(b.byCert) != 0 {
		t.Fatalf("held %d, peak %d, by certificate %v", now, peak, b.byCert)
	}
}

// TestFrameBudgetOfConnections: eight connections of one certificate send
// large calls at once; each frame waits for the certificate's budget
// instead of being held with all the others, every call is answered, and
// the daemon never holds more than the budget of them.
func TestFrameBudgetOfConnections(t *testing.T) {
	const frame = 3 << 20
	vm := startVM(t, 1, Config{MaxFrame: 4 << 20, FrameBudgetPerCert: 4 << 20, FrameBudget: 8 << 20})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A msgpack bin of frame bytes: a well-formed body the ping ignores.
	body := make([]byte, 5+frame)
	body[0] = 0xc6
	binary.BigEndian.PutUint32(body[1:], frame)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		cl := adminClient(t, ctx, vm)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cl.CallRaw(ctx, mSendCheck, body)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	_, peak := m.frames.held()
	if peak > 4<<20 || peak < frame {
		t.Fatalf("the readers held at most %d bytes of large frames, want one frame (%d) and no more than the budget", peak, frame)
	}
	// Each reader gives its frame back as it goes for the next, which may
	// be just after the answer went out.
	for {
		now, _ := m.frames.held()
		if now == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d bytes still held after every call was answered", now)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestClientCallHoldsBudgetUntilAnswered: a client's calls hold their
// bytes of the frame budget while they are served, not only while their
// frames are read: a wait for a running task with 2 MiB of padding (a
// field the method does not know) and a small wait hold the padded
// frame's bytes and the small call's size plus callOverhead until the task
// ends and both are answered; then nothing is held.
func TestClientCallHoldsBudgetUntilAnswered(t *testing.T) {
	const pad = 2 << 20
	vm := startVM(t, 1, Config{MaxFrame: 4 << 20, FrameBudgetPerCert: 4 << 20, FrameBudget: 8 << 20})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	release := make(chan struct{})
	tid, err := m.SpawnTask(fn(t, func(*task.Ctx, int) error { <-release; return nil }))
	if err != nil {
		t.Fatal(err)
	}
	type padded struct { // tidArgs and a field it does not know
		TID task.TID `msgpack:"t"`
		Pad []byte   `msgpack:"zz,omitempty"`
	}
	large, err := msgpack.Marshal(&padded{TID: tid, Pad: make([]byte, pad)})
	if err != nil {
		t.Fatal(err)
	}
	small, err := msgpack.Marshal(&padded{TID: tid})
	if err != nil {
		t.Fatal(err)
	}
	cl := adminClient(t, ctx, vm)
	errs := make(chan error, 2)
	for _, body := range [][]byte{large, small} {
		go func() {
			_, err := cl.CallRaw(ctx, mWait, body)
			errs <- err
		}()
	}
	want := len(large) + len(small) + callOverhead // and the calls' headers
	waitFor(t, ctx, "both waits holding their bytes", func() bool {
		now, _ := m.frames.held()
		select {
		case err := <-errs:
			t.Fatalf("a wait for a running task answered: %v (%d bytes held)", err, now)
		default:
		}
		return now >= want
	})
	select {
	case err := <-errs:
		t.Fatalf("a wait for a running task answered: %v", err)
	default:
	}
	// Each call frame is its arguments, its ID and its method's name.
	if now, _ := m.frames.held(); now > want+128 {
		t.Fatalf("the calls hold %d bytes, want %d and their headers", now, want)
	}
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "the budget given back", func() bool { now, _ := m.frames.held(); return now == 0 })
}

// TestClientCallsLeaveRoomForDaemons: clients' calls take at most their
// cap of the frame budget, waiting beyond it, while a daemon's frame
// still finds room; a call keeps its frame's bytes when the reader reads
// on, and gives them back when answered.
func TestClientCallsLeaveRoomForDaemons(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newFrameBudget(10, 6, 6)
		never := make(chan struct{})
		alice := &connBudget{b: b, cert: "alice", client: true, conn: never, stop: never}
		bob := &connBudget{b: b, cert: "bob", client: true, conn: never, stop: never}
		if err := alice.Acquire(4); err != nil {
			t.Fatal(err)
		}
		hold, body, err := alice.holdCall(make([]byte, 4))
		if err != nil || hold.n != 4 || len(body) != 4 {
			t.Fatalf("a large call's hold: %v, %d bytes, body of %d", err, hold.n, len(body))
		}
		alice.Release(4) // the reader reads on: the call keeps its bytes
		if now, _ := b.held(); now != 4 {
			t.Fatalf("held %d after the reader read on, want the call's 4", now)
		}
		got := make(chan error, 1)
		go func() { got <- bob.Acquire(3) }() // clients' cap: 4 + 3 > 6
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("a client's frame past the clients' cap: %v", err)
		default:
		}
		// A host's frame fits beside them.
		if err := b.acquire("h2", 6, never, never); err != nil {
			t.Fatal(err)
		}
		b.release("h2", 6)
		if err := bob.Acquire(7); !errors.Is(err, ErrLimit) {
			t.Fatalf("a client's frame over the clients' cap: %v", err)
		}
		hold.give() // answered
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		bob.Release(3)
		if now, _ := b.held(); now != 0 || b.clients != 0 || len(b.byCert) != 0 {
			t.Fatalf("held %d, clients %d, by certificate %v", now, b.clients, b.byCert)
		}
	})
}

// TestTrafficBudgetParts: the parts of TrafficBudget add up to it, by
// default and for a smaller budget (fewer connections then, each with the
// least window); a part set larger raises it to their sum.
func TestTrafficBudgetParts(t *testing.T) {
	sum := func(c Config) int64 {
		return int64(c.FrameBudget) + c.MailboxBudget + int64(c.MaxConns)*int64(c.Transport.ConnWindow)
	}
	for _, tc := range []struct {
		budget          int64
		conns           int
		window, frames  uint64
		mailboxes, want int64
	}{
		{0, DefaultMaxConns, MinConnWindow, DefaultFrameBudget, 1 << 30, DefaultTrafficBudget},
		{512 << 20, 1024, MinConnWindow, 128 << 20, 256 << 20, 512 << 20},
		{8 << 30, DefaultMaxConns, 512 << 10, 2 << 30, 4 << 30, 8 << 30},
	} {
		c := Config{TrafficBudget: tc.budget}
		c.setDefaults()
		if c.MaxConns != tc.conns || c.Transport.ConnWindow != tc.window || c.Transport.StreamWindow != tc.window ||
			uint64(c.FrameBudget) != tc.frames || c.MailboxBudget != tc.mailboxes || c.TrafficBudget != tc.want || sum(c) != tc.want {
			t.Errorf("TrafficBudget %d: %d connections of %d bytes, frames %d, mailboxes %d, total %d (parts %d); want %d of %d, %d, %d, %d",
				tc.budget, c.MaxConns, c.Transport.ConnWindow, c.FrameBudget, c.MailboxBudget, c.TrafficBudget, sum(c),
				tc.conns, tc.window, tc.frames, tc.mailboxes, tc.want)
		}
	}
	c := Config{TrafficBudget: 512 << 20, MailboxBudget: 1 << 30}
	c.setDefaults()
	if c.TrafficBudget != sum(c) || c.TrafficBudget != 1<<30+256<<20 {
		t.Errorf("a larger MailboxBudget: total %d, parts %d", c.TrafficBudget, sum(c))
	}
}

// TestDecodeCallWithoutCopy: decodeCall reads what decodeMsg reads (an
// encoded call, a nil body, fields it does not know, an empty map, keys in
// any order) with the body a slice of the frame, and refuses what is not a
// call.
func TestDecodeCallWithoutCopy(t *testing.T) {
	enc := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	args := enc(&tidArgs{TID: 7})
	for _, b := range [][]byte{
		enc(&call{ID: 1 << 40, Method: mWait, Body: args}),
		enc(&call{ID: 3, Method: mPS}),
		enc(map[string]any{"b": msgpack.RawMessage(args), "x": []any{1, "y", map[string]int{"z": 2}}, "m": mKill, "i": 9}),
		enc(map[string]any{}),
		enc(nil),
	} {
		var want call
		if err := decodeMsg(b, &want); err != nil {
			t.Fatal(err)
		}
		got, err := decodeCall(b)
		if err != nil {
			t.Fatalf("%x: %v", b, err)
		}
		if got.ID != want.ID || got.Method != want.Method || !bytes.Equal(got.Body, want.Body) {
			t.Errorf("%x: decoded %+v, decodeMsg %+v", b, got, want)
		}
		if len(got.Body) > 0 && !inside(b, got.Body) {
			t.Errorf("%x: the body is a copy", b)
		}
	}
	for _, b := range [][]byte{
		enc([]any{1, "ps", nil}),                       // not a map
		enc(map[int]int{1: 2}),                         // a key that is not a name
		{0x83, 0xa1, 'i', 0x01, 0xa1, 'b', 0xc6, 0xff}, // a body longer than the frame
	} {
		if _, err := decodeCall(b); !errors.Is(err, routing.ErrMalformed) {
			t.Errorf("%x: %v, want ErrMalformed", b, err)
		}
	}
}

// inside reports whether s lies within b's bytes.
func inside(b, s []byte) bool {
	for i := range b {
		if &b[i] == &s[0] {
			return i+len(s) <= len(b)
		}
	}
	return false
}
