package daemon

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// laneShaper delays every frame on a bulk lane (so that small messages
// sent after a large one overtake it on QUIC), and resets every
// resetEvery-th bulk frame's stream (0: none), breaking the lane in the
// middle of a transfer.
type laneShaper struct {
	delay      time.Duration
	resetEvery int64
	bulk       atomic.Int64 // bulk frames seen
	resets     atomic.Int64
}

func (s *laneShaper) Shape(u transport.Unit) transport.Decision {
	if !u.Bulk {
		return transport.Decision{}
	}
	n := s.bulk.Add(1)
	if s.resetEvery > 0 && n%s.resetEvery == 1 {
		s.resets.Add(1)
		return transport.Decision{Reset: true}
	}
	return transport.Decision{Delay: s.delay}
}

// bulkOrder has a task on h1 send rounds of a large message (on the bulk
// lane) followed by small ones (on QUIC) to a task on h2, which checks
// that it receives them in the order sent, each once.
func bulkOrder(t *testing.T, vm *LocalVM, rounds int) {
	const large, small = 200 << 10, 3
	runRoot(t, vm.Master(), func(c *task.Ctx, _ int) error {
		recv := fn(t, func(c *task.Ctx, n int) error {
			for i := range n * (1 + small) {
				m, err := c.Recv(task.AnyTask, task.AnyTag, nil)
				if err != nil {
					return err
				}
				got := int(binary.LittleEndian.Uint32(m.Payload.Data))
				if got != i || m.Tag != i%(1+small) {
					return fmt.Errorf("message %d: got number %d, tag %d (%d bytes)", i, got, m.Tag, len(m.Payload.Data))
				}
				if want := large; m.Tag == 0 && len(m.Payload.Data) != want {
					return fmt.Errorf("message %d: %d bytes, want %d", i, len(m.Payload.Data), want)
				}
			}
			return c.Send(c.Parent(), 1, n)
		})
		recv.Arg = rounds
		r, err := c.Spawn(recv, 1, task.OnHost("h2"))
		if err != nil {
			return err
		}
		i := 0
		for range rounds {
			for k := range 1 + small {
				size := 4
				if k == 0 {
					size = large
				}
				b := make([]byte, size)
				binary.LittleEndian.PutUint32(b, uint32(i))
				if err := c.Send(r[0], k, b); err != nil {
					return err
				}
				i++
			}
		}
		var n int
		if _, err := c.Recv(r[0], 1, &n); err != nil {
			return err
		}
		if n != rounds {
			return fmt.Errorf("the receiver counted %d rounds, want %d", n, rounds)
		}
		return nil
	})
}

// TestBulkLaneOrder: large messages go on the bulk lane, delayed there,
// and the small ones sent after each overtake it on QUIC; the receiver
// still gets everything in the order sent, once.
func TestBulkLaneOrder(t *testing.T) {
	s := &laneShaper{delay: 5 * time.Millisecond}
	vm := startMemVMWith(t, 2, s, Config{})
	bulkOrder(t, vm, 20)
	if s.bulk.Load() == 0 {
		t.Fatal("no message went on the bulk lane")
	}
}

// TestBulkLaneBreaks: the bulk lane's stream is reset in the middle of
// transfers again and again; what it lost goes over QUIC, and the receiver
// gets everything in order, once.
func TestBulkLaneBreaks(t *testing.T) {
	s := &laneShaper{delay: time.Millisecond, resetEvery: 3}
	vm := startMemVMWith(t, 2, s, Config{})
	bulkOrder(t, vm, 20)
	if s.resets.Load() == 0 {
		t.Fatal("the bulk lane never broke")
	}
}

// startMemVMWith starts n daemons on an in-memory network shaped by s.
func startMemVMWith(t *testing.T, n int, s transport.Shaper, cfg Config) *LocalVM {
	t.Helper()
	cfg.Network = transport.NewMem(s, frameLen)
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 20 * time.Millisecond
	}
	if cfg.DeadAfter == 0 {
		cfg.DeadAfter = time.Minute // delays must not look like death
	}
	if cfg.RTO == 0 {
		cfg.RTO = 30 * time.Millisecond
	}
	return startVM(t, n, cfg)
}

// streamShaper counts the checkpoint streams opened on the bulk lane and
// on QUIC: their first frame is a KindStream header.
type streamShaper struct{ bulk, quic atomic.Int64 }

func (s *streamShaper) Shape(u transport.Unit) transport.Decision {
	if u.Index == 0 && len(u.Data) > 4 && routing.Kind(u.Data[4]) == routing.KindStream {
		if u.Bulk {
			s.bulk.Add(1)
		} else {
			s.quic.Add(1)
		}
		return transport.Decision{Raw: true}
	}
	return transport.Decision{}
}

// cargo holds a state of len(Data) bytes and reaches a safe point every
// 10 ms.
type cargo struct{ Data []byte }

func init() { task.Register("daemon.test.cargo", &cargo{}) }

func (b *cargo) Run(c *task.Ctx) error {
	for {
		time.Sleep(10 * time.Millisecond)
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
}

// checkCargo checks that the cargo task tid runs on d with data as its
// state.
func checkCargo(t *testing.T, d *Daemon, tid task.TID, data []byte) {
	t.Helper()
	h := d.ht.task(tid)
	if h == nil {
		t.Fatalf("%v does not run on %s after its move", tid, d.Name())
	}
	if got := h.t.(*cargo).Data; !bytes.Equal(got, data) {
		t.Fatalf("%d bytes: the state arrived changed (%d bytes)", len(data), len(got))
	}
}

// TestDirectCheckpointLane: a direct checkpoint of a small state goes on
// a QUIC stream (no handshake to pay for), one of a state of
// BulkCheckpointMin and more on the bulk lane; both arrive whole.
func TestDirectCheckpointLane(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &streamShaper{}
		vm := startMemVMWith(t, 2, s, Config{BulkCheckpointMin: 64 << 10})
		m := vm.Master()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, c := range []struct {
			size       int
			bulk, quic int64
		}{{1 << 10, 0, 1}, {256 << 10, 1, 1}} {
			data := make([]byte, c.size)
			for i := range data {
				data[i] = byte(i * 7)
			}
			tid := spawnOn(t, m, "h1", &cargo{Data: data})
			if _, err := m.Migrate(ctx, tid, "h2", Direct); err != nil {
				t.Fatalf("%d bytes: %v", c.size, err)
			}
			if b, q := s.bulk.Load(), s.quic.Load(); b != c.bulk || q != c.quic {
				t.Errorf("after a move of %d bytes: %d checkpoint streams on the bulk lane, %d on QUIC; want %d and %d", c.size, b, q, c.bulk, c.quic)
			}
			checkCargo(t, vm.Daemons[1], tid, data)
			if err := m.KillTask(ctx, tid); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// keptCheckpointStream is the stream d keeps for its next direct
// checkpoint to host h (nil: none).
func keptCheckpointStream(t *testing.T, d *Daemon, h task.HostID) transport.Stream {
	t.Helper()
	d.nw.mu.Lock()
	p := d.nw.peers[h]
	d.nw.mu.Unlock()
	if p == nil {
		t.Fatalf("%s has no peer %v", d.Name(), h)
	}
	p.ckpt.mu.Lock()
	defer p.ckpt.mu.Unlock()
	return p.ckpt.st
}

// TestCheckpointStreamKeptAhead: once a direct checkpoint has gone on the
// bulk lane, the origin opens a stream ahead for its next one to that
// peer, and that checkpoint goes on it, whole; a daemon that sent none
// keeps none.
func TestCheckpointStreamKeptAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &streamShaper{}
		vm := startMemVMWith(t, 2, s, Config{BulkCheckpointMin: 64 << 10})
		m, h2 := vm.Master(), vm.Daemons[1]
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		data := make([]byte, 256<<10)
		for i := range data {
			data[i] = byte(i * 13)
		}
		tid := spawnOn(t, m, "h1", &cargo{Data: data})
		if keptCheckpointStream(t, m, h2.HostID()) != nil {
			t.Fatal("a stream kept before any checkpoint went on the lane")
		}
		var kept transport.Stream
		for i, to := range []string{"h2", "h1", "h2"} {
			if _, err := m.Migrate(ctx, tid, to, Direct); err != nil {
				t.Fatalf("move %d to %s: %v", i+1, to, err)
			}
			synctest.Wait()
			now := keptCheckpointStream(t, m, h2.HostID())
			if now == nil {
				t.Fatalf("after move %d, h1 keeps no stream for its next checkpoint to h2", i+1)
			}
			if i == 2 && now == kept {
				t.Fatal("the checkpoint to h2 did not take the stream kept for it")
			}
			kept = now
		}
		if b, q := s.bulk.Load(), s.quic.Load(); b != 3 || q != 0 {
			t.Errorf("%d checkpoint streams on the bulk lane, %d on QUIC; want 3 and 0", b, q)
		}
		checkCargo(t, h2, tid, data)
		if err := m.KillTask(ctx, tid); err != nil {
			t.Fatal(err)
		}
	})
}

// smallShaper records, per bulk stream, which daemons wrote message
// frames carrying envelopes on it, and resets every resetEvery-th such
// unit's stream (0: none).
type smallShaper struct {
	resetEvery int64
	mu         sync.Mutex
	writers    map[[2]uint64]map[string]bool // (connection, stream) → writing endpoints
	units      atomic.Int64
	resets     atomic.Int64
}

func (s *smallShaper) Shape(u transport.Unit) transport.Decision {
	// A message frame with at least one envelope (the lane's opening
	// frame carries none).
	if !u.Bulk || len(u.Data) <= 5 || routing.Kind(u.Data[4]) != routing.KindMsgs {
		return transport.Decision{}
	}
	n := s.units.Add(1)
	if s.resetEvery > 0 && n%s.resetEvery == 0 {
		s.resets.Add(1)
		return transport.Decision{Reset: true}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writers == nil {
		s.writers = map[[2]uint64]map[string]bool{}
	}
	k := [2]uint64{u.Conn, uint64(u.Stream)}
	if s.writers[k] == nil {
		s.writers[k] = map[string]bool{}
	}
	s.writers[k][u.From] = true
	return transport.Decision{}
}

// shared reports whether both daemons wrote messages on one bulk stream.
func (s *smallShaper) shared() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.writers {
		if len(w) == 2 {
			return true
		}
	}
	return false
}

// smallRounds has a task on h1 and one on h2 exchange small numbered
// messages until done says so or rounds have passed, each checking that
// it receives every number once, in order. It returns the rounds played.
func smallRounds(t *testing.T, vm *LocalVM, rounds int, done func() bool) int {
	t.Helper()
	var played atomic.Int64
	runRoot(t, vm.Master(), func(c *task.Ctx, _ int) error {
		echo := fn(t, func(c *task.Ctx, _ int) error {
			for i := 0; ; i++ {
				m, err := c.Recv(c.Parent(), task.AnyTag, nil)
				if err != nil {
					return err
				}
				if m.Tag == 2 {
					return nil
				}
				if got := int(binary.LittleEndian.Uint32(m.Payload.Data)); got != i {
					return fmt.Errorf("echo: message %d carries %d", i, got)
				}
				if err := c.Send(c.Parent(), 1, m.Payload.Data); err != nil {
					return err
				}
			}
		})
		r, err := c.Spawn(echo, 1, task.OnHost("h2"))
		if err != nil {
			return err
		}
		for i := range rounds {
			b := binary.LittleEndian.AppendUint32(nil, uint32(i))
			if err := c.Send(r[0], 1, b); err != nil {
				return err
			}
			m, err := c.Recv(r[0], 1, nil)
			if err != nil {
				return err
			}
			if got := int(binary.LittleEndian.Uint32(m.Payload.Data)); got != i {
				return fmt.Errorf("round %d: the answer carries %d", i, got)
			}
			played.Store(int64(i + 1))
			if done() {
				break
			}
		}
		return c.Send(r[0], 2, nil)
	})
	return int(played.Load())
}

// TestBulkLaneSmallMessages: with BulkSmall, once the lane is open small
// messages take it too, both daemons writing on the one stream the
// dialling daemon opened; everything arrives once, in order. Without it
// they stay on QUIC.
func TestBulkLaneSmallMessages(t *testing.T) {
	s := &smallShaper{}
	vm := startMemVMWith(t, 2, s, Config{BulkSmall: true})
	if n := smallRounds(t, vm, 5000, s.shared); !s.shared() {
		t.Fatalf("after %d rounds no bulk stream carried messages both ways", n)
	}
	off := &smallShaper{}
	vm = startMemVMWith(t, 2, off, Config{})
	smallRounds(t, vm, 200, func() bool { return false })
	if n := off.units.Load(); n != 0 {
		t.Fatalf("without BulkSmall, %d units of small messages went on the lane", n)
	}
}

// TestBulkLaneSmallBreaks: the lane carrying small messages both ways is
// reset again and again; what it lost goes over QUIC, the lane opens
// again, and every message still arrives once, in order.
func TestBulkLaneSmallBreaks(t *testing.T) {
	s := &smallShaper{resetEvery: 7}
	vm := startMemVMWith(t, 2, s, Config{BulkSmall: true, BulkRetry: time.Millisecond})
	smallRounds(t, vm, 5000, func() bool { return s.resets.Load() >= 5 })
	if r := s.resets.Load(); r < 5 {
		t.Fatalf("the lane broke %d times, want 5", r)
	}
}
