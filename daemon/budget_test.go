package daemon

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/daemon/transport"
)

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
