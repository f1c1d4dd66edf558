package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/metrics/metricstest"
	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// The tests in this file forge, with a host certificate issued by the
// cluster's CA, frames that claim tasks of other hosts, against daemons
// running as processes: a message from another host's task, an exit, an
// output line, an acknowledgement, a refusal, a group call, a kill and a
// move for tasks the forger does not host. The forger is a test-side daemon speaking the
// wire protocol: it joins the virtual machine as host h3 with h3's
// certificate, keeps its membership with heartbeats, answers every call
// with an error, and sends what the test tells it to. Each forgery must
// achieve nothing, and the daemon that received it must log and count it.

// The wire shapes the forger speaks (daemon/wire.go), by their msgpack keys.
type (
	fHello struct {
		Version    int             `msgpack:"v"`
		Host       task.HostID     `msgpack:"h"`
		Name       string          `msgpack:"n"`
		Addr       string          `msgpack:"a,omitempty"`
		Advertised bool            `msgpack:"ad,omitempty"`
		Join       bool            `msgpack:"j,omitempty"`
		Info       daemon.HostInfo `msgpack:"i"`
		Assigned   task.HostID     `msgpack:"as,omitempty"`
		Err        string          `msgpack:"e,omitempty"`
	}
	fEvent struct {
		Kind   string     `msgpack:"k"`
		TID    task.TID   `msgpack:"t,omitempty"`
		Output []byte     `msgpack:"o,omitempty"`
		Job    uint64     `msgpack:"j,omitempty"`
		Group  string     `msgpack:"g,omitempty"`
		TIDs   []task.TID `msgpack:"ts,omitempty"`
		Count  int        `msgpack:"c,omitempty"`
	}
	fCall struct {
		ID     uint64             `msgpack:"i"`
		Method string             `msgpack:"m"`
		Body   msgpack.RawMessage `msgpack:"b"`
	}
	fReply struct {
		ID   uint64             `msgpack:"i"`
		Err  string             `msgpack:"e,omitempty"`
		Code string             `msgpack:"c,omitempty"`
		Body msgpack.RawMessage `msgpack:"b,omitempty"`
	}
	fGroupArgs struct {
		Group string   `msgpack:"g"`
		TID   task.TID `msgpack:"t"`
		Count int      `msgpack:"c,omitempty"`
	}
	fSpawnArgs struct {
		Parent task.TID          `msgpack:"p"`
		Job    uint64            `msgpack:"j,omitempty"`
		Req    task.SpawnRequest `msgpack:"r"`
	}
	fKillArgs struct {
		TID task.TID `msgpack:"t"`
		By  task.TID `msgpack:"b,omitempty"`
	}
	fMigrateArgs struct {
		TID task.TID   `msgpack:"t"`
		To  string     `msgpack:"o"`
		Via daemon.Via `msgpack:"v"`
		By  task.TID   `msgpack:"b,omitempty"`
	}
)

// fConn is one of the forger's connections: to the master (its
// registration) or to another host.
type fConn struct {
	t    *testing.T
	conn transport.Conn
	st   transport.Stream
	wmu  sync.Mutex
	mu   sync.Mutex
	next uint64
	wait map[uint64]chan fReply
}

// send writes one frame.
func (c *fConn) send(k routing.Kind, body []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.st.Write(routing.AppendFrame(nil, k, body))
	return err
}

// call makes a control call and waits for its reply (frames on a
// connection are handled in order: when it returns, the receiver has
// handled every frame sent before).
func (c *fConn) call(ctx context.Context, method string, args any) (fReply, error) {
	body, err := msgpack.Marshal(args)
	if err != nil {
		return fReply{}, err
	}
	c.mu.Lock()
	c.next++
	id := c.next
	ch := make(chan fReply, 1)
	c.wait[id] = ch
	c.mu.Unlock()
	b, err := msgpack.Marshal(&fCall{ID: id, Method: method, Body: body})
	if err != nil {
		return fReply{}, err
	}
	if err := c.send(routing.KindCall, b); err != nil {
		return fReply{}, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-c.conn.Done():
		return fReply{}, errors.New("the connection was closed")
	case <-ctx.Done():
		return fReply{}, ctx.Err()
	}
}

// sync makes a no-op call: every frame sent before has been handled.
func (c *fConn) sync(ctx context.Context) {
	c.t.Helper()
	if r, err := c.call(ctx, "ping", nil); err != nil || r.Err != "" {
		c.t.Fatalf("ping after a forgery: %v %s", err, r.Err)
	}
}

// read handles what the daemon sends: replies go to their calls, calls
// are refused, the rest is ignored.
func (c *fConn) read(r *routing.Reader) {
	for {
		f, err := r.Next()
		if err != nil {
			return
		}
		switch f.Kind {
		case routing.KindReply:
			var rep fReply
			if msgpack.Unmarshal(f.Body, &rep) == nil {
				c.mu.Lock()
				ch := c.wait[rep.ID]
				delete(c.wait, rep.ID)
				c.mu.Unlock()
				if ch != nil {
					ch <- rep
				}
			}
		case routing.KindCall:
			var cl fCall
			if msgpack.Unmarshal(f.Body, &cl) == nil {
				b, _ := msgpack.Marshal(&fReply{ID: cl.ID, Err: "the forger serves nothing"})
				_ = c.send(routing.KindReply, b)
			}
		}
	}
}

// forger is a host of the virtual machine that forges.
type forger struct {
	t      *testing.T
	id     task.HostID
	tr     transport.Endpoint
	master *fConn
}

// greetAs opens a connection to addr and exchanges hellos.
func (f *forger) greetAs(ctx context.Context, addr string, h *fHello) (*fConn, *fHello) {
	f.t.Helper()
	conn, err := f.tr.Dial(ctx, addr)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.Close("test over") })
	st, err := conn.OpenStream(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	h.Version = daemon.ProtocolVersion
	b, err := msgpack.Marshal(h)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := st.Write(routing.AppendFrame(nil, routing.KindHello, b)); err != nil {
		f.t.Fatal(err)
	}
	r := routing.NewReader(st, routing.DefaultMaxFrame)
	fr, err := r.Next()
	if err != nil || fr.Kind != routing.KindHello {
		f.t.Fatalf("hello from %s: %v %v", addr, fr.Kind, err)
	}
	var ans fHello
	if err := msgpack.Unmarshal(fr.Body, &ans); err != nil {
		f.t.Fatal(err)
	}
	if ans.Err != "" {
		f.t.Fatalf("%s refused the forger: %s", addr, ans.Err)
	}
	c := &fConn{t: f.t, conn: conn, st: st, wait: map[uint64]chan fReply{}}
	go c.read(r)
	return c, &ans
}

// joinForger joins v as a host named name, with the certificate the
// cluster's CA issues for that name, and keeps its membership with
// heartbeats until the test ends.
func joinForger(t *testing.T, ctx context.Context, v *vm, name string) *forger {
	t.Helper()
	admin, err := daemon.Dial(ctx, v.addr, v.creds.cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := admin.Hosts(ctx)
	admin.Close()
	if err != nil {
		t.Fatal(err)
	}
	cred, err := v.creds.cl.Host(name)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := transport.QUICNetwork{}.Dialer(v.addr, cred, transport.Config{HandshakeTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	f := &forger{t: t, tr: tr}
	info := daemon.HostInfo{Name: name, Cores: 1, Speed: 1, MemMiB: 1024, Build: hosts[0].Build}
	c, ans := f.greetAs(ctx, v.addr, &fHello{Name: name, Addr: "127.0.0.1:9", Advertised: true, Join: true, Info: info})
	f.id, f.master = ans.Assigned, c
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if c.send(routing.KindPing, make([]byte, 8)) != nil {
					return
				}
			}
		}
	}()
	return f
}

// event sends a forged event to the master and waits until it is handled.
func (f *forger) event(ctx context.Context, e *fEvent) {
	f.t.Helper()
	b, err := msgpack.Marshal(e)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.master.send(routing.KindEvent, b); err != nil {
		f.t.Fatal(err)
	}
	f.master.sync(ctx)
}

// watchJob is a run of the watch example (two workers, waiting for one
// to be lost with its host) on a virtual machine of a master and h2: its
// client, its job, its root (on the master) and its workers on the master
// and on h2.
type watchJob struct {
	run           *proc
	job           uint64
	root, w1, w2  task.TID
	master, host2 *proc
}

func startWatch(t *testing.T, v *vm) *watchJob {
	t.Helper()
	w := &watchJob{master: v.master, host2: v.hosts[0]}
	w.run = start(t, "watch", v.env, "run", "--master", v.addr, "watch", "-workers", "2", "-expect", "1")
	started := w.run.waitFor(regexp.MustCompile(`2 workers started: \[(.*)\]`), false)
	for _, s := range strings.Fields(started[1]) {
		tid, err := task.ParseTID(s)
		if err != nil {
			t.Fatal(err)
		}
		switch tid.Host() {
		case 1:
			w.w1 = tid
		case 2:
			w.w2 = tid
		}
	}
	if w.w1 == 0 || w.w2 == 0 {
		t.Fatalf("want a worker on h1 and one on h2: %s", started[0])
	}
	code, out, errOut := dpvm(t, v.env, "ps", "--json")
	var ts []daemon.TaskInfo
	if code != 0 || json.Unmarshal([]byte(out), &ts) != nil {
		t.Fatalf("ps: %d %s %s", code, out, errOut)
	}
	for _, ti := range ts {
		if ti.Type == "examples.watch" {
			w.root, w.job = ti.TID, ti.Job
		}
	}
	if w.root.Host() != 1 || w.job == 0 {
		t.Fatalf("no root of the watch job on the master: %s", out)
	}
	return w
}

// end kills h2 and returns what the job printed once it has ended: the
// loss of its worker on h2, h2's deletion, the other worker stopped.
func (w *watchJob) end(t *testing.T) string {
	t.Helper()
	if err := w.host2.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := w.run.wait(); code != 0 {
		t.Fatalf("watch: status %d", code)
	}
	out := w.run.out.String()
	for _, want := range []string{fmt.Sprintf("worker %v exited (status -1: lost with its host)", w.w2), "watch: 1 workers lost, 1 stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("watch output lacks %q:\n%s", want, out)
		}
	}
	return out
}

// forgeries is the master's count of refused claims of kind, from its
// metrics.
func forgeries(t *testing.T, metricsURL, kind string) float64 {
	t.Helper()
	n, _ := metricstest.Value(metricstest.Scrape(t, metricsURL), "dpvm_forged_claims_total", "kind="+kind, "peer=h3")
	return n
}

var metricsOn = regexp.MustCompile(`metrics on (http://\S+)`)

// forgeryVM starts a master and h2 with metrics, a watch job on them, and
// the forger h3; it returns the master's metrics URL.
func forgeryVM(t *testing.T, ctx context.Context) (*vm, *watchJob, *forger, string) {
	t.Helper()
	// The forger keeps its membership with the master's heartbeats and
	// answers no peer's probes, so this VM runs the master's detector; the
	// claims checked do not depend on how failures are detected.
	v := startVM(t, 1, "--metrics-listen", "127.0.0.1:0", "--detector", "master")
	url := v.master.waitFor(metricsOn, true)[1]
	w := startWatch(t, v)
	f := joinForger(t, ctx, v, "h3")
	if f.id != 3 {
		t.Fatalf("the forger joined as %v", f.id)
	}
	return v, w, f, url
}

var refusedClaim = regexp.MustCompile(`msg="refused a claim about a task".* peer=h3 `)

// TestForgedMessageOfProcesses: h3 sends the watch job's root a message
// "from" its worker on the master, shaped as that worker's exit notice.
// The master refuses it: the root never hears of it.
func TestForgedMessageOfProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	v, w, f, url := forgeryVM(t, ctx)
	p, err := task.Encode(task.Notice{Kind: task.TaskExit, TID: w.w1, Err: "forged by h3"})
	if err != nil {
		t.Fatal(err)
	}
	const watchExit = 8 // examples/watch.go
	body := routing.AppendEnvelope(nil, &routing.Envelope{From: w.w1, To: w.root, Seq: 1, Tag: watchExit, Body: p})
	if err := f.master.send(routing.KindMsgs, body); err != nil {
		t.Fatal(err)
	}
	f.master.sync(ctx)
	if out := w.end(t); strings.Contains(out, "forged") {
		t.Fatalf("the root took a forged message:\n%s", out)
	}
	v.master.waitFor(refusedClaim, true)
	if n := forgeries(t, url, "source"); n != 1 {
		t.Errorf("the master counted %v forged sources, want 1", n)
	}
}

// TestForgedExitOfProcesses: h3 tells the master that the watch job's
// worker on h2 has exited. The master refuses it: when h2 is lost, the
// root is told its worker was lost with it (taken for exited, the worker
// would be forgotten, and the root would wait for ever).
func TestForgedExitOfProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	v, w, f, url := forgeryVM(t, ctx)
	f.event(ctx, &fEvent{Kind: "exited", TID: w.w2})
	w.end(t)
	v.master.waitFor(refusedClaim, true)
	if n := forgeries(t, url, "exit"); n != 1 {
		t.Errorf("the master counted %v forged exits, want 1", n)
	}
}

// TestForgedRefusalOfProcesses: h3 tells the master that the watch job's
// worker on h2 now lives on h3. The master refuses it: its route stays,
// and the worker is lost with h2 (on the forged route, the master would
// send the worker's messages to h3, and not count it lost).
func TestForgedRefusalOfProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	v, w, f, url := forgeryVM(t, ctx)
	body := routing.AppendRefusal(nil, routing.Refusal{To: w.w2, Route: routing.Route{Host: f.id, Epoch: 99}})
	if err := f.master.send(routing.KindRefuse, body); err != nil {
		t.Fatal(err)
	}
	f.master.sync(ctx)
	w.end(t)
	v.master.waitFor(refusedClaim, true)
	if n := forgeries(t, url, "receiver"); n != 1 {
		t.Errorf("the master counted %v forged refusals, want 1", n)
	}
}

// TestForgedAcknowledgementsOfProcesses: h3 acknowledges, to the master,
// messages of the watch job's root to its worker on h2, as far as
// sequence numbers go: were they taken, the master would stop waiting
// for h2's acknowledgements, and the root's sends would no longer be held
// back. The master refuses them and counts them.
func TestForgedAcknowledgementsOfProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	v, w, f, url := forgeryVM(t, ctx)
	var acks []byte
	for _, to := range []task.TID{w.w1, w.w2} {
		acks = routing.AppendAck(acks, routing.Ack{From: w.root, To: to, Seq: 1 << 40})
	}
	if err := f.master.send(routing.KindAcks, acks); err != nil {
		t.Fatal(err)
	}
	f.master.sync(ctx)
	w.end(t)
	v.master.waitFor(refusedClaim, true)
	if n := forgeries(t, url, "receiver"); n != 2 {
		t.Errorf("the master counted %v forged acknowledgements, want 2", n)
	}
}

// TestForgedOutputAndGroupCallOfProcesses: h3 writes lines into the watch
// job's output, for the job's worker on h2 and for a task of its own, and
// makes the worker on h2 join a group, and spawns a task into the job for
// no task of its own. The lines never reach the job's client, and the
// join and the spawn are refused.
func TestForgedOutputAndGroupCallOfProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	_, w, f, url := forgeryVM(t, ctx)
	f.event(ctx, &fEvent{Kind: "output", Job: w.job, TID: w.w2, Output: []byte("FORGED for a worker of h2\n")})
	f.event(ctx, &fEvent{Kind: "output", Job: w.job, TID: task.NewTID(f.id, 1), Output: []byte("FORGED by h3's own task\n")})
	f.event(ctx, &fEvent{Kind: "output", Job: w.job, Output: []byte("FORGED by no task\n")})
	r, err := f.master.call(ctx, "group.join", fGroupArgs{Group: fmt.Sprintf("j%d:g", w.job), TID: w.w2})
	if err != nil {
		t.Fatal(err)
	}
	if r.Code != "forbidden" {
		t.Errorf("a group call for h2's task: %q %q, want it forbidden", r.Err, r.Code)
	}
	r, err = f.master.call(ctx, "spawn", fSpawnArgs{Job: w.job, Req: task.SpawnRequest{Type: "examples.watch", Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Code != "forbidden" {
		t.Errorf("a spawn into the job for no task: %q %q, want it forbidden", r.Err, r.Code)
	}
	if out := w.end(t); strings.Contains(out, "FORGED") {
		t.Fatalf("forged output reached the job's client:\n%s", out)
	}
	if n := forgeries(t, url, "act"); n != 5 {
		t.Errorf("the master counted %v forged claims of acts, want 5 (three output lines, a join, a spawn)", n)
	}
}

// TestForgedKillAndMigrateOfProcesses: h3 asks the master to kill the
// watch job's worker on h2, naming no acting task and naming the worker
// on the master, and to move it to h3 as the worker on the master. Each
// is refused: the worker is lost with h2, as the job expects (killed or
// moved, it would not be).
func TestForgedKillAndMigrateOfProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	_, w, f, url := forgeryVM(t, ctx)
	calls := []struct {
		method string
		args   any
	}{
		{"kill", fKillArgs{TID: w.w2}},
		{"kill", fKillArgs{TID: w.w2, By: w.w1}},
		{"migrate", fMigrateArgs{TID: w.w2, To: "h3", Via: daemon.Direct, By: w.w1}},
	}
	for _, c := range calls {
		r, err := f.master.call(ctx, c.method, c.args)
		if err != nil {
			t.Fatal(err)
		}
		if r.Code != "forbidden" {
			t.Errorf("%s %+v from h3: %q %q, want it forbidden", c.method, c.args, r.Err, r.Code)
		}
	}
	w.end(t)
	if n := forgeries(t, url, "act"); n != 3 {
		t.Errorf("the master counted %v forged claims of acts, want 3", n)
	}
}
