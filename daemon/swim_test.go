package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/swim"
	"github.com/dpvm/dpvm/task"
)

// swimVM is memberVM under the swim failure detector.
func swimVM(t *testing.T, n int, p *partitions, cfg Config) *LocalVM {
	t.Helper()
	cfg.Detector = DetectorSwim
	return memberVM(t, n, p, cfg)
}

// TestSwimCrashedHostRollsBack: under swim, a host that crashes is found
// by the other hosts, checked by the master and deleted through the path a
// heartbeat death takes: its job rolls back to its checkpoint on the hosts
// left and ends with the result of an uninterrupted run, once.
func TestSwimCrashedHostRollsBack(t *testing.T) {
	shared := t.TempDir()
	out := &syncBuffer{}
	vm := startVM(t, 4, Config{SharedDir: shared, Output: out, Detector: DetectorSwim, Network: transport.NewMem(&partitions{}, frameLen),
		Heartbeat: 50 * time.Millisecond, DeadAfter: 500 * time.Millisecond, RTO: 30 * time.Millisecond})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ring := &ringRoot{N: 6, Laps: 20}

	_, root, err := m.StartJob(ctx, ring, JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitRingMid(t)
	poke(t, m, root)
	if info, err := m.Wait(ctx, root); err != nil || info.Status != 0 {
		t.Fatalf("reference ring: %+v %v", info, err)
	}
	want := ringSum.FindStringSubmatch(out.String())
	if want == nil {
		t.Fatalf("no result: %q", out)
	}

	job, root, err := m.StartJob(ctx, ring, JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitRingMid(t)
	if _, err := m.CheckpointJob(ctx, job, ""); err != nil {
		t.Fatal(err)
	}
	js, err := m.job(job)
	if err != nil {
		t.Fatal(err)
	}
	before := strings.Count(out.String(), "sum")
	vm.Daemons[1].crash() // h2 runs workers (placed round robin)
	if got := waitRingMid(t); got != root {
		t.Fatalf("after the rollback %v waits halfway, want the root %v", got, root)
	}
	if _, ok := hostInfo(m, "h2"); ok {
		t.Fatal("h2 still listed after the rollback")
	}
	if m.nw.swimChecks.Load() == 0 {
		t.Error("the master deleted h2 without checking it")
	}
	poke(t, m, root)
	info, err := m.waitJob(ctx, js)
	if err != nil || info.Status != 0 {
		t.Fatalf("rolled-back ring: %+v %v\n%s", info, err, out)
	}
	if m.Rollbacks() != 1 {
		t.Fatalf("%d rollbacks", m.Rollbacks())
	}
	all := ringSum.FindAllStringSubmatch(out.String(), -1)
	if len(all) != before+1 || all[len(all)-1][1] != want[1] {
		t.Fatalf("results %v, want a second %s", all, want[1])
	}
}

// TestSwimHostsApartNotDeleted: two hosts that cannot reach each other
// accuse each other, but the master reaches both: its checks are
// answered, and neither is deleted; their tasks run on, nothing rolls
// back.
func TestSwimHostsApartNotDeleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &partitions{}
		vm := swimVM(t, 3, p, Config{})
		m, h2, h3 := vm.Master(), vm.Daemons[1], vm.Daemons[2]
		t2 := spawnOn(t, m, "h2", idler(t))
		t3 := spawnOn(t, m, "h3", idler(t))
		p.split(false, h2.Addr(), h3.Addr())
		// The accusations show: a host accused is listed suspected (a
		// rollback restores nothing on it) until it answers.
		shown := false
		for i := 0; i < 250 && !shown; i++ { // 250 probe intervals
			time.Sleep(20 * time.Millisecond)
			for _, name := range []string{"h2", "h3"} {
				hi, ok := hostInfo(m, name)
				if !ok {
					t.Fatalf("%s deleted while the master reaches it", name)
				}
				shown = shown || hi.Liveness == "suspected"
			}
		}
		if !shown {
			t.Error("neither host was ever shown suspected")
		}
		time.Sleep(5 * time.Second)
		if m.nw.swimChecks.Load() == 0 {
			t.Fatal("no host was accused: the master checked nobody")
		}
		for _, name := range []string{"h2", "h3"} {
			if _, ok := hostInfo(m, name); !ok {
				t.Errorf("%s deleted while the master reaches it", name)
			}
		}
		if !runsOn(h2, t2) || !runsOn(h3, t3) || m.Rollbacks() != 0 {
			t.Errorf("tasks on h2 %v, h3 %v; %d rollbacks", runsOn(h2, t2), runsOn(h3, t3), m.Rollbacks())
		}
		p.split(true, h2.Addr(), h3.Addr())
		if err := waitMembers(vm, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := onceAtAll(vm); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSwimPartitionedHostRejoins: a host cut off from everyone is declared
// dead by the others, not answered by it, and deleted by the master: its
// task is lost (its watcher told so). When the network heals it
// registers again under its host ID, having stopped that task first.
func TestSwimPartitionedHostRejoins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &partitions{}
		vm := swimVM(t, 4, p, Config{})
		m, h3 := vm.Master(), vm.Daemons[2]
		tid := spawnOn(t, m, "h3", idler(t))
		notices := make(chan task.Notice, 1)
		watching := make(chan error, 1)
		spawnOn(t, m, "h2", fn(t, func(c *task.Ctx, _ int) error {
			err := c.Notify(task.TaskExit, 7, tid)
			watching <- err
			if err != nil {
				return err
			}
			var n task.Notice
			if _, err := c.Recv(task.AnyTask, 7, &n); err != nil {
				return err
			}
			notices <- n
			return nil
		}))
		if err := <-watching; err != nil {
			t.Fatal(err)
		}
		p.split(false, h3.Addr(), m.Addr(), vm.Daemons[1].Addr(), vm.Daemons[3].Addr())
		var n task.Notice
		select {
		case n = <-notices:
		case <-time.After(30 * time.Second):
			t.Fatal("no exit notice for the task of the lost host")
		}
		if n.TID != tid || n.Status != -1 || !strings.Contains(n.Err, "lost with its host") {
			t.Errorf("notice %+v", n)
		}
		if _, ok := hostInfo(m, "h3"); ok {
			t.Fatal("h3 still listed after its deletion")
		}
		if m.nw.swimChecks.Load() == 0 {
			t.Error("the master deleted h3 without checking it")
		}
		p.split(true, h3.Addr(), m.Addr(), vm.Daemons[1].Addr(), vm.Daemons[3].Addr())
		if err := waitMembers(vm, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if runsOn(h3, tid) {
			t.Errorf("%v, declared lost, still runs on h3 after its return", tid)
		}
		if hi, _ := hostInfo(m, "h3"); hi.ID != 3 || h3.cfg.HostID != 3 {
			t.Errorf("h3 came back as %v (it thinks %v), want host ID 3", hi.ID, h3.cfg.HostID)
		}
		again := spawnOn(t, m, "h3", idler(t))
		if !runsOn(h3, again) || again.Num() <= tid.Num() {
			t.Errorf("new task %v on the returned host (old %v)", again, tid)
		}
		// The others hold it alive again: nobody accuses it.
		time.Sleep(2 * time.Second)
		if hi, ok := hostInfo(m, "h3"); !ok || hi.Liveness != "alive" {
			t.Errorf("h3 after its return: %+v %v", hi, ok)
		}
		if err := onceAtAll(vm); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSwimIdleMasterHearsNoPings: under swim an idle master receives no
// per-host liveness frames (under the master detector it receives one a
// host a heartbeat), and nobody is deleted; its Detection (conf's line)
// names the detector that runs.
func TestSwimIdleMasterHearsNoPings(t *testing.T) {
	for _, det := range []string{DetectorMaster, DetectorSwim} {
		t.Run(det, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				vm := memberVM(t, 5, &partitions{}, Config{Detector: det})
				m := vm.Master()
				synctest.Wait()
				start := m.nw.pingsIn.Load()
				time.Sleep(2 * time.Second) // 100 heartbeats
				pings := m.nw.pingsIn.Load() - start
				switch det {
				case DetectorSwim:
					if pings != 0 {
						t.Errorf("the idle master received %d pings under swim", pings)
					}
				default:
					if pings < 4*50 {
						t.Errorf("the idle master received %d pings from 4 hosts in 100 heartbeats", pings)
					}
				}
				if len(m.Hosts()) != 5 || m.nw.swimChecks.Load() != 0 {
					t.Errorf("%d hosts, %d checks while idle", len(m.Hosts()), m.nw.swimChecks.Load())
				}
				// conf's line says which detector runs, and its bounds.
				want := map[string]string{DetectorSwim: "the hosts probe each other every 20ms (swim); a host they accuse is checked by the master every 20ms and deleted after 200ms of unanswered checks (a stalled master's late checks do not count, up to 10 of them)",
					DetectorMaster: "a silent host is suspected after 40ms (or its own pace), confirmed dead after 200ms"}[det]
				if x := m.Detection(); x.Detector != det || !strings.HasPrefix(x.String(), want) {
					t.Errorf("detection %q (%s), want %q", x, x.Detector, want)
				}
			})
		})
	}
}

// TestSwimFrameFromAnother: a swim frame whose sender is not its
// connection's host is refused, as is one at a daemon that runs no swim.
func TestSwimFrameFromAnother(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vm := swimVM(t, 3, &partitions{}, Config{})
		h2 := vm.Daemons[1]
		p := &peer{role: pki.RoleDaemon, info: HostInfo{ID: 3, Name: "h3"}}
		b, err := swim.AppendMsg(nil, swim.Msg{Kind: swim.Ping, From: 4, To: 2, Seq: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := h2.receiveSwim(p, b); !errors.Is(err, errForgedSwim) {
			t.Errorf("h3 speaking for h4: %v", err)
		}
		b, _ = swim.AppendMsg(nil, swim.Msg{Kind: swim.Ping, From: 3, To: 2, Seq: 1})
		if err := h2.receiveSwim(p, b); err != nil {
			t.Errorf("h3's own ping: %v", err)
		}
		if err := vm.Master().dispatch(p, routing.Frame{Kind: routing.KindSwim, Body: b}); err == nil {
			t.Error("the master took a swim frame")
		}
		if err := checkDetector("gossip"); !errors.Is(err, ErrDetector) {
			t.Errorf("detector gossip: %v", err)
		}
		if _, err := Start(context.Background(), Config{Listen: "x", Master: true, Detector: "gossip"}); !errors.Is(err, ErrDetector) {
			t.Errorf("start with detector gossip: %v", err)
		}
	})
}

// FuzzSwimFrames gives a host of a swim virtual machine arbitrary
// KindSwim frame bodies as if host 3 had sent them: a body is taken only
// if it parses as a message from host 3 to this host, and nothing panics.
func FuzzSwimFrames(f *testing.F) {
	for _, m := range []swim.Msg{{Kind: swim.Ping, From: 3, To: 2, Seq: 1},
		{Kind: swim.Ack, From: 3, To: 2, Seq: 2, Gossip: []swim.Update{{State: swim.Dead, Host: 4, Inc: 1, From: 3}}},
		{Kind: swim.PingReq, From: 5, To: 2, Target: 4}} {
		b, err := swim.AppendMsg(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{1, 3, 0, 0, 0})
	vm := startMemVM(f, 3, &faults{}, Config{Detector: DetectorSwim})
	h2 := vm.Daemons[1]
	p := &peer{role: pki.RoleDaemon, info: HostInfo{ID: 3, Name: "h3"}}
	f.Fuzz(func(t *testing.T, body []byte) {
		err := h2.receiveSwim(p, body)
		m, perr := swim.ParseMsg(body, swim.MaxGossip)
		if ok := perr == nil && m.From == 3 && m.To == 2; ok != (err == nil) {
			t.Fatalf("body %x: taken %v, want %v (%v)", body, err == nil, ok, err)
		}
	})
}

// TestMismatchRefused: a host whose failure detector or route protocol
// is not the master's is refused at its join, with the flag to fix it,
// either way round (a hello of the master detector names no detector, as
// one from before the swim detector does; a hello of routes on demand
// names none).
func TestMismatchRefused(t *testing.T) {
	for _, c := range []struct {
		flag, master, host string
		set                func(*Config, string)
	}{
		{"--detector", DetectorMaster, DetectorSwim, func(c *Config, v string) { c.Detector = v }},
		{"--detector", DetectorSwim, DetectorMaster, func(c *Config, v string) { c.Detector = v }},
		{"--routes", RoutesDemand, RoutesBroadcast, func(c *Config, v string) { c.Routes = v }},
		{"--routes", RoutesBroadcast, RoutesDemand, func(c *Config, v string) { c.Routes = v }},
	} {
		t.Run(c.flag[2:]+"-"+c.master+"-master", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				net := transport.NewMem(&partitions{}, frameLen)
				mc := Config{Network: net, Heartbeat: 20 * time.Millisecond, RTO: 30 * time.Millisecond}
				c.set(&mc, c.master)
				vm := startVM(t, 1, mc)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				hc := Config{Listen: ":0", Join: vm.Master().Addr(), Credential: hostCred(t, vm, "h9"), Network: net, Output: &syncBuffer{}}
				c.set(&hc, c.host)
				d, err := Start(ctx, hc)
				if err == nil {
					_ = d.Halt(ctx)
					t.Fatalf("a host of %s %s joined a master of %s %s", c.flag, c.host, c.flag, c.master)
				}
				if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.flag) {
					t.Errorf("join: %v", err)
				}
			})
		})
	}
}

// TestSwimSlowHostNotDeleted: a host whose every frame comes 100 ms late
// (frozen, or behind a congested link) fails its peers' 10 ms probes and
// is accused, but answers the master's checks within --dead-after: it is
// not deleted, and its task runs on.
func TestSwimSlowHostNotDeleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &partitions{}
		vm := swimVM(t, 4, p, Config{DeadAfter: time.Second})
		m, h3 := vm.Master(), vm.Daemons[2]
		tid := spawnOn(t, m, "h3", idler(t))
		p.slowDown(h3.Addr(), 100*time.Millisecond)
		time.Sleep(5 * time.Second)
		if m.nw.swimChecks.Load() == 0 {
			t.Fatal("the slow host was never accused: the master checked nobody")
		}
		if _, ok := hostInfo(m, "h3"); !ok || !runsOn(h3, tid) || m.Rollbacks() != 0 {
			t.Errorf("h3 listed %v, its task runs %v, %d rollbacks", ok, runsOn(h3, tid), m.Rollbacks())
		}
		p.slowDown("", 0)
		if err := waitMembers(vm, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := onceAtAll(vm); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSwimDeletedWhileRegisteringRejoins: under swim a host hears nothing
// from the master unless it is asked something, so the end of its
// connection to the master is all that tells it it was deleted. A host
// that learns it was declared dead registers again; the master deletes it
// just as it is taken back, and closes the new connection before the host
// has finished registering. The host must take that loss as any other and
// register again, not run on as a member that the master no longer knows.
func TestSwimDeletedWhileRegisteringRejoins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var vm *LocalVM
		var armed atomic.Bool
		hook := func(point string) {
			if point != "rejoin:registered" || !armed.CompareAndSwap(true, false) {
				return
			}
			m, h2 := vm.Master(), vm.Daemons[1]
			m.removeHost(h2.HostID(), reasonSwimDead+" (the test deletes it as it registers again)")
			// The host reads its connection's end before it is done
			// registering.
			for {
				h2.nw.mu.Lock()
				p := h2.nw.peers[MasterID]
				h2.nw.mu.Unlock()
				if p == nil {
					break
				}
				time.Sleep(time.Millisecond)
			}
			time.Sleep(10 * time.Millisecond)
		}
		vm = swimVM(t, 3, &partitions{}, Config{FaultHook: hook})
		m, h2 := vm.Master(), vm.Daemons[1]
		armed.Store(true)
		// The news that it is dead at its incarnation: it registers again.
		h2.swimFeed(swim.Event{Kind: swim.EvGossip, Update: swim.Update{State: swim.Dead, Host: h2.HostID(), Inc: 0, From: vm.Daemons[2].HostID()}})
		for i := 0; armed.Load(); i++ {
			if i == 1000 {
				t.Fatal("h2 did not register again within 10 s of the news of its death")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if _, ok := hostInfo(m, "h2"); ok {
			t.Fatal("h2 still listed after its deletion")
		}
		if err := waitMembers(vm, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if hi, _ := hostInfo(m, "h2"); hi.ID != h2.HostID() {
			t.Errorf("h2 came back as %v, want host ID %v", hi.ID, h2.HostID())
		}
	})
}

// TestSwimMemberRegisteringAgainIsNotDialled: a host that learns it was
// declared dead registers again while the master still lists it. A
// connection the master dials to it meanwhile (a checkpoint round, a check
// of the referee) would win the tie with the registration's connection
// (attach keeps the one dialled by the smaller ID), and the registration
// would go unanswered, again at every try while the master keeps dialling,
// until the host gave up. The master dials no such connection: the
// registration is answered at once.
func TestSwimMemberRegisteringAgainIsNotDialled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var vm *LocalVM
		var dials atomic.Int32
		var dialErr atomic.Value
		hook := func(point string) {
			if point != "rejoin:admitted" {
				return
			}
			dials.Add(1)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := vm.Master().peerFor(ctx, vm.Daemons[1].HostID())
			dialErr.Store(fmt.Sprint(err))
		}
		vm = swimVM(t, 3, &partitions{}, Config{FaultHook: hook})
		m, h2 := vm.Master(), vm.Daemons[1]
		// The news that it is dead at its incarnation: it registers again,
		// and the master, which never deleted it, still lists it.
		h2.swimFeed(swim.Event{Kind: swim.EvGossip, Update: swim.Update{State: swim.Dead, Host: h2.HostID(), Inc: 0, From: vm.Daemons[2].HostID()}})
		for i := 0; dials.Load() == 0 || h2.orphan.Load(); i++ {
			if i == 1000 {
				t.Fatalf("h2 not registered again within 10 s of the news of its death (%d registrations)", dials.Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if n := dials.Load(); n != 1 {
			t.Errorf("h2 registered %d times, want once", n)
		}
		if err, _ := dialErr.Load().(string); !strings.Contains(err, "registering again") {
			t.Errorf("the master's dial during the registration: %s, want it refused as registering again", err)
		}
		if err := waitMembers(vm, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if hi, _ := hostInfo(m, "h2"); hi.ID != h2.HostID() {
			t.Errorf("h2 is %v, want host ID %v", hi.ID, h2.HostID())
		}
	})
}

// TestSwimReportsToASlowMasterDoNotPileUp: a host reports to the master
// one call at a time for each host it reports on. Fifty reports about one
// host, made while the master is slow to answer, cost two calls — the
// first, and the newest once it has been answered — not fifty calls under
// way at once (a 64-host VM under load once held 12,000 such calls, and
// the master's handlers of them queued on its network lock).
func TestSwimReportsToASlowMasterDoNotPileUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &partitions{}
		// Probes and the master's checks time out after a heartbeat, well
		// past the slowed master's answers.
		vm := swimVM(t, 3, p, Config{Heartbeat: time.Second, DeadAfter: 10 * time.Second})
		if err := waitMembers(vm, time.Minute); err != nil {
			t.Fatal(err)
		}
		m, h2 := vm.Master(), vm.Daemons[1]
		const reports, about = 50, task.HostID(999) // no member: the master's referee takes no step for it
		before := h2.sw.reportCalls.Load()
		p.slowDown(m.Addr(), 200*time.Millisecond)
		effs := make([]swim.Effect, reports)
		for i := range effs {
			effs[i] = swim.Effect{Kind: swim.EffReport, Update: swim.Update{State: swim.Suspect, Host: about, Inc: uint32(i), From: h2.HostID()}}
		}
		h2.swimPerform(effs)
		h2.sw.mu.Lock()
		next := h2.sw.reports[about]
		waiting := next != nil && next.Inc == reports-1
		h2.sw.mu.Unlock()
		if !waiting {
			t.Fatalf("after %d reports the newest does not wait for the first's call", reports)
		}
		// Ten times the two calls' worth of virtual time.
		time.Sleep(5 * time.Second)
		h2.sw.mu.Lock()
		left := len(h2.sw.reports)
		h2.sw.mu.Unlock()
		if left != 0 {
			t.Fatalf("reports about %d hosts still wait after %d calls", left, h2.sw.reportCalls.Load()-before)
		}
		if got := h2.sw.reportCalls.Load() - before; got != 2 {
			t.Errorf("%d reports made %d calls to the master, want 2", reports, got)
		}
	})
}
