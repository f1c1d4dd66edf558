package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/daemon/metrics"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// forgeFrame sends a raw frame from daemon from to host to over from's
// own connection (authenticated with from's host certificate), then a
// no-op call on it: frames on a connection are handled in order, so when
// forgeFrame returns the receiver has handled the frame. It reports the
// call's error (the receiver may have closed the connection).
func forgeFrame(t *testing.T, from *Daemon, to task.HostID, k routing.Kind, body []byte) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := from.peerFor(ctx, to)
	if err != nil {
		t.Fatal(err)
	}
	p.frame(k, body)
	return from.callPeer(ctx, p, mSendCheck, nil, nil)
}

// forgeEvent sends event e from daemon from to the master (forgeFrame).
func forgeEvent(t *testing.T, from *Daemon, e *event) {
	t.Helper()
	b, err := encodeMsg(e)
	if err != nil {
		t.Fatal(err)
	}
	if err := forgeFrame(t, from, MasterID, routing.KindEvent, b); err != nil {
		t.Fatal(err)
	}
}

// falseReport has host h say in a load report that it runs tasks of the
// jobs own and victim, until master m has taken it: m handles the report
// after forgeEvent returns, and h's own reports (after a start) may come
// after it and overwrite it.
func falseReport(t *testing.T, ctx context.Context, m, h *Daemon, own, victim uint64) {
	t.Helper()
	waitFor(t, ctx, "the master to take "+h.cfg.Name+"'s false report", func() bool {
		if m.reg.runs(h.cfg.HostID, victim) {
			return true
		}
		forgeEvent(t, h, &event{Kind: evLoad, Load: &HostInfo{Name: h.cfg.Name}, Jobs: []uint64{own, victim}})
		return false
	})
}

// reportNames reports whether daemon d's last load report names job.
func reportNames(d *Daemon, job uint64) bool {
	d.rep.mu.Lock()
	defer d.rep.mu.Unlock()
	return slices.Contains(d.rep.last.jobs, job)
}

// forgedCount is daemon d's dpvm_forged_claims_total, all labels.
func forgedCount(t *testing.T, d *Daemon) float64 {
	t.Helper()
	fams, err := d.met.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, f := range fams {
		if f.GetName() == metrics.Namespace+"_forged_claims_total" {
			for _, m := range f.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// forgedKinds adds daemon d's dpvm_forged_claims_total to by, by kind.
func forgedKinds(t *testing.T, d *Daemon, by map[string]float64) {
	t.Helper()
	fams, err := d.met.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != metrics.Namespace+"_forged_claims_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" {
					by[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
}

// waitKnown waits until daemon d knows host h (the master's broadcast
// of it has arrived).
func waitKnown(t testing.TB, ctx context.Context, d *Daemon, h task.HostID) {
	t.Helper()
	for !d.hostKnown(h) {
		select {
		case <-ctx.Done():
			t.Fatalf("%s never heard of %v", d.cfg.Name, h)
		case <-time.After(time.Millisecond):
		}
	}
}

// startFn starts body as a task on daemon d, placed there by the
// master m.
func startFn(t *testing.T, m, d *Daemon, body func(c *task.Ctx, arg int) error) task.TID {
	t.Helper()
	return spawnOn(t, m, d.cfg.Name, fn(t, body))
}

// TestForgedClaimsAreRefused: over the in-memory network, host h3 sends,
// on its own authenticated connections, frames that claim tasks of other
// hosts: a message from a task of h2, an acknowledgement and a refusal
// for a task of the master, an exit, an output line, a barrier arrival
// and a group call for a task of h2. Each is refused, logged and counted,
// and changes nothing: the victim receives the real message (which the
// forged one, taken, would have made a duplicate), the sender's window
// stays taken, the route stays, the task stays in its group, the job's
// output is clean.
func TestForgedClaimsAreRefused(t *testing.T) {
	var logs syncBuffer
	vm := startMemVM(t, 3, &faults{}, Config{
		MailboxHigh: 1 << 10, // a receiver that does not read holds its acknowledgements
		Metrics:     metrics.New(metrics.Options{NoRuntime: true}),
		Logger:      slog.New(slog.NewTextHandler(&logs, nil)),
	})
	m, h2, h3 := vm.Daemons[0], vm.Daemons[1], vm.Daemons[2]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The victim, on the master, reports what it receives.
	got := make(chan string, 8)
	victim := startFn(t, m, m, func(c *task.Ctx, _ int) error {
		for {
			var s string
			st, err := c.Recv(task.AnyTask, 1, &s)
			if err != nil {
				return err
			}
			got <- st.From.String() + " " + s
		}
	})
	// A task of h2, in group "g", which sends to the victim when told.
	goAhead := make(chan struct{})
	joined := make(chan error, 1)
	sender := startFn(t, m, h2, func(c *task.Ctx, _ int) error {
		_, err := c.Join("g")
		joined <- err
		select {
		case <-goAhead:
		case <-c.Context().Done():
			return c.Context().Err()
		}
		if err := c.Send(victim, 1, "real"); err != nil {
			return err
		}
		var x int
		_, err = c.Recv(task.AnyTask, 99, &x) // until the test ends
		return err
	})
	if err := <-joined; err != nil {
		t.Fatal(err)
	}

	// A message "from" h2's task.
	p, err := task.Encode("forged")
	if err != nil {
		t.Fatal(err)
	}
	body := routing.AppendEnvelope(nil, &routing.Envelope{From: sender, To: victim, Seq: 1, Tag: 1, Body: p})
	if err := forgeFrame(t, h3, MasterID, routing.KindMsgs, body); err != nil {
		t.Fatal(err)
	}
	close(goAhead)
	if s := <-got; s != sender.String()+" real" {
		t.Fatalf("the victim received %q first, want the real message of %v", s, sender)
	}

	// An exit, a barrier arrival and a group call for h2's task.
	forgeEvent(t, h3, &event{Kind: evExited, TID: sender})
	forgeEvent(t, h3, &event{Kind: evBarrier, Group: "g", TIDs: []task.TID{sender}, Count: 1})
	if ms := m.groups.memberships(sender); len(ms) != 1 || !strings.HasSuffix(ms[0].Group, "g") {
		t.Fatalf("after a forged exit, %v is in groups %+v, want g", sender, ms)
	}
	pm, err := h3.peerFor(ctx, MasterID)
	if err != nil {
		t.Fatal(err)
	}
	if err := h3.callPeer(ctx, pm, mJoin, groupArgs{Group: "other", TID: sender}, nil); !errors.Is(err, ErrForbidden) {
		t.Fatalf("a group call for another host's task: %v, want ErrForbidden", err)
	}
	if ms := m.groups.memberships(sender); len(ms) != 1 {
		t.Fatalf("after a refused join, %v is in groups %+v", sender, ms)
	}

	// Output into a job: for a task of h2, and for a task of h3 in a job
	// h3 runs no task of.
	var out syncBuffer
	const job = 4242
	m.reg.setOutput(job, &out)
	mine := startFn(t, m, h3, waitPoked)
	forgeEvent(t, h3, &event{Kind: evOutput, Job: job, TID: sender, Output: []byte("forged for h2's task\n")})
	forgeEvent(t, h3, &event{Kind: evOutput, Job: job, TID: mine, Output: []byte("forged into another job\n")})
	// h3 now runs a task of the job. It must really run one: h3's load
	// reports replace the master's record of the jobs it runs, so a job
	// recorded at the master behind h3's back is forgotten at h3's next
	// report (the report that mine's start triggers may come after). A
	// report taken before the task started may still be on its way after
	// the start's answer: wait for one that names the job, queued (in
	// order) before the forged frame that follows.
	typ, state, err := task.EncodeState(fn(t, waitPoked))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.spawnAnywhere(ctx, 0, job, task.SpawnRequest{Type: typ, State: state, Count: 1, Host: h3.cfg.Name}); err != nil {
		t.Fatal(err)
	}
	for !reportNames(h3, job) {
		select {
		case <-ctx.Done():
			t.Fatalf("h3 never reported running job %d", job)
		case <-time.After(time.Millisecond):
		}
	}
	forgeEvent(t, h3, &event{Kind: evOutput, Job: job, TID: mine, Output: []byte("mine\n")})
	if s := out.String(); s != "mine\n" {
		t.Fatalf("the job's output: %q, want only h3's own task's line", s)
	}

	waitKnown(t, ctx, h2, h3.cfg.HostID)
	// An acknowledgement for the victim's messages, which the master
	// holds back while the victim does not read: h2's window for it stays
	// taken. And a refusal saying the victim moved to h3.
	if err := m.Kill(victim); err != nil {
		t.Fatal(err)
	}
	hold := startFn(t, m, m, waitPoked)
	sent := make(chan error, 1)
	big := startFn(t, m, h2, func(c *task.Ctx, _ int) error {
		err := c.Send(hold, 1, bytes.Repeat([]byte{7}, 4<<10))
		sent <- err
		return err
	})
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	pending := func() int {
		h2.rt.mu.Lock()
		defer h2.rt.mu.Unlock()
		return h2.rt.outbox.Pending(hold)
	}
	held := pending() // bytes; the master acknowledges none while hold does not read
	if held == 0 {
		t.Fatalf("h2 holds nothing for %v", hold)
	}
	acks := routing.AppendAck(nil, routing.Ack{From: big, To: hold, Seq: 1})
	if err := forgeFrame(t, h3, h2.cfg.HostID, routing.KindAcks, acks); err != nil {
		t.Fatal(err)
	}
	if n := pending(); n != held {
		t.Fatalf("after forged acknowledgements h2 holds %d bytes for %v, want %d", n, hold, held)
	}
	// A person's calls: refused from a host.
	for _, method := range []string{mHalt, mDelete, mKillJob} {
		if err := h3.callPeer(ctx, pm, method, hostArgs{Host: "h2"}, nil); !errors.Is(err, ErrForbidden) {
			t.Fatalf("a host calling %s: %v, want ErrForbidden", method, err)
		}
	}
	if !m.hostKnown(h2.cfg.HostID) {
		t.Fatal("a host deleted another")
	}
	// Starting tasks on h2 is the master's to ask.
	p2, err := h3.peerFor(ctx, h2.cfg.HostID)
	if err != nil {
		t.Fatal(err)
	}
	before := len(h2.Tasks(false))
	if err := h3.callPeer(ctx, p2, mStart, spawnArgs{Req: task.SpawnRequest{Type: "daemon.test.fn", Count: 1}}, nil); !errors.Is(err, ErrForbidden) {
		t.Fatalf("a host starting tasks on another: %v, want ErrForbidden", err)
	}
	if n := len(h2.Tasks(false)); n != before {
		t.Fatalf("h2 runs %d tasks after a refused start, %d before", n, before)
	}
	refusal := routing.AppendRefusal(nil, routing.Refusal{To: hold, Route: routing.Route{Host: h3.cfg.HostID, Epoch: 99}})
	if err := forgeFrame(t, h3, h2.cfg.HostID, routing.KindRefuse, refusal); err != nil {
		t.Fatal(err)
	}
	if r := h2.rt.lookup(hold); r.Host == h3.cfg.HostID || r.Epoch == 99 {
		t.Fatalf("a forged refusal moved %v to %+v", hold, r)
	}

	// Refused, logged and counted where they arrived.
	if n := forgedCount(t, m); n != 6 {
		t.Errorf("the master counted %v forged claims, want 6 (message, exit, barrier, join, two outputs)", n)
	}
	if n := forgedCount(t, h2); n != 2 {
		t.Errorf("h2 counted %v forged claims, want 2 (the acknowledgement, the refusal)", n)
	}
	if !strings.Contains(logs.String(), `msg="refused a claim about a task"`) {
		t.Errorf("no refusal logged:\n%s", logs.String())
	}
}

// TestForgeriesCloseTheConnection: a host that keeps sending frames with
// claims about tasks it does not host has its connection closed after
// Config.MaxForgeries of them; one under the limit leaves it open.
func TestForgeriesCloseTheConnection(t *testing.T) {
	var logs syncBuffer
	vm := startMemVM(t, 3, &faults{}, Config{MaxForgeries: 3, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	m, h2, h3 := vm.Daemons[0], vm.Daemons[1], vm.Daemons[2]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	victim := startFn(t, m, m, waitPoked)
	waitKnown(t, ctx, h2, h3.cfg.HostID)
	p, err := h3.peerFor(ctx, h2.cfg.HostID)
	if err != nil {
		t.Fatal(err)
	}
	acks := routing.AppendAck(nil, routing.Ack{From: task.NewTID(h2.cfg.HostID, 1), To: victim, Seq: 1})
	for range 2 {
		if err := forgeFrame(t, h3, h2.cfg.HostID, routing.KindAcks, acks); err != nil {
			t.Fatalf("under the limit: %v", err)
		}
	}
	p.frame(routing.KindAcks, acks)
	select {
	case <-p.closed:
	case <-ctx.Done():
		t.Fatal("the connection of a host forging claims stayed open")
	}
	if !strings.Contains(logs.String(), "frames with claims about tasks it does not host") {
		t.Errorf("h2 did not say why it closed the connection:\n%s", logs.String())
	}
}

// TestResolveHost: a host is found by name or by ID; a word that is one
// host's name and another's ID is refused unless a prefix says which.
func TestResolveHost(t *testing.T) {
	hosts := []HostInfo{{ID: 1, Name: "master"}, {ID: 2, Name: "h2"}, {ID: 3, Name: "h1"}, {ID: 4, Name: "db"}}
	cases := []struct {
		in   string
		want task.HostID
		err  error
	}{
		{"master", 1, nil},
		{"h2", 2, nil}, // its name and its ID: the same host
		{"db", 4, nil},
		{"h4", 4, nil},
		{"h1", 0, ErrAmbiguousHost}, // h3's name, the master's ID
		{"name:h1", 3, nil},
		{"id:h1", 1, nil},
		{"id:db", 0, task.ErrNoSuchHost},
		{"name:h4", 0, task.ErrNoSuchHost},
		{"h9", 0, task.ErrNoSuchHost},
		{"", 0, task.ErrNoSuchHost},
	}
	for _, c := range cases {
		got, err := resolveHost(hosts, c.in)
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("resolveHost(%q) = %v, %v; want %v, %v", c.in, got, err, c.want, c.err)
		}
	}
}

// TestSimByzantine: the simulation's job (a ring with periodic
// checkpoints) runs over four daemons on the in-memory network, with
// delays from the seed, while one of them, byzantine, forges on its own
// authenticated connections, every millisecond of virtual time, a claim
// about a task of the job that another daemon hosts (byzantine lists
// them): a message or a notice from it, acknowledgements and refusals
// speaking for it, its exit, output for it, a barrier arrival or
// withdrawal, group, spawn and notify calls for it, a spawn into its job
// for no task, a kill or a move of it naming no task or another host's
// as the one acting; or, as a task of its own host ID that the master
// never started, after a load report that names the job, it writes output
// into the job and spawns into it (also while the master starts tasks of
// the job on it: a TID the master did not number them with is refused);
// or it calls a step of a move or a
// checkpoint, or a person's call. The job must print the fault-free run's result, no
// forged line may reach its output, every call must be refused, and the
// daemons must have refused claims of every kind.
func TestSimByzantine(t *testing.T) {
	want := simReference(t)
	for seed := range memSeeds(t, 3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			dir := simDir(t)
			synctest.Test(t, func(t *testing.T) {
				out := &syncBuffer{}
				cfg := simCfg(dir, out)
				cfg.MaxForgeries = 1 << 30 // judged and refused, but its connections stay
				cfg.Metrics = metrics.New(metrics.Options{NoRuntime: true})
				vm := startMemVM(t, 4, &faults{seed: uint64(seed), delay: 300}, cfg)
				bad := vm.Daemons[3]
				stop := make(chan struct{})
				done := make(chan struct{})
				var taken []string
				var rounds int
				go func() {
					defer close(done)
					taken, rounds = byzantine(bad, vm.Daemons, rand.New(rand.NewPCG(uint64(seed), 36)), stop)
				}()
				end := sync.OnceFunc(func() { close(stop); <-done })
				t.Cleanup(end) // the byzantine host stops before the bubble ends, on a failure too
				got, _ := simJob(t, vm.Master(), out, nil, nil)
				end()
				if len(taken) > 0 {
					t.Errorf("calls of the byzantine host not refused: %s", strings.Join(taken, "; "))
				}
				if got != want {
					t.Fatalf("with a byzantine host the job printed %s, want %s", got, want)
				}
				if strings.Contains(out.String(), forgedLine) {
					t.Fatalf("forged output reached the job's:\n%s", out)
				}
				if rounds < byzantineKinds {
					t.Fatalf("the job ended after %d forgeries, before the byzantine host tried all %d kinds", rounds, byzantineKinds)
				}
				byKind := map[string]float64{}
				for _, d := range vm.Daemons {
					forgedKinds(t, d, byKind)
				}
				for _, k := range []routing.ClaimKind{routing.ClaimSource, routing.ClaimReceiver, routing.ClaimNotice, routing.ClaimAct, routing.ClaimExit} {
					if byKind[k.String()] == 0 {
						t.Errorf("no forged claim of kind %s was refused (refused: %v)", k, byKind)
					}
				}
				t.Logf("%d forgeries; claims refused by kind: %v", rounds, byKind)
			})
		})
	}
}

// byzantineKinds is how many kinds of forgery byzantine tries.
const byzantineKinds = 17

// forgedLine is the byzantine host's output: a line the job's result is
// read from, were it taken.
const forgedLine = "FORGED: ring of 1, 1 laps: sum 1\n"

// byzantine forges claims from daemon bad about the tasks the other
// daemons host, and makes calls that are not a host's to make, until
// stop is closed, trying each kind in turn. It returns the calls that
// were not refused with ErrForbidden, and how many forgeries it made.
func byzantine(bad *Daemon, ds []*Daemon, rng *rand.Rand, stop <-chan struct{}) (taken []string, rounds int) {
	ctx := context.Background()
	type victim struct {
		tid  task.TID
		host task.HostID
		job  uint64
	}
	for {
		select {
		case <-stop:
			return taken, rounds
		case <-time.After(time.Millisecond):
		}
		var vs []victim
		for _, d := range ds {
			if d == bad {
				continue
			}
			d.ht.mu.Lock()
			for tid, h := range d.ht.tasks {
				vs = append(vs, victim{tid, d.cfg.HostID, h.job})
			}
			d.ht.mu.Unlock()
		}
		if len(vs) < 2 {
			continue
		}
		slices.SortFunc(vs, func(a, b victim) int { return int(a.tid - b.tid) })
		v, other := vs[rng.IntN(len(vs))], vs[rng.IntN(len(vs))]
		send := func(h task.HostID, k routing.Kind, body []byte) {
			if p, err := bad.peerFor(ctx, h); err == nil {
				p.frame(k, body)
			}
		}
		toMaster := func(e *event) {
			if b, err := encodeMsg(e); err == nil {
				send(MasterID, routing.KindEvent, b)
			}
		}
		call := func(h task.HostID, method string, args any) {
			p, err := bad.peerFor(ctx, h)
			if err != nil {
				return
			}
			if err := bad.callPeer(ctx, p, method, args, nil); !errors.Is(err, ErrForbidden) {
				taken = append(taken, fmt.Sprintf("%s at %v: %v", method, h, err))
			}
		}
		group := "j" + fmt.Sprint(v.job) + ":ring"
		kind := rounds % byzantineKinds
		rounds++
		switch kind {
		case 0: // a message (a resend, when its number was sent)
			p, _ := task.Encode(rng.IntN(1000))
			env := routing.Envelope{From: v.tid, To: other.tid, Seq: uint64(1 + rng.IntN(64)), Tag: int32(rng.IntN(8)), Body: p}
			send(other.host, routing.KindMsgs, routing.AppendEnvelope(nil, &env))
		case 1: // a notice: unsequenced
			p, _ := task.Encode(task.Notice{Kind: task.TaskExit, TID: v.tid})
			env := routing.Envelope{From: v.tid, To: other.tid, Tag: int32(rng.IntN(8)), Body: p}
			send(other.host, routing.KindMsgs, routing.AppendEnvelope(nil, &env))
		case 2:
			send(other.host, routing.KindAcks, routing.AppendAck(nil, routing.Ack{From: other.tid, To: v.tid, Seq: 1 << 40}))
		case 3:
			send(other.host, routing.KindRefuse, routing.AppendRefusal(nil, routing.Refusal{To: v.tid, Route: routing.Route{Host: bad.cfg.HostID, Epoch: 1 << 40}}))
		case 4:
			toMaster(&event{Kind: evExited, TID: v.tid})
		case 5:
			toMaster(&event{Kind: evOutput, Job: v.job, TID: v.tid, Output: []byte(forgedLine)})
		case 6:
			toMaster(&event{Kind: evBarrier, Group: group, TIDs: []task.TID{v.tid}, Count: 2})
		case 7:
			toMaster(&event{Kind: evBarrierCancel, Group: group, TIDs: []task.TID{v.tid}})
		case 8:
			call(MasterID, []string{mJoin, mLeave, mBarrier, mLeaveAll}[rng.IntN(4)], groupArgs{Group: group, TID: v.tid, Count: 2})
		case 9:
			call(MasterID, mSpawn, spawnArgs{Parent: v.tid, Job: v.job, Req: task.SpawnRequest{Type: "daemon.test.fn", Count: 1}})
		case 10:
			call(MasterID, mNotify, notifyArgs{Kind: task.TaskExit, Watcher: v.tid, TIDs: []task.TID{other.tid}})
		case 11: // a step of a move or of a checkpoint: the master's
			steps := []string{mStart, mMigSusp, mMigDone, mMigDrop, mCkPause, mCkKill, mCkWrite, mCkDrop, mWatch}
			call(v.host, steps[rng.IntN(len(steps))], tidArgs{TID: v.tid})
		case 12: // a person's calls
			calls := []string{mHalt, mDelete, mKillJob, mCheckpoint, mRun, mInject}
			call(MasterID, calls[rng.IntN(len(calls))], jobArgs{Job: v.job})
		case 13: // a spawn into the job for no task
			call(MasterID, mSpawn, spawnArgs{Job: v.job, Req: task.SpawnRequest{Type: "daemon.test.fn", Count: 1}})
		case 14: // a kill naming no task or another host's, or sent to the task's host
			switch rng.IntN(3) {
			case 0:
				call(MasterID, mKill, tidArgs{TID: v.tid})
			case 1:
				call(MasterID, mKill, tidArgs{TID: v.tid, By: other.tid})
			default:
				call(v.host, mKill, tidArgs{TID: v.tid, By: other.tid})
			}
		case 15: // a move naming no task or another host's
			by := []task.TID{0, other.tid}[rng.IntN(2)]
			call(MasterID, mMigrate, migrateArgs{TID: v.tid, To: bad.cfg.Name, Via: Direct, By: by})
		case 16: // a made-up task of its own, in a job it says it runs
			r := bad.takeReport()
			toMaster(&event{Kind: evLoad, Load: &r.info, Jobs: append(r.jobs, v.job)})
			madeUp := task.NewTID(bad.cfg.HostID, 1<<30+uint32(rng.IntN(1<<20)))
			toMaster(&event{Kind: evOutput, Job: v.job, TID: madeUp, Output: []byte(forgedLine)})
			call(MasterID, mSpawn, spawnArgs{Parent: madeUp, Job: v.job, Req: task.SpawnRequest{Type: "daemon.test.fn", Count: 1}})
		}
	}
}

// TestForgedOutputAfterFalseReport: h3 says in a load report that it runs
// tasks of another job, then writes a line into that job's output for a
// task of its own that the master started in another job, and one for a
// task it runs outside any job. The master knows which job each task it
// started belongs to: both lines are refused and counted, whatever the
// report says.
func TestForgedOutputAfterFalseReport(t *testing.T) {
	vm := startMemVM(t, 3, &faults{}, Config{Metrics: metrics.New(metrics.Options{NoRuntime: true})})
	m, h3 := vm.Daemons[0], vm.Daemons[2]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var victimOut syncBuffer
	const victimJob, ownJob = 4242, 4343
	m.reg.setOutput(victimJob, &victimOut)
	typ, state, err := task.EncodeState(fn(t, waitPoked))
	if err != nil {
		t.Fatal(err)
	}
	tids, err := m.spawnAnywhere(ctx, 0, ownJob, task.SpawnRequest{Type: typ, State: state, Count: 1, Host: h3.cfg.Name})
	if err != nil {
		t.Fatal(err)
	}
	inJob := tids[0]
	alice := withCaller(ctx, pki.Peer{Role: pki.RoleUser, Name: "alice"})
	tids, err = m.spawnAnywhere(alice, 0, 0, task.SpawnRequest{Type: typ, State: state, Count: 1, Host: h3.cfg.Name})
	if err != nil {
		t.Fatal(err)
	}
	loose := tids[0]
	falseReport(t, ctx, m, h3, ownJob, victimJob)
	forgeEvent(t, h3, &event{Kind: evOutput, Job: victimJob, TID: inJob, Output: []byte("forged by a task of another job\n")})
	forgeEvent(t, h3, &event{Kind: evOutput, Job: victimJob, TID: loose, Output: []byte("forged by a task of no job\n")})
	if s := victimOut.String(); s != "" {
		t.Fatalf("forged lines reached job %d's output: %q", victimJob, s)
	}
	if n := forgedCount(t, m); n != 2 {
		t.Errorf("the master counted %v forged claims, want 2", n)
	}
}

// TestRefusedClaimsLogRateLimited: a host forging many claims costs the
// receiver at most refusalBurst log lines a window, each refusal still
// counted; the next window's first line says how many went unlogged.
func TestRefusedClaimsLogRateLimited(t *testing.T) {
	var logs syncBuffer
	vm := startMemVM(t, 3, &faults{}, Config{
		MaxForgeries: 1 << 20,
		Metrics:      metrics.New(metrics.Options{NoRuntime: true}),
		Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
	})
	m, h2, h3 := vm.Daemons[0], vm.Daemons[1], vm.Daemons[2]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	victim := startFn(t, m, m, waitPoked)
	waitKnown(t, ctx, h2, h3.cfg.HostID)
	const forged = refusalBurst + 10
	acks := routing.AppendAck(nil, routing.Ack{From: task.NewTID(h2.cfg.HostID, 1), To: victim, Seq: 1})
	for range forged {
		if err := forgeFrame(t, h3, h2.cfg.HostID, routing.KindAcks, acks); err != nil {
			t.Fatal(err)
		}
	}
	if n := forgedCount(t, h2); n != forged {
		t.Errorf("h2 counted %v forged claims, want %d", n, forged)
	}
	if n := strings.Count(logs.String(), `msg="refused a claim about a task"`); n != refusalBurst {
		t.Errorf("h2 logged %d refused claims of %d, want %d (its burst)", n, forged, refusalBurst)
	}
	// The next window: its first refusal is logged, with the count of
	// those the last one did not log.
	h2.forgeLog.mu.Lock()
	h2.forgeLog.start = h2.forgeLog.start.Add(-refusalWindow)
	h2.forgeLog.mu.Unlock()
	if err := forgeFrame(t, h3, h2.cfg.HostID, routing.KindAcks, acks); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `msg="refused claims not logged" host=h2 count=10 `) {
		t.Errorf("the next window does not say how many refusals went unlogged:\n%s", logs.String())
	}
	if n := strings.Count(logs.String(), `msg="refused a claim about a task"`); n != refusalBurst+1 {
		t.Errorf("h2 logged %d refused claims, want %d", n, refusalBurst+1)
	}
}

// TestForgedSpawnIntoAnotherJob: h3 asks the master to spawn tasks into
// a job it has no part in: as the child of a task of its own in another
// job, of a task of its own outside any job, and of no task. Each is
// refused with ErrForged (which reaches the caller as ErrForbidden),
// counted, and starts nothing; a spawn into the parent's own job goes
// ahead.
func TestForgedSpawnIntoAnotherJob(t *testing.T) {
	vm := startMemVM(t, 3, &faults{}, Config{Metrics: metrics.New(metrics.Options{NoRuntime: true})})
	m, h3 := vm.Daemons[0], vm.Daemons[2]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const victimJob, ownJob = 4242, 4343
	typ, state, err := task.EncodeState(fn(t, waitPoked))
	if err != nil {
		t.Fatal(err)
	}
	req := task.SpawnRequest{Type: typ, State: state, Count: 1, Host: h3.cfg.Name}
	tids, err := m.spawnAnywhere(ctx, 0, ownJob, req)
	if err != nil {
		t.Fatal(err)
	}
	inJob := tids[0]
	alice := withCaller(ctx, pki.Peer{Role: pki.RoleUser, Name: "alice"})
	if tids, err = m.spawnAnywhere(alice, 0, 0, req); err != nil {
		t.Fatal(err)
	}
	loose := tids[0]
	pm, err := h3.peerFor(ctx, MasterID)
	if err != nil {
		t.Fatal(err)
	}
	for _, parent := range []task.TID{inJob, loose, 0} {
		var rep tidsReply
		err := h3.callPeer(ctx, pm, mSpawn, spawnArgs{Parent: parent, Job: victimJob, Req: req}, &rep)
		if !errors.Is(err, ErrForbidden) {
			t.Errorf("h3 spawned into job %d as %v's child: %v %v, want ErrForbidden", victimJob, parent, rep.TIDs, err)
		}
	}
	if n := forgedCount(t, m); n != 3 {
		t.Errorf("the master counted %v forged claims, want 3", n)
	}
	m.owners.mu.Lock()
	n := len(m.owners.jobTasks[victimJob])
	m.owners.mu.Unlock()
	if n != 0 {
		t.Errorf("job %d holds %d tasks after refused spawns", victimJob, n)
	}
	var rep tidsReply
	if err := h3.callPeer(ctx, pm, mSpawn, spawnArgs{Parent: inJob, Job: ownJob, Req: req}, &rep); err != nil || len(rep.TIDs) != 1 {
		t.Fatalf("a spawn into the parent's own job: %v %v", rep.TIDs, err)
	}
}

// TestForgedKillAndMigrate: h3 asks the master to kill and to move a task
// of bob's on h2, naming no acting task, a task of h2's, and a task of
// its own in a job of alice's, and asks h2 to kill it directly. Each is
// refused with ErrForbidden and counted, and the task runs on where it
// was. Through the task API, alice's task on h3 is refused bob's task
// too, and kills and moves alice's tasks on h2.
func TestForgedKillAndMigrate(t *testing.T) {
	vm := startMemVM(t, 3, &faults{}, Config{Metrics: metrics.New(metrics.Options{NoRuntime: true})})
	m, h2, h3 := vm.Daemons[0], vm.Daemons[1], vm.Daemons[2]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const bobJob, aliceJob = 4242, 4343
	m.owners.setJob(bobJob, owner{name: "bob"})
	m.owners.setJob(aliceJob, owner{name: "alice"})
	spawnIn := func(job uint64, on *Daemon, body func(c *task.Ctx, arg int) error) task.TID {
		t.Helper()
		typ, state, err := task.EncodeState(fn(t, body))
		if err != nil {
			t.Fatal(err)
		}
		tids, err := m.spawnAnywhere(ctx, 0, job, task.SpawnRequest{Type: typ, State: state, Count: 1, Host: on.cfg.Name})
		if err != nil || len(tids) != 1 {
			t.Fatalf("spawn in job %d on %s: %v %v", job, on.cfg.Name, tids, err)
		}
		return tids[0]
	}
	idle := func(c *task.Ctx, _ int) error {
		var x int
		_, err := c.Recv(task.AnyTask, 99, &x, task.Safe())
		return err
	}
	victim, bobs := spawnIn(bobJob, h2, idle), spawnIn(bobJob, h2, idle)
	mine := spawnIn(aliceJob, h3, idle)
	waitKnown(t, ctx, h3, h2.cfg.HostID)
	pm, err := h3.peerFor(ctx, MasterID)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := h3.peerFor(ctx, h2.cfg.HostID)
	if err != nil {
		t.Fatal(err)
	}
	moveTo := func(by task.TID) migrateArgs {
		return migrateArgs{TID: victim, To: h3.cfg.Name, Via: Direct, By: by}
	}
	forgeries := []struct {
		what   string
		p      *peer
		method string
		args   any
	}{
		{"a kill naming no task", pm, mKill, tidArgs{TID: victim}},
		{"a kill as a task of h2", pm, mKill, tidArgs{TID: victim, By: bobs}},
		{"a kill as alice's task", pm, mKill, tidArgs{TID: victim, By: mine}},
		{"a move naming no task", pm, mMigrate, moveTo(0)},
		{"a move as a task of h2", pm, mMigrate, moveTo(bobs)},
		{"a move as alice's task", pm, mMigrate, moveTo(mine)},
		{"a kill sent to the task's host", p2, mKill, tidArgs{TID: victim, By: mine}},
		{"a kill as a task of h3 the master never started", pm, mKill, tidArgs{TID: victim, By: task.NewTID(h3.cfg.HostID, 1<<30)}},
		{"a move as a task of h3 the master never started", pm, mMigrate, moveTo(task.NewTID(h3.cfg.HostID, 1<<30+1))},
	}
	for _, f := range forgeries {
		if err := h3.callPeer(ctx, f.p, f.method, f.args, nil); !errors.Is(err, ErrForbidden) {
			t.Errorf("%s of bob's task: %v, want ErrForbidden", f.what, err)
		}
	}
	if h2.ht.task(victim) == nil || m.routeHost(victim) != h2.cfg.HostID {
		t.Fatalf("after refused kills and moves, bob's task %v is not running on h2 (route %v)", victim, m.routeHost(victim))
	}
	if n := forgedCount(t, m); n != 8 {
		t.Errorf("the master counted %v forged claims, want 8", n)
	}
	if n := forgedCount(t, h2); n != 1 {
		t.Errorf("h2 counted %v forged claims, want 1", n)
	}

	// Through the task API: alice's task may not kill or move bob's, and
	// kills and moves alice's, of its own job and of another of hers.
	m.owners.setJob(aliceJob+1, owner{name: "alice"})
	kin, other := spawnIn(aliceJob, h2, idle), spawnIn(aliceJob+1, h2, idle)
	goAhead := make(chan struct{})
	errs := make(chan error, 5)
	spawnIn(aliceJob, h3, func(c *task.Ctx, _ int) error {
		select {
		case <-goAhead:
		case <-c.Context().Done():
			return c.Context().Err()
		}
		errs <- c.Kill(victim)
		errs <- c.Migrate(victim, h3.cfg.Name, "direct")
		errs <- c.Kill(kin)
		errs <- c.Migrate(other, m.cfg.Name, "direct")
		errs <- c.Kill(other)
		return nil
	})
	close(goAhead) // the master knows the task's job once spawnIn returns
	for i, want := range []error{ErrForbidden, ErrForbidden, nil, nil, nil} {
		if err := <-errs; !errors.Is(err, want) {
			t.Errorf("alice's task's call %d: %v, want %v", i, err, want)
		}
	}
	if h2.ht.task(victim) == nil {
		t.Fatal("alice's task killed bob's")
	}
	for _, tid := range []task.TID{kin, other} {
		info, err := m.Wait(ctx, tid)
		if err != nil || info.State != Killed {
			t.Errorf("alice's task %v after alice's task killed it: %+v %v", tid, info, err)
		}
	}
	if n := forgedCount(t, m); n != 10 {
		t.Errorf("the master counted %v refused claims, want 10 (the two of alice's task's too)", n)
	}
}

// TestForgedTaskOfItsOwnHost: h3 makes up a TID of its own host ID, of
// a task the master never started, says in a load report that it runs
// tasks of a job it has no part in, and as that task writes a line into
// the job's output and asks for a spawn into it; it writes a line as
// that task into its own job too. Each is refused and counted: the
// master records the job of every task it starts before the task can
// speak. A task of its own job that prints and spawns as soon as it
// starts is heard, and so is its child; a task the master does not know
// yet speaks for a job only while a start of the job's tasks on its host
// is under way.
func TestForgedTaskOfItsOwnHost(t *testing.T) {
	vm := startMemVM(t, 3, &faults{}, Config{Metrics: metrics.New(metrics.Options{NoRuntime: true})})
	m, h3 := vm.Daemons[0], vm.Daemons[2]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	own, victim := m.newJob("", "test", JobOptions{}), m.newJob("", "test", JobOptions{})
	var ownOut, victimOut syncBuffer
	m.reg.setOutput(own.id, &ownOut)
	m.reg.setOutput(victim.id, &victimOut)
	child := fn(t, func(c *task.Ctx, a int) error {
		c.Printf("child %v", c.MyTID())
		return waitPoked(c, a)
	})
	parent := fn(t, func(c *task.Ctx, a int) error {
		c.Printf("parent %v", c.MyTID())
		if _, err := c.Spawn(child, 1, task.OnHost(h3.cfg.Name)); err != nil {
			c.Printf("spawn: %v", err)
		}
		return waitPoked(c, a)
	})
	typ, state, err := task.EncodeState(parent)
	if err != nil {
		t.Fatal(err)
	}
	tids, err := m.spawnAnywhere(ctx, 0, own.id, task.SpawnRequest{Type: typ, State: state, Count: 1, Host: h3.cfg.Name})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the parent's and its child's lines", func() bool {
		return strings.Contains(ownOut.String(), fmt.Sprintf("parent %v\n", tids[0])) && strings.Contains(ownOut.String(), "child ")
	})
	if strings.Contains(ownOut.String(), "spawn:") {
		t.Fatalf("the parent's spawn was refused:\n%s", ownOut.String())
	}

	madeUp := task.NewTID(h3.cfg.HostID, 1<<30)
	falseReport(t, ctx, m, h3, own.id, victim.id)
	forgeEvent(t, h3, &event{Kind: evOutput, Job: victim.id, TID: madeUp, Output: []byte("forged into another job\n")})
	forgeEvent(t, h3, &event{Kind: evOutput, Job: own.id, TID: madeUp, Output: []byte("forged into its own job\n")})
	pm, err := h3.peerFor(ctx, MasterID)
	if err != nil {
		t.Fatal(err)
	}
	var rep tidsReply
	err = h3.callPeer(ctx, pm, mSpawn, spawnArgs{Parent: madeUp, Job: victim.id, Req: task.SpawnRequest{Type: typ, State: state, Count: 1}}, &rep)
	if !errors.Is(err, ErrForbidden) {
		t.Errorf("h3 spawned into job %d as made-up %v: %v %v, want ErrForbidden", victim.id, madeUp, rep.TIDs, err)
	}
	if s := victimOut.String(); s != "" {
		t.Errorf("forged lines reached job %d's output: %q", victim.id, s)
	}
	if strings.Contains(ownOut.String(), "forged") {
		t.Errorf("a forged line reached job %d's output:\n%s", own.id, ownOut.String())
	}
	if n := forgedCount(t, m); n != 3 {
		t.Errorf("the master counted %v forged claims, want 3", n)
	}
	m.owners.mu.Lock()
	n := len(m.owners.jobTasks[victim.id])
	m.owners.mu.Unlock()
	if n != 0 {
		t.Errorf("job %d holds %d tasks after a refused spawn", victim.id, n)
	}

	// While a start of the job's tasks on h3 is under way, the tasks it
	// starts speak before the master knows them, with the numbers the
	// master handed out for them; a TID it did not hand out (made up)
	// speaks no more then than after, nor does one once the start is
	// over.
	first := m.reg.allocNums(h3.cfg.HostID, 2)
	numbered := task.NewTID(h3.cfg.HostID, first+1)
	settle := m.reg.expectNums(h3.cfg.HostID, victim.id, first, 2)
	forgeEvent(t, h3, &event{Kind: evOutput, Job: victim.id, TID: numbered, Output: []byte("numbered, while a start is under way\n")})
	forgeEvent(t, h3, &event{Kind: evOutput, Job: victim.id, TID: madeUp, Output: []byte("made up, while a start is under way\n")})
	forgeEvent(t, h3, &event{Kind: evOutput, Job: victim.id, TID: task.NewTID(h3.cfg.HostID, first+2), Output: []byte("past the numbers, while a start is under way\n")})
	err = h3.callPeer(ctx, pm, mSpawn, spawnArgs{Parent: madeUp, Job: victim.id, Req: task.SpawnRequest{Type: typ, State: state, Count: 1}}, &rep)
	if !errors.Is(err, ErrForbidden) {
		t.Errorf("during a start, h3 spawned into job %d as made-up %v: %v %v, want ErrForbidden", victim.id, madeUp, rep.TIDs, err)
	}
	settle()
	forgeEvent(t, h3, &event{Kind: evOutput, Job: victim.id, TID: numbered, Output: []byte("numbered, after the start\n")})
	if s := victimOut.String(); s != "numbered, while a start is under way\n" {
		t.Errorf("job %d's output is %q, want the numbered task's line written during the start alone", victim.id, s)
	}
	if n := forgedCount(t, m); n != 7 {
		t.Errorf("the master counted %v forged claims, want 7", n)
	}
}

// waitPoked is a task's body that waits for a message of tag 99 (poke)
// and ends.
func waitPoked(c *task.Ctx, _ int) error {
	var x int
	_, err := c.Recv(task.AnyTask, 99, &x)
	return err
}

// TestStartNumbersTakenOnHost: the master numbers the tasks it starts on
// a host, and a task it does not know yet speaks for its job with one of
// those numbers only. A host that took numbers by itself (SpawnTask)
// answers a start numbered with them that they are taken, and the master
// starts the tasks again with numbers above: they start once, their
// first line, written before the answer is in, is heard, and no claim
// is counted as forged.
func TestStartNumbersTakenOnHost(t *testing.T) {
	vm := startMemVM(t, 2, &faults{}, Config{Metrics: metrics.New(metrics.Options{NoRuntime: true})})
	m, h2 := vm.Daemons[0], vm.Daemons[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idle := fn(t, waitPoked)
	var own []task.TID
	for range 3 {
		tid, err := h2.SpawnTask(idle)
		if err != nil {
			t.Fatal(err)
		}
		own = append(own, tid)
	}
	js := m.newJob("", "test", JobOptions{})
	var out syncBuffer
	m.reg.setOutput(js.id, &out)
	talk := fn(t, func(c *task.Ctx, a int) error {
		c.Printf("started %v", c.MyTID())
		return waitPoked(c, a)
	})
	typ, state, err := task.EncodeState(talk)
	if err != nil {
		t.Fatal(err)
	}
	tids, err := m.spawnAnywhere(ctx, 0, js.id, task.SpawnRequest{Type: typ, State: state, Count: 2, Host: h2.cfg.Name})
	if err != nil || len(tids) != 2 {
		t.Fatalf("spawn on h2: %v %v", tids, err)
	}
	for _, tid := range tids {
		if tid.Host() != h2.cfg.HostID || tid.Num() <= own[len(own)-1].Num() {
			t.Fatalf("h2's tasks %v, numbered at or below those it took itself %v", tids, own)
		}
	}
	if tids[1].Num() != tids[0].Num()+1 {
		t.Errorf("a start's tasks %v are not numbered in a row", tids)
	}
	waitFor(t, ctx, "both tasks' lines", func() bool {
		return strings.Contains(out.String(), fmt.Sprintf("started %v\n", tids[0])) && strings.Contains(out.String(), fmt.Sprintf("started %v\n", tids[1]))
	})
	if n := h2.ht.count(); n != 5 {
		t.Errorf("h2 hosts %d tasks, want 5 (3 of its own, 2 started once)", n)
	}
	if n := forgedCount(t, m); n != 0 {
		t.Errorf("the master counted %v forged claims, want none", n)
	}
	// The master numbers the next start above: no retry needed.
	more, err := m.spawnAnywhere(ctx, 0, js.id, task.SpawnRequest{Type: typ, State: state, Count: 1, Host: h2.cfg.Name})
	if err != nil || len(more) != 1 || more[0].Num() != tids[1].Num()+1 {
		t.Fatalf("the next spawn on h2: %v %v, want %v", more, err, task.NewTID(h2.cfg.HostID, tids[1].Num()+1))
	}
}
