package daemon

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/routing/hostlist"
)

// joinMore starts a host daemon named name that joins vm's master over
// its network, with its timings; it is halted when the test ends.
func joinMore(t *testing.T, vm *LocalVM, name string) (*Daemon, error) {
	mc := vm.Master().cfg
	d, err := Start(context.Background(), Config{Network: mc.Network, Listen: "127.0.0.1:0", Join: vm.Master().Addr(),
		Credential: hostCred(t, vm, name), Output: &syncBuffer{}, Heartbeat: mc.Heartbeat, DeadAfter: mc.DeadAfter,
		Detector: mc.Detector, RTO: mc.RTO, MasterGrace: mc.MasterGrace})
	if err == nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = d.Halt(ctx)
		})
	}
	return d, err
}

// listOf is what d knows of the hosts, each as "ID name addr" (the
// master's address left out: each host records the one it reached it
// by), with its host list's version and whether the list and the hosts
// it knows agree.
func listOf(d *Daemon) (hosts []string, v uint64, agree bool) {
	n := d.nw
	n.mu.Lock()
	defer n.mu.Unlock()
	agree = true
	for id, h := range n.hosts {
		addr := h.Addr
		if id == MasterID {
			addr = ""
		}
		hosts = append(hosts, fmt.Sprintf("%v %s %s", id, h.Name, addr))
		if e, ok := n.list.Get(id); id != d.cfg.HostID && (!ok || e.Name != h.Name) {
			agree = false
		}
	}
	slices.Sort(hosts)
	return hosts, n.list.Version(), agree && n.list.Len() == len(n.hosts)
}

// sameLists waits, up to limit, until the master lists the daemons of ds
// and itself, and every daemon of ds knows the hosts the master lists, at
// the master's version.
func sameLists(m *Daemon, ds []*Daemon, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		want, wv, _ := listOf(m)
		var bad error
		if len(want) != 1+len(ds) {
			bad = fmt.Errorf("the master lists %v, want %d hosts", want, 1+len(ds))
		}
		for _, d := range ds {
			if bad != nil {
				break
			}
			got, v, agree := listOf(d)
			if !slices.Equal(got, want) || v != wv || !agree {
				bad = fmt.Errorf("%s knows %v at version %d (list and hosts agree: %v); the master %v at %d", d.Name(), got, v, agree, want, wv)
				break
			}
		}
		if bad == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return bad
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHostListStorm: hosts join and leave at once, in a storm; every
// host ends with the master's list, at its version, each host on it
// known, and the list went out as deltas: no host found a gap and asked
// for the whole list, which each host got once, when it joined.
func TestHostListStorm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vm := memberVM(t, 4, &partitions{}, Config{})
		m := vm.Master()
		var mu sync.Mutex
		live := slices.Clone(vm.Daemons[1:])
		var wg sync.WaitGroup
		storm := func(from, to int) {
			for i := from; i < to; i++ {
				wg.Go(func() {
					d, err := joinMore(t, vm, fmt.Sprintf("j%d", i))
					if err != nil {
						t.Errorf("j%d: %v", i, err)
						return
					}
					mu.Lock()
					live = append(live, d)
					mu.Unlock()
				})
			}
		}
		storm(0, 12)
		wg.Wait()
		// Half of those leave while as many more join.
		mu.Lock()
		leaving := slices.Clone(live[3:9])
		live = append(live[:3:3], live[9:]...)
		mu.Unlock()
		for _, d := range leaving {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := d.Halt(ctx); err != nil {
					t.Errorf("%s halts: %v", d.Name(), err)
				}
			})
		}
		storm(12, 18)
		wg.Wait()
		if t.Failed() {
			return
		}
		if err := sameLists(m, live, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		_, v, _ := listOf(m)
		// One change for the master, one per join and one per leave.
		if want := uint64(1 + 3 + 18 + len(leaving)); v != want {
			t.Errorf("the master's list at version %d, want %d", v, want)
		}
		if n := m.nw.listsAsked.Load(); n != 0 {
			t.Errorf("hosts asked for the whole list %d times", n)
		}
	})
}

// TestHostListGap: a host that misses a delta finds the gap at the next
// one and recovers the whole list; so does one whose connection to the
// master was cut while a host joined.
func TestHostListGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &partitions{}
		vm := memberVM(t, 4, p, Config{Detector: DetectorMaster})
		m, a := vm.Master(), vm.Daemons[1]
		c := vm.Daemons[3]
		if err := sameLists(m, vm.Daemons[1:], 5*time.Second); err != nil {
			t.Fatal(err)
		}
		// a misses the delta that added c: its list goes back to the
		// version before, without c.
		n := a.nw
		n.applyMu.Lock()
		n.mu.Lock()
		v, es := n.list.Snapshot()
		es = slices.DeleteFunc(es, func(e hostlist.Entry) bool { return e.ID == c.cfg.HostID })
		n.list = hostlist.New()
		n.list.Reset(v-1, es)
		delete(n.hosts, c.cfg.HostID)
		n.mu.Unlock()
		n.applyMu.Unlock()
		if _, err := a.peerFor(context.Background(), c.cfg.HostID); err == nil {
			t.Fatal("a reaches c, which it should not know")
		}
		// The next delta (d joins) is past a gap: a asks for the list.
		d, err := joinMore(t, vm, "d")
		if err != nil {
			t.Fatal(err)
		}
		ds := []*Daemon{vm.Daemons[1], vm.Daemons[2], c, d}
		if err := sameLists(m, ds, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := a.peerFor(context.Background(), c.cfg.HostID); err != nil {
			t.Errorf("a cannot reach c after the whole list: %v", err)
		}
		if n := m.nw.listsAsked.Load(); n != 1 {
			t.Errorf("the whole list sent %d times to hosts that asked, want once (a)", n)
		}

		// b cut off from the master while e joins and d leaves: its
		// connection ends and the deltas with it; b registers again
		// once healed and gets the whole list.
		b := vm.Daemons[2]
		p.split(false, m.Addr(), b.Addr())
		e, err := joinMore(t, vm, "e")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := d.Halt(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if p.cutN.Load() == 0 {
			t.Fatal("the cut between b and the master cut nothing")
		}
		p.split(true, m.Addr(), b.Addr())
		if err := sameLists(m, []*Daemon{a, b, c, e}, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if _, ok := hostInfo(b, "e"); !ok {
			t.Errorf("b does not know e")
		}
		if _, ok := hostInfo(b, "d"); ok {
			t.Errorf("b still knows d, which left")
		}
	})
}
