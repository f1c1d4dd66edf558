package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

var memberSeeds = flag.Int("member-seeds", 10, "how many seeds TestSimMembership runs")

// partitions is a Shaper that cuts the network between chosen pairs of
// endpoints — a connection carrying a unit across a cut breaks, as a QUIC
// connection does once its peer stays silent, and new ones break at their
// first unit — and can delay everything to and from one endpoint (an
// overloaded daemon that hears and answers late).
type partitions struct {
	mu      sync.Mutex
	apart   map[[2]string]bool
	slow    string
	delay   time.Duration
	cutN    atomic.Int64
	delayed atomic.Int64
}

func pairKey(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// split cuts a from each of bs (heal: mends them).
func (p *partitions) split(heal bool, a string, bs ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.apart == nil {
		p.apart = map[[2]string]bool{}
	}
	for _, b := range bs {
		if heal {
			delete(p.apart, pairKey(a, b))
		} else {
			p.apart[pairKey(a, b)] = true
		}
	}
}

func (p *partitions) slowDown(addr string, d time.Duration) {
	p.mu.Lock()
	p.slow, p.delay = addr, d
	p.mu.Unlock()
}

func (p *partitions) Shape(u transport.Unit) transport.Decision {
	var d transport.Decision
	if len(u.Data) > 4 && routing.Kind(u.Data[4]) == routing.KindStream {
		d.Raw = true // a checkpoint's bytes follow
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.apart[pairKey(u.From, u.To)] {
		d.Cut = true
		p.cutN.Add(1)
		return d
	}
	if p.delay > 0 && (u.From == p.slow || u.To == p.slow) {
		d.Delay = p.delay
		p.delayed.Add(1)
	}
	return d
}

// ringExpect is the sum ringRoot prints for n workers and laps laps.
func ringExpect(n, laps int) int64 {
	seed := make([]int64, n)
	hops := make([]int, n)
	for i := range seed {
		seed[i] = int64(i + 1)
	}
	var sum int64
	for range laps {
		for i := range n {
			hops[i]++
			seed[i] = seed[i]*6364136223846793005 + 1442695040888963407
			sum += seed[i]>>40 + int64(hops[i])
		}
	}
	return sum
}

// memberShape is one partition scenario of TestSimMembership.
type memberShape struct {
	name string
	// deletes: the hosts cut off stay away past deletion.
	deletes bool
	run     func(s *memberRun)
}

type memberRun struct {
	t  *testing.T
	vm *LocalVM
	p  *partitions
	r  uint64 // the seed's random state
}

func (s *memberRun) rand(n int) int {
	s.r = s.r*6364136223846793005 + 1442695040888963407
	return int(s.r>>33) % n
}

// addrs are the addresses of the non-master daemons i (1-based indexes
// into vm.Daemons).
func (s *memberRun) addrs(is ...int) []string {
	var out []string
	for _, i := range is {
		out = append(out, s.vm.Daemons[i].Addr())
	}
	return out
}

var memberShapes = []memberShape{
	{name: "one host from the master, shorter than suspicion", run: func(s *memberRun) {
		h := 1 + s.rand(len(s.vm.Daemons)-1)
		s.p.split(false, s.vm.Master().Addr(), s.addrs(h)...)
		time.Sleep(30 * time.Millisecond)
		s.p.split(true, s.vm.Master().Addr(), s.addrs(h)...)
	}},
	{name: "one host from the master, past deletion", deletes: true, run: func(s *memberRun) {
		h := 1 + s.rand(len(s.vm.Daemons)-1)
		s.p.split(false, s.vm.Master().Addr(), s.addrs(h)...)
		time.Sleep(time.Duration(1000+s.rand(1000)) * time.Millisecond)
		s.p.split(true, s.vm.Master().Addr(), s.addrs(h)...)
	}},
	{name: "the master from half of the hosts, past deletion", deletes: true, run: func(s *memberRun) {
		n := len(s.vm.Daemons) - 1
		first := s.rand(n)
		var half []int
		for i := range n / 2 {
			half = append(half, 1+(first+i)%n)
		}
		s.p.split(false, s.vm.Master().Addr(), s.addrs(half...)...)
		time.Sleep(time.Duration(1000+s.rand(1000)) * time.Millisecond)
		s.p.split(true, s.vm.Master().Addr(), s.addrs(half...)...)
	}},
	{name: "a flapping link between a host and the master", deletes: true, run: func(s *memberRun) {
		h := 1 + s.rand(len(s.vm.Daemons)-1)
		for range 8 {
			s.p.split(false, s.vm.Master().Addr(), s.addrs(h)...)
			time.Sleep(time.Duration(20+s.rand(400)) * time.Millisecond)
			s.p.split(true, s.vm.Master().Addr(), s.addrs(h)...)
			time.Sleep(time.Duration(20+s.rand(200)) * time.Millisecond)
		}
	}},
	{name: "an overloaded master: everything to and from it late", run: func(s *memberRun) {
		s.p.slowDown(s.vm.Master().Addr(), time.Duration(150+s.rand(150))*time.Millisecond)
		time.Sleep(time.Second)
		s.p.slowDown("", 0)
	}},
	{name: "one host from everyone, past deletion", deletes: true, run: func(s *memberRun) {
		h := 1 + s.rand(len(s.vm.Daemons)-1)
		var others []string
		for i, d := range s.vm.Daemons {
			if i != h {
				others = append(others, d.Addr())
			}
		}
		s.p.split(false, s.vm.Daemons[h].Addr(), others...)
		time.Sleep(time.Duration(1500+s.rand(1000)) * time.Millisecond)
		s.p.split(true, s.vm.Daemons[h].Addr(), others...)
	}},
}

// TestSimMembership runs a checkpointed job (a ring of workers on every
// host) on daemons on transport.Mem under a virtual clock, and partitions
// the network in a shape chosen by the seed: one host from the master,
// shorter than suspicion or past deletion; the master from half of the
// hosts; a flapping link; an overloaded master that hears and answers
// late; one host from everyone past deletion (the shape in which the
// swim detector's hosts accuse it). Throughout, no task runs on two members at once (a member: a
// host the master counts, announced, and not itself looking for its
// master); once the network heals, every host is a member again, alive in
// the master's eyes, no task runs on two hosts at all, and the job ends
// with the result of an uninterrupted run (rolled back if hosts were
// deleted, never if none was). -detector picks the failure detector, as
// for TestSim.
func TestSimMembership(t *testing.T) {
	const workers, laps = 8, 20
	want := fmt.Sprintf("sum %d", ringExpect(workers, laps))
	for seed := range *memberSeeds {
		shape := memberShapes[seed%len(memberShapes)]
		t.Run(fmt.Sprintf("%d/%s", seed, shape.name), func(t *testing.T) {
			dir := t.TempDir()
			synctest.Test(t, func(t *testing.T) {
				p := &partitions{}
				out := &syncBuffer{}
				vm := startVM(t, 5, Config{Network: transport.NewMem(p, frameLen), Output: out, SharedDir: dir, Detector: *simDet,
					Heartbeat: 20 * time.Millisecond, DeadAfter: 200 * time.Millisecond, MasterGrace: time.Minute,
					RTO: 30 * time.Millisecond, MoveTimeout: time.Second})
				m := vm.Master()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				job, root, err := m.StartJob(ctx, &ringRoot{N: workers, Laps: laps}, JobOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if got := <-ringMid; got != root {
					t.Fatalf("ring root %v, want %v", got, root)
				}
				if _, err := m.CheckpointJob(ctx, job, ""); err != nil {
					t.Fatal(err)
				}
				js, err := m.job(job)
				if err != nil {
					t.Fatal(err)
				}

				// The invariant, checked every 5 ms of virtual time while
				// the network is partitioned and heals.
				stop := make(chan struct{})
				var stopOnce sync.Once
				halt := func() { stopOnce.Do(func() { close(stop) }) }
				defer halt()
				checked := make(chan error, 1)
				go func() {
					var err error
					for err == nil {
						select {
						case <-stop:
							checked <- nil
							return
						case <-time.After(5 * time.Millisecond):
						}
						err = onceAmongMembers(vm)
					}
					checked <- err
				}()

				s := &memberRun{t: t, vm: vm, p: p, r: uint64(seed)*0x9e3779b97f4a7c15 + 7}
				shape.run(s)

				// Healed: every host becomes a member again.
				if err := waitMembers(vm, 30*time.Second); err != nil {
					t.Fatalf("%v (cuts %d, delayed %d)", err, p.cutN.Load(), p.delayed.Load())
				}
				// The job goes on (its root, restored by a rollback,
				// waits halfway again) and ends with the right sum.
				done := make(chan error, 1)
				go func() {
					info, err := m.waitJob(ctx, js)
					if err == nil && info.Status != 0 {
						err = fmt.Errorf("root ended %v status %d: %s", info.State, info.Status, info.Err)
					}
					done <- err
				}()
				poke(t, m, root)
			wait:
				for {
					// ringMid is not the bubble's: poll it, so that the
					// virtual clock runs meanwhile.
					select {
					case r := <-ringMid:
						poke(t, m, r)
					case err := <-done:
						if err != nil {
							t.Fatalf("job: %v\n%s", err, out)
						}
						break wait
					default:
						time.Sleep(10 * time.Millisecond)
					}
				}
				halt()
				if err := <-checked; err != nil {
					t.Fatal(err)
				}
				if err := onceAtAll(vm); err != nil {
					t.Fatal(err)
				}
				sums := ringSum.FindAllString(out.String(), -1)
				if len(sums) != 1 || !strings.HasSuffix(sums[0], want) {
					t.Fatalf("results %q, want one %q", sums, want)
				}
				if rb := m.Rollbacks(); !shape.deletes && rb != 0 {
					t.Errorf("%d rollbacks where no host was deleted", rb)
				}
				t.Logf("%d rollbacks, %d units cut, %d delayed", m.Rollbacks(), p.cutN.Load(), p.delayed.Load())
			})
		})
	}
}

// members are the daemons that count as members of the virtual machine:
// known to the master and announced, and not themselves looking for their
// master.
func members(vm *LocalVM) []*Daemon {
	m := vm.Master()
	n := m.nw
	n.mu.Lock()
	in := map[task.HostID]bool{}
	for id := range n.hosts {
		if !n.mem.pending[id] {
			in[id] = true
		}
	}
	n.mu.Unlock()
	var out []*Daemon
	for _, d := range vm.Daemons {
		if in[d.cfg.HostID] && !d.orphan.Load() {
			out = append(out, d)
		}
	}
	return out
}

// onceOn checks that no task runs on two of ds.
func onceOn(ds []*Daemon) error {
	on := map[task.TID]string{}
	for _, d := range ds {
		d.ht.mu.Lock()
		for tid := range d.ht.tasks {
			if other, ok := on[tid]; ok {
				d.ht.mu.Unlock()
				return fmt.Errorf("%v runs on %s and on %s", tid, other, d.Name())
			}
			on[tid] = d.Name()
		}
		d.ht.mu.Unlock()
	}
	return nil
}

func onceAmongMembers(vm *LocalVM) error { return onceOn(members(vm)) }
func onceAtAll(vm *LocalVM) error        { return onceOn(vm.Daemons) }

// outsiders describes the daemons of vm that are not among ms: host ID,
// whether they look for a master, and why they stopped if they did.
func outsiders(vm *LocalVM, ms []*Daemon) string {
	var b strings.Builder
	for _, d := range vm.Daemons {
		if slices.Contains(ms, d) || d.cfg.Master {
			continue
		}
		var stopped error
		select {
		case <-d.Done():
			stopped = d.Err()
		default:
		}
		fmt.Fprintf(&b, "[%s %v orphan %v stopped %v]", d.Name(), d.HostID(), d.orphan.Load(), stopped)
	}
	return b.String()
}

// waitMembers waits until every daemon is a member, alive in the master's
// eyes, and connected to it.
func waitMembers(vm *LocalVM, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		ms := members(vm)
		alive := 0
		var seen []string
		for _, h := range vm.Master().Hosts() {
			if h.Liveness == "alive" {
				alive++
			}
			seen = append(seen, h.Name+":"+h.Liveness)
		}
		if len(ms) == len(vm.Daemons) && alive == len(vm.Daemons) {
			return nil
		}
		if time.Now().After(deadline) {
			var names []string
			for _, d := range ms {
				names = append(names, d.Name())
			}
			return fmt.Errorf("after %v the members are %v (%v), want all %d daemons alive; the others: %s", limit, names, seen, len(vm.Daemons), outsiders(vm, ms))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var stormHosts = flag.Int("storm-hosts", 128, "how many daemons TestJoinStorm starts at once")

// TestJoinStorm starts a master and -storm-hosts daemons at once on
// transport.Mem, under a virtual clock, with a master that admits 100
// registrations a second, 16 at once: the rest are told to come back
// later and do, after the master's hint and a jittered backoff. Every
// daemon joins, none is deleted or gives up, the machine forms no faster
// than the admission rate allows, and a spawn reaches every host.
func TestJoinStorm(t *testing.T) {
	n := *stormHosts
	if testing.Short() {
		n = 64
	}
	const rate, burst = 100, 16
	synctest.Test(t, func(t *testing.T) {
		cl, err := pki.NewCluster(time.Now(), MasterID.String(), "admin")
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{Network: transport.NewMem(nil, frameLen), Secret: cl.Secret, Listen: "127.0.0.1:0",
			Heartbeat: 20 * time.Millisecond, DeadAfter: 200 * time.Millisecond, JoinRate: rate, JoinBurst: burst}
		mc := cfg
		mc.Master, mc.Credential = true, cl.Master
		start := time.Now()
		m, err := Start(context.Background(), mc)
		if err != nil {
			t.Fatal(err)
		}
		ds := make([]*Daemon, n-1)
		errs := make([]error, n-1)
		var wg sync.WaitGroup
		for i := range ds {
			c := cfg
			c.Join = m.Addr()
			if c.Credential, err = cl.Host(task.HostID(i + 2).String()); err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ds[i], errs[i] = Start(context.Background(), c)
			}()
		}
		wg.Wait()
		formed := time.Since(start)
		defer func() {
			m.stopping(task.ErrHalted)
			for _, d := range ds {
				if d != nil {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_ = d.Halt(ctx)
					cancel()
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = m.Halt(ctx)
			cancel()
		}()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("daemon %d of %d: %v", i+2, n, err)
			}
		}
		// Let the machine run a while: nobody alive is deleted.
		time.Sleep(2 * time.Second)
		hosts := m.Hosts()
		if len(hosts) != n {
			t.Fatalf("the master lists %d hosts, want %d", len(hosts), n)
		}
		for _, h := range hosts {
			if h.Liveness != "alive" {
				t.Errorf("%s is %s", h.Name, h.Liveness)
			}
		}
		for _, d := range ds {
			select {
			case <-d.Done():
				t.Fatalf("%s stopped: %v", d.Name(), d.Err())
			default:
			}
		}
		if least := time.Duration(float64(n-1-burst) / rate * float64(time.Second)); formed < least {
			t.Errorf("%d daemons joined in %v, faster than the admission rate allows (%v)", n-1, formed, least)
		}
		tids, err := m.spawnAnywhere(context.Background(), 0, 0, task.SpawnRequest{Type: "daemon.test.ringworker", Count: n})
		if err != nil || len(tids) != n {
			t.Fatalf("spawn over %d hosts: %d tasks, %v", n, len(tids), err)
		}
		on := map[task.HostID]bool{}
		for _, tid := range tids {
			on[m.routeHost(tid)] = true
		}
		if len(on) != n {
			t.Errorf("the spawn reached %d hosts, want %d", len(on), n)
		}
		t.Logf("%d daemons formed a virtual machine in %v of virtual time", n, formed.Round(time.Millisecond))
	})
}

// memberVM starts n daemons on a Mem network cut by p, with fast
// heartbeats.
func memberVM(t *testing.T, n int, p *partitions, cfg Config) *LocalVM {
	t.Helper()
	cfg.Network = transport.NewMem(p, frameLen)
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 20 * time.Millisecond
	}
	if cfg.DeadAfter == 0 {
		cfg.DeadAfter = 200 * time.Millisecond
	}
	cfg.MasterGrace = time.Minute
	cfg.RTO = 30 * time.Millisecond
	return startVM(t, n, cfg)
}

// spawnOn starts one task t on the named host (master).
func spawnOn(t testing.TB, m *Daemon, host string, v task.Task) task.TID {
	t.Helper()
	typ, state, err := task.EncodeState(v)
	if err != nil {
		t.Fatal(err)
	}
	tids, err := m.spawnAnywhere(context.Background(), 0, 0, task.SpawnRequest{Type: typ, State: state, Count: 1, Host: host})
	if err != nil || len(tids) != 1 {
		t.Fatalf("spawn on %s: %v %v", host, tids, err)
	}
	return tids[0]
}

// idler waits for a word, at safe points.
func idler(t *testing.T) task.Task {
	return fn(t, func(c *task.Ctx, _ int) error {
		_, err := c.Recv(task.AnyTask, 1, nil, task.Safe())
		return err
	})
}

// runsOn reports whether d hosts tid.
func runsOn(d *Daemon, tid task.TID) bool {
	d.ht.mu.Lock()
	defer d.ht.mu.Unlock()
	_, ok := d.ht.tasks[tid]
	return ok
}

// hostInfo is the master's entry for the named host.
func hostInfo(m *Daemon, name string) (HostInfo, bool) {
	for _, h := range m.Hosts() {
		if h.Name == name {
			return h, true
		}
	}
	return HostInfo{}, false
}

// TestSuspectedHostShown: a host cut off from the master for longer than
// suspicion but shorter than deletion is listed as suspected, with its
// silence, and counted in the master's Detection; a rollback would restore
// nothing on it.
// Heard again, it is alive, with its tasks: nothing was lost, nothing
// restarted. (The master detector's: under swim a host cut off from the
// master alone is heard by its peers, and TestSwimHostsApartNotDeleted
// shows an accused host suspected.)
func TestSuspectedHostShown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &partitions{}
		vm := memberVM(t, 3, p, Config{DeadAfter: 10 * time.Second, Detector: DetectorMaster})
		m, h3 := vm.Master(), vm.Daemons[2]
		tid := spawnOn(t, m, "h3", idler(t))
		p.split(false, m.Addr(), h3.Addr())
		time.Sleep(300 * time.Millisecond)
		hi, ok := hostInfo(m, "h3")
		if !ok || hi.Liveness != "suspected" || hi.SilentMS < 100 {
			t.Fatalf("h3 cut off for 300ms: %+v", hi)
		}
		if x := m.Detection(); x.Suspected != 1 || x.DeadNow != 10*time.Second || !strings.Contains(x.String(), "1 suspected now") {
			t.Errorf("detection %+v: %v", x, x)
		}
		for _, h := range m.restorable() {
			if h.ID == h3.cfg.HostID {
				t.Errorf("a rollback may restore tasks on the suspected host: %v", m.restorable())
			}
		}
		p.split(true, m.Addr(), h3.Addr())
		if err := waitMembers(vm, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if !runsOn(h3, tid) || h3.cfg.HostID != 3 || m.Rollbacks() != 0 {
			t.Errorf("after the heal: %v on h3 %v, h3's ID %v, %d rollbacks", tid, runsOn(h3, tid), h3.cfg.HostID, m.Rollbacks())
		}
		if err := onceAtAll(vm); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRejoinAfterDeletion: a host cut off past deletion loses its task (of
// no checkpointed job): its watcher is told it exited, lost with its host.
// When the network heals, the host registers again under its host ID,
// having stopped that task first; it runs new tasks, numbered after the
// old. (The master detector's: TestSwimPartitionedHostRejoins is its
// counterpart under swim, where a host is cut off from everyone.)
func TestRejoinAfterDeletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &partitions{}
		vm := memberVM(t, 3, p, Config{Detector: DetectorMaster})
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
		p.split(false, m.Addr(), h3.Addr())
		var n task.Notice
		select {
		case n = <-notices:
		case <-time.After(10 * time.Second):
			t.Fatal("no exit notice for the task of the lost host")
		}
		if n.TID != tid || n.Status != -1 || !strings.Contains(n.Err, "lost with its host") {
			t.Errorf("notice %+v", n)
		}
		if _, ok := hostInfo(m, "h3"); ok {
			t.Fatal("h3 still listed after its deletion")
		}
		if !runsOn(h3, tid) {
			t.Fatal("h3, cut off, stopped its task before it could learn of its deletion")
		}
		p.split(true, m.Addr(), h3.Addr())
		if err := waitMembers(vm, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if runsOn(h3, tid) {
			t.Errorf("%v, declared lost, still runs on h3 after its return", tid)
		}
		hi, _ := hostInfo(m, "h3")
		if hi.ID != 3 || h3.cfg.HostID != 3 {
			t.Errorf("h3 came back as %v (it thinks %v), want host ID 3", hi.ID, h3.cfg.HostID)
		}
		again := spawnOn(t, m, "h3", idler(t))
		if !runsOn(h3, again) || again.Host() != 3 || again.Num() <= tid.Num() {
			t.Errorf("new task %v on the returned host (old %v)", again, tid)
		}
		if err := onceAtAll(vm); err != nil {
			t.Fatal(err)
		}
	})
}

// TestStaleRegistrationReplaced: a registration whose connection is gone
// (its daemon gave up waiting for the answer, or restarted) is replaced by
// the same host's new one; a host still connected is not.
func TestStaleRegistrationReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vm := memberVM(t, 2, &partitions{}, Config{})
		m := vm.Master()
		h := &hello{Name: "h7", Addr: "mem:77", Info: HostInfo{Build: ThisBuild()}}
		first, err := m.admit(h, "mem:77")
		if err != nil {
			t.Fatal(err)
		}
		again, err := m.admit(h, "mem:77")
		if err != nil || again.ID == first.ID {
			t.Fatalf("the same host registering again without a connection: %v, %v (first %v)", again.ID, err, first.ID)
		}
		if _, ok := hostInfo(m, "h7"); !ok || len(m.Hosts()) != 3 {
			t.Fatalf("hosts %v", m.Hosts())
		}
		if _, err := m.admit(&hello{Name: "h2", Addr: "mem:78", Info: HostInfo{Build: ThisBuild()}}, "mem:78"); err == nil || !strings.Contains(err.Error(), "already in the virtual machine") {
			t.Fatalf("a connected host's name taken again: %v", err)
		}
	})
}

// TestHaltDialsNothing: a host halting after its master's connection has
// ended (a whole machine's halt stops the master first) reports its tasks'
// exits over the connections it has and dials nothing. Before, each exit
// report dialled the master again and waited the handshake timeout for
// it: a host of the scale benchmark took 100 s to halt.
func TestHaltDialsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &partitions{}
		vm := memberVM(t, 2, p, Config{})
		m, h2 := vm.Master(), vm.Daemons[1]
		for range 3 {
			spawnOn(t, m, "h2", idler(t))
		}
		p.slowDown(m.Addr(), time.Hour) // a dial to the master is never answered
		h2.stopping(task.ErrHalted)
		h2.nw.mu.Lock()
		mp := h2.nw.master
		h2.nw.mu.Unlock()
		mp.close(errors.New("the master is gone"))
		synctest.Wait()
		before := p.delayed.Load() // units to or from the master from now on: a dial
		if err := h2.Halt(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := p.delayed.Load() - before; n != 0 {
			t.Fatalf("the halting host sent %d units to its master over a new connection", n)
		}
		if _, err := h2.peerFor(context.Background(), MasterID); !errors.Is(err, ErrNotConnected) {
			t.Fatalf("a halted host dialled the master: %v", err)
		}
	})
}

// TestPendingHostLeftAlone: while a host registers again after its
// deletion (pending until it says it stopped its tasks), the master dials
// it for nothing, and takes none of its jobs from a load report it sent
// before. Before, a checkpoint round of a job the host had run dialled it
// between its admission and its attachment; the master's connection won
// the tie between the two, the registration's was closed, and the host,
// registering again and again, stayed "rejoining".
func TestPendingHostLeftAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vm := memberVM(t, 3, &partitions{}, Config{})
		m := vm.Master()
		m.nw.mu.Lock()
		p := m.nw.peers[3]
		delete(m.nw.peers, 3)
		m.nw.mem.pending[3] = true
		m.nw.mu.Unlock()
		if _, err := m.peerFor(context.Background(), 3); !errors.Is(err, ErrNotConnected) {
			t.Fatalf("the master reached a host registering again: %v", err)
		}
		if err := m.handleEvent(p, &event{Kind: evLoad, Load: &HostInfo{Tasks: 1}, Jobs: []uint64{7}}); err != nil {
			t.Fatal(err)
		}
		m.reg.mu.Lock()
		jobs := m.reg.hostJobs[3]
		m.reg.mu.Unlock()
		if jobs[7] {
			t.Fatalf("a report of a host registering again put job 7 on it: %v", jobs)
		}
	})
}
