package daemon

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// The tests in this file run virtual machines on the in-memory network
// (transport.Mem) with faults injected from a seed: frames carrying
// messages and acknowledgements are delayed, dropped and swapped with
// their neighbours, every unit is delayed a little (which reorders traffic
// between different connections), and connections between hosts break.
// Each fault is a function of the seed and of the unit's place in the
// traffic (connection, stream, index), never of a clock or of how the
// goroutines interleave, and every run must keep every guarantee: per-pair
// order, exactly-once delivery, collectives, migrations.

// faults is a seeded Shaper.
type faults struct {
	seed   uint64
	master string // connections to the master never break: losing it stops the VM
	drop   uint64 // per mille of message/ack frames lost
	hold   uint64 // per mille of message/ack frames swapped with the next frame
	delay  uint64 // per mille of units delayed
	cut    uint64 // per 100 000 units of a host-to-host connection: the connection breaks
	stall  uint64 // per 100 000 units: the unit (and its stream's later ones) waits 50–450 ms, a host frozen past timeouts

	stalling atomic.Bool // stalls start once the test sets it, after the daemons have joined

	// frozen, until thaw, is an endpoint whose traffic, both ways, waits
	// until thaw: a host frozen (or cut off and back) past the failure
	// detector's patience, whose units then arrive all at once, in order.
	freezeMu sync.Mutex
	frozen   string
	thaw     time.Time

	dropped, held, delayed, cuts, stalls, frozenUnits atomic.Int64

	admitted atomic.Uint64 // admissions seen by admitPause
}

// admitPause, the master's fault hook, holds a joining host 0–59 ms
// between its admission and its attachment (a master descheduled there),
// the time drawn from the seed and the admission's number, so that
// admissions cross: another host may be admitted, attached and announced
// meanwhile. It holds hosts registering again likewise.
func (f *faults) admitPause(point string) {
	if point != "join:admitted" && point != "rejoin:admitted" {
		return
	}
	var b [17]byte
	binary.LittleEndian.PutUint64(b[0:], f.seed)
	binary.LittleEndian.PutUint64(b[8:], f.admitted.Add(1))
	b[16] = 'a'
	time.Sleep(time.Duration(mix(b[:])%60) * time.Millisecond)
}

// freeze holds everything to and from the endpoint addr for d from now.
func (f *faults) freeze(addr string, d time.Duration) {
	f.freezeMu.Lock()
	f.frozen, f.thaw = addr, time.Now().Add(d)
	f.freezeMu.Unlock()
}

// roll returns a number in [0, n) determined by the seed, the unit's place
// and what the number is for.
func (f *faults) roll(u transport.Unit, what byte, n uint64) uint64 {
	var b [8*4 + 1]byte
	binary.LittleEndian.PutUint64(b[0:], f.seed)
	binary.LittleEndian.PutUint64(b[8:], u.Conn)
	binary.LittleEndian.PutUint64(b[16:], uint64(u.Stream)<<1|boolBit(u.From < u.To))
	binary.LittleEndian.PutUint64(b[24:], uint64(u.Index))
	b[32] = what
	return mix(b[:]) % n
}

func boolBit(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// mix is a fixed hash (FNV-1a then a finaliser), the same on every run.
func mix(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}

func (f *faults) Shape(u transport.Unit) transport.Decision {
	var d transport.Decision
	kind := routing.Kind(0)
	if len(u.Data) > 4 {
		kind = routing.Kind(u.Data[4])
	}
	if kind == routing.KindStream {
		d.Raw = true // a checkpoint's bytes follow
	}
	data := kind == routing.KindMsgs || kind == routing.KindAcks
	if u.Held && !data {
		d.Flush = true // control frames keep their order
	}
	if f.roll(u, 'd', 1000) < f.delay {
		d.Delay = time.Duration(1+f.roll(u, 't', 2000)) * time.Microsecond
		f.delayed.Add(1)
	}
	if f.stall > 0 && f.stalling.Load() && f.roll(u, 's', 100000) < f.stall {
		d.Delay = time.Duration(50+f.roll(u, 'S', 400)) * time.Millisecond
		f.stalls.Add(1)
	}
	if data {
		switch r := f.roll(u, 'f', 1000); {
		case r < f.drop:
			d.Drop = true
			f.dropped.Add(1)
		case r < f.drop+f.hold && !u.Held:
			d.Hold = true
			f.held.Add(1)
		}
	}
	f.freezeMu.Lock()
	if f.frozen != "" && (u.From == f.frozen || u.To == f.frozen) {
		if wait := time.Until(f.thaw); wait > 0 {
			d.Delay = max(d.Delay, wait)
			f.frozenUnits.Add(1)
		}
	}
	f.freezeMu.Unlock()
	if f.cut > 0 && u.From != f.master && u.To != f.master && f.roll(u, 'c', 100000) < f.cut {
		d.Cut = true
		f.cuts.Add(1)
	}
	return d
}

func (f *faults) String() string {
	return fmt.Sprintf("seed %d: %d frames dropped, %d swapped, %d units delayed, %d stalled, %d connections cut",
		f.seed, f.dropped.Load(), f.held.Load(), f.delayed.Load(), f.stalls.Load(), f.cuts.Load())
}

// frameLen cuts a daemon stream into frames for the shaper.
func frameLen(b []byte) int {
	if len(b) < 4 {
		return 0
	}
	n := 4 + int(binary.LittleEndian.Uint32(b))
	if n > len(b) {
		return 0
	}
	return n
}

// memSeeds is how many seeds each test runs: a handful by default,
// DPVM_MEM_SEEDS for more (e.g. DPVM_MEM_SEEDS=1000).
func memSeeds(t *testing.T, def int) int {
	if s := os.Getenv("DPVM_MEM_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("DPVM_MEM_SEEDS=%q: want a positive count", s)
		}
		return n
	}
	return def
}

// startMemVM starts n daemons on an in-memory network shaped by f.
func startMemVM(t testing.TB, n int, f *faults, cfg Config) *LocalVM {
	t.Helper()
	f.master = "mem:1"
	cfg.Network = transport.NewMem(f, frameLen)
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

// TestMemNetOrderUnderFaults: per-pair order and exactly-once delivery with
// wildcards, between tasks on four hosts, through lost, delayed and
// swapped frames and broken connections.
func TestMemNetOrderUnderFaults(t *testing.T) {
	for seed := range memSeeds(t, 8) {
		f := &faults{seed: uint64(seed), drop: 100, hold: 100, delay: 300, cut: 1000}
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			vm := startMemVM(t, 4, f, Config{})
			pairOrder(t, vm.Master(), 4, 3, 300)
			t.Log(f)
		})
	}
}

// pairOrder spawns receivers and senders over hosts h1..hN (2 senders per
// receiver) and checks every receiver gets every sender's messages once,
// in order.
func pairOrder(t *testing.T, m *Daemon, hosts, pairs, msgs int) {
	t.Helper()
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		recv := fn(t, func(c *task.Ctx, n int) error {
			next := map[task.TID]int{}
			for range 2 * n {
				var v []int64
				st, err := c.Recv(task.AnyTask, task.AnyTag, &v)
				if err != nil {
					return err
				}
				if int(v[0]) != next[st.From] || st.Tag != int(v[0]%3) || len(v) != 1+int(v[0]%50) {
					return fmt.Errorf("from %v: got %d (tag %d, %d values), want %d", st.From, v[0], st.Tag, len(v), next[st.From])
				}
				next[st.From]++
			}
			return c.Send(c.Parent(), 1, len(next))
		})
		recv.Arg = msgs
		send := fn(t, func(c *task.Ctx, n int) error {
			var to task.TID
			if _, err := c.Recv(c.Parent(), 2, &to); err != nil {
				return err
			}
			for i := range n {
				v := make([]int64, 1+i%50)
				v[0] = int64(i)
				if err := c.Send(to, i%3, v); err != nil {
					return err
				}
			}
			return nil
		})
		send.Arg = msgs
		var recvs []task.TID
		for i := range pairs {
			r, err := c.Spawn(recv, 1, task.OnHost(fmt.Sprintf("h%d", 1+i%hosts)))
			if err != nil {
				return err
			}
			recvs = append(recvs, r...)
		}
		for i := range 2 * pairs {
			s, err := c.Spawn(send, 1, task.OnHost(fmt.Sprintf("h%d", 1+(i+1)%hosts)))
			if err != nil {
				return err
			}
			if err := c.Send(s[0], 2, recvs[i%pairs]); err != nil {
				return err
			}
		}
		for range recvs {
			var n int
			if _, err := c.Recv(task.AnyTask, 1, &n); err != nil {
				return err
			}
			if n != 2 {
				return fmt.Errorf("a receiver heard from %d senders", n)
			}
		}
		return nil
	})
}

// TestMemNetCollectivesUnderFaults: barriers keep rounds apart, and
// broadcast, reductions, gather and scatter give their results, with the
// group's members on three hosts and frames lost, delayed and swapped.
func TestMemNetCollectivesUnderFaults(t *testing.T) {
	for seed := range memSeeds(t, 4) {
		f := &faults{seed: uint64(seed), drop: 100, hold: 100, delay: 300, cut: 1000}
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			vm := startMemVM(t, 3, f, Config{})
			collectiveOn(t, vm.Master(), 6, barrierRounds)
			collectiveOn(t, vm.Master(), 5, groupComm)
			t.Log(f)
		})
	}
}

// TestMemNetMigrationUnderFaults: senders on every host stream numbered
// messages to movers that are migrated among four hosts, directly and
// through the shared directory, while frames are lost, delayed and swapped
// and connections between hosts break (a direct transfer on a broken
// connection aborts back to the origin). Every mover gets every message
// once, in order.
func TestMemNetMigrationUnderFaults(t *testing.T) {
	for seed := range memSeeds(t, 6) {
		f := &faults{seed: uint64(seed), drop: 100, hold: 100, delay: 300, cut: 1000}
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			vm := startMemVM(t, 4, f, Config{SharedDir: t.TempDir(), MoveTimeout: 5 * time.Second})
			moves, aborts := migrateUnderTraffic(t, vm, uint64(seed), 3, 400, 12)
			t.Logf("%v; %d moves committed, %d aborted", f, moves, aborts)
		})
	}
}

// migrateUnderTraffic runs movers (one per host but the master's) each fed
// by a sender on another host, and moves the movers around while the
// senders send msgs numbers each; it returns the moves that committed and
// those that failed.
func migrateUnderTraffic(t *testing.T, vm *LocalVM, seed uint64, movers, msgs, moves int) (committed, failed int) {
	t.Helper()
	m := vm.Master()
	hosts := len(vm.Daemons)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var watched []task.TID // the movers and senders, once spawned
	var wmu sync.Mutex
	ended := make(chan struct{})
	defer close(ended)
	go func() {
		// Shortly before runRoot gives up: say where the messages are.
		select {
		case <-ended:
		case <-time.After(55 * time.Second):
			wmu.Lock()
			tids := slices.Clone(watched)
			wmu.Unlock()
			t.Logf("the root has not ended after 55 s:\n%s", simDump(vm, tids))
		}
	}()
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		// A sender sends its numbers in a burst per move, each burst on
		// the root's word just before the move, so that moves happen
		// with messages in flight.
		send := fn(t, func(c *task.Ctx, n int) error {
			var to task.TID
			if _, err := c.Recv(c.Parent(), 2, &to); err != nil {
				return err
			}
			for i := range n {
				if i%(n/moves) == 0 {
					if _, err := c.Recv(c.Parent(), 5, nil); err != nil {
						return err
					}
				}
				if err := c.Send(to, 1, i); err != nil {
					return err
				}
			}
			return c.Send(c.Parent(), 4, nil)
		})
		send.Arg = msgs
		var senders []task.TID
		var mvs []task.TID
		for i := range movers {
			mv, err := c.Spawn(&movingTask{}, 1, task.OnHost(fmt.Sprintf("h%d", 2+i%(hosts-1))))
			if err != nil {
				return err
			}
			s, err := c.Spawn(send, 1, task.OnHost(fmt.Sprintf("h%d", 1+(i+2)%hosts)))
			if err != nil {
				return err
			}
			if err := c.Send(s[0], 2, mv[0]); err != nil {
				return err
			}
			mvs = append(mvs, mv...)
			senders = append(senders, s...)
			wmu.Lock()
			watched = append(watched, mv[0], s[0])
			wmu.Unlock()
		}
		// Moves chosen by the seed, one at a time, while the senders run;
		// after each, the invariants are checked.
		epochs := map[*Daemon]map[task.TID]uint64{}
		r := seed*0x9e3779b97f4a7c15 + 1
		for i := range moves {
			if err := c.Mcast(senders, 5, nil); err != nil {
				return err
			}
			r = r*6364136223846793005 + 1442695040888963407
			mv := mvs[int(r>>33)%len(mvs)]
			// Any host but the one it is on (the master's route says).
			k := 1 + int(r>>40)%(hosts-1)
			if k >= int(m.routeHost(mv)) {
				k++
			}
			to := fmt.Sprintf("h%d", k)
			via := Direct
			if (r>>50)&1 == 1 {
				via = Indirect
			}
			_, err := m.Migrate(ctx, mv, to, via)
			if *simTrace {
				t.Logf("after move %d of %v (%v):\n%s", i, mv, err, simDump(vm, []task.TID{mv}))
			}
			if err == nil || errors.Is(err, ErrAborted) {
				if cerr := checkMoved(vm, mv, epochs); cerr != nil {
					return fmt.Errorf("move %d: %w", i, cerr)
				}
			}
			if err != nil {
				failed++
				t.Logf("move %d: %v", i, err)
				continue
			}
			committed++
		}
		for range msgs/(msgs/moves) - moves + 1 {
			if err := c.Mcast(senders, 5, nil); err != nil { // bursts left over, if any
				return err
			}
		}
		for range mvs {
			if _, err := c.Recv(task.AnyTask, 4, nil); err != nil {
				return err
			}
		}
		for _, mv := range mvs {
			if err := stopMover(c, mv, msgs); err != nil {
				return err
			}
		}
		return nil
	})
	return committed, failed
}

// checkMoved checks the invariants of a move that has ended (committed or
// aborted): the task runs on exactly one host, none keeps it suspended,
// and no daemon's route epoch for it has gone back since the last check
// (epochs holds the last ones seen).
func checkMoved(vm *LocalVM, tid task.TID, epochs map[*Daemon]map[task.TID]uint64) error {
	var on []string
	for _, d := range vm.Daemons {
		d.rt.mu.Lock()
		e := d.rt.routes.Lookup(tid).Epoch
		d.rt.mu.Unlock()
		d.ht.mu.Lock()
		_, runs := d.ht.tasks[tid]
		_, suspended := d.ht.moving[tid]
		d.ht.mu.Unlock()
		if runs {
			on = append(on, d.Name())
		}
		if suspended {
			return fmt.Errorf("%v is still suspended on %s after its move ended", tid, d.Name())
		}
		if epochs[d] == nil {
			epochs[d] = map[task.TID]uint64{}
		}
		if prev := epochs[d][tid]; e < prev {
			return fmt.Errorf("%s's route epoch of %v went back from %d to %d", d.Name(), tid, prev, e)
		}
		epochs[d][tid] = e
	}
	if len(on) != 1 {
		return fmt.Errorf("%v runs on %v after its move ended, want one host", tid, on)
	}
	return nil
}

// simDump describes where every daemon of vm has the tasks tids: hosted,
// suspended or arriving for a move, the route it
// knows, what its outbox holds for them, and what its inbox expects from
// each sender. A simulation that does not end prints it, so that a failing
// seed says where the messages are.
func simDump(vm *LocalVM, tids []task.TID) string {
	var b strings.Builder
	for _, d := range vm.Daemons {
		fmt.Fprintf(&b, "%s (host %v):\n", d.Name(), d.HostID())
		for _, tid := range tids {
			d.ht.mu.Lock()
			h, l, arr := d.ht.tasks[tid], d.ht.moving[tid], d.ht.incoming[tid]
			var state string
			if h != nil {
				n, _ := h.mb.stats()
				state = fmt.Sprintf(" hosted, %d in its mailbox;", n)
			}
			if l != nil {
				dep, _ := d.ht.node.Moves().Departure(tid)
				state += fmt.Sprintf(" suspended for %v (over %v, dest %+v, held %d)", l.move, dep.Over, l.dest, len(l.held))
			}
			if arr != nil {
				state += fmt.Sprintf(" arriving for %v (held %d)", arr.move, len(arr.held))
			}
			floor, _ := d.ht.node.Moves().Floor(tid)
			d.ht.mu.Unlock()
			d.rt.mu.Lock()
			r := d.rt.routes.Lookup(tid)
			desc := d.rt.outbox.Describe(tid)
			exp, early := d.rt.inbox.ReceiverState(tid)
			d.rt.mu.Unlock()
			fmt.Fprintf(&b, "  %v:%s floor %v; route %+v; outbox: %s; inbox expects %v, %d early\n", tid, state, floor, r, desc, exp, len(early))
		}
	}
	return b.String()
}
