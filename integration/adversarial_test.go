package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dpvm/dpvm/ckpt/jobset"
	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/metrics/metricstest"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
)

// rssMiB is a process's resident memory in MiB, from /proc.
func rssMiB(t *testing.T, p *proc) int { return statusMiB(t, p, "VmRSS") }

// statusMiB is a figure in kB of a process's /proc status (VmRSS, VmHWM:
// the most resident so far) in MiB.
func statusMiB(t *testing.T, p *proc, key string) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return kb / 1024
		}
	}
	t.Fatalf("no %s for %s", key, p.name)
	return 0
}

// nestedArrays is n one-element msgpack arrays around nil.
func nestedArrays(n int) []byte { return append(bytes.Repeat([]byte{0x91}, n), 0xc0) }

// TestHostileCallsOfProcesses: against a master and a host running as
// processes, a user certificate calls daemon-only and admin-only methods,
// a certificate of another CA tries to connect, a spawn asks for absurd
// counts, call bodies nest a million levels deep
// or claim billions of items, and a flood of random datagrams hits the
// master's UDP port. Every call fails with a clear error, the refusals are
// audited, and the master stays up, serving, with its memory bounded.
func TestHostileCallsOfProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	v := startVM(t, 1)
	aliceCred, err := v.creds.cl.User("alice", pki.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	alice, err := daemon.Dial(ctx, v.addr, aliceCred)
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	rssBefore := rssMiB(t, v.master)

	// Daemon-only methods (steps of moves and job checkpoints, starting
	// tasks, the group server) and admin-only ones.
	for _, m := range []string{"mig.suspend", "ckpt.load", "ckpt.write", "start", "group.join", "load.here", "halt", "delete", "load.inject"} {
		if _, err := alice.CallRaw(ctx, m, []byte{0x80}); !errors.Is(err, daemon.ErrForbidden) {
			t.Errorf("a user calling %s: %v, want ErrForbidden", m, err)
		}
	}
	v.master.waitFor(regexp.MustCompile(`msg=audit .*who=alice role=user .*method=mig.suspend outcome="refused: `), true)

	// Absurd counts: a spawn of 2^62 tasks, and negative ones.
	for _, n := range []int{1 << 62, -1, 0} {
		if _, err := alice.Spawn(ctx, "hello", []byte{0x80}, n, ""); err == nil {
			t.Errorf("a spawn of %d tasks was accepted", n)
		}
	}
	if _, err := alice.Spawn(ctx, "hello", []byte{0x80}, 1<<62, ""); !errors.Is(err, daemon.ErrLimit) {
		t.Errorf("a spawn of 2^62 tasks: %v, want ErrLimit", err)
	}

	// Malformed bodies: a million nested arrays, a map claiming four
	// billion entries, an array of a million items in a few bytes. The
	// master refuses the frame and closes that client's connection,
	// saying why; each goes on a connection of its own.
	for name, body := range map[string][]byte{
		"nested":    nestedArrays(1 << 20),
		"huge map":  {0xdf, 0xff, 0xff, 0xff, 0xff, 0xc0},
		"big array": {0xdd, 0x00, 0x10, 0x00, 0x00, 0xc0, 0xc0},
	} {
		cl, err := daemon.Dial(ctx, v.addr, aliceCred)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.CallRaw(ctx, "ps", body); err == nil || !strings.Contains(err.Error(), routing.ErrMalformed.Error()) {
			t.Errorf("%s body: %v, want a malformed frame", name, err)
		}
		cl.Close()
	}

	// A certificate of another CA: the handshake fails, and the master
	// logs it with the address and why.
	other := newCreds(t)
	if cl, err := daemon.Dial(ctx, v.addr, other.cl.Admin); err == nil {
		cl.Close()
		t.Fatal("a certificate of another CA connected")
	}
	v.master.waitFor(regexp.MustCompile(`refused a connection.* from=127\.0\.0\.1:\d+ reason="handshake: `), true)

	// A flood of random datagrams at the master's port, seeded.
	ua, err := net.ResolveUDPAddr("udp", v.addr)
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.DialUDP("udp", nil, ua)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(17, 1))
	buf := make([]byte, 1500)
	const datagrams = 20000
	for i := range datagrams {
		b := buf[:1+rng.IntN(len(buf)-1)]
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		if i%4 == 0 && len(b) >= 1200 {
			// Shaped as a QUIC v1 Initial, so the server parses further.
			b[0], b[1], b[2], b[3], b[4] = 0xc3, 0, 0, 0, 1
		}
		_, _ = udp.Write(b) // loopback drops some when its buffer is full
	}
	udp.Close()

	// The master serves on: the user lists the hosts, an admin runs a
	// program across the machine.
	if hs, err := alice.Hosts(ctx); err != nil || len(hs) != 2 {
		t.Fatalf("after the flood, hosts: %v %v", hs, err)
	}
	if code, out, errOut := dpvm(t, v.env, "run", "hello", "-n", "2"); code != 0 || !strings.Contains(out, "2 children said hello") {
		t.Fatalf("run after the flood: %d\n%s\n%s", code, out, errOut)
	}
	rssAfter := rssMiB(t, v.master)
	const budget = 256
	if rssAfter > budget {
		t.Fatalf("the master holds %d MiB after the flood (%d before), budget %d", rssAfter, rssBefore, budget)
	}
	t.Logf("master RSS %d MiB before, %d MiB after %d random datagrams and the hostile calls", rssBefore, rssAfter, datagrams)
	if code, _, errOut := dpvm(t, v.env, "halt"); code != 0 {
		t.Fatalf("halt: %s", errOut)
	}
	if code := v.master.wait(); code != 0 {
		t.Fatalf("master exited with %d", code)
	}
}

// TestForgedCheckpointsOfProcesses: a job on a master and a host running
// as processes is checkpointed into the shared directory; a manifest
// sealed without the cluster secret, a set whose task files are swapped,
// and a task file altered are each refused by `dpvm restart` with a clear
// error; with the newest set deleted to force an older one, the restart
// goes on from it and the master logs that a newer set was recorded.
func TestForgedCheckpointsOfProcesses(t *testing.T) {
	shared := t.TempDir()
	v := startVM(t, 1, "--shared-dir", shared)
	run := start(t, "pi with checkpoints", v.env, "run", "--master", v.addr, "--checkpoint-every", "200ms",
		"pi", "-workers", "3", "-samples", "4000000000")
	jobDir := filepath.Join(shared, "job-j1")
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m, _ := filepath.Glob(filepath.Join(jobDir, "ckpt-*", "MANIFEST")); len(m) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no two checkpoints after 60 s\n%s\n%s", run.out.String(), run.err.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Stop the job: its sets stay as they are.
	if code, _, errOut := dpvm(t, v.env, "kill", "j1"); code != 0 {
		t.Fatalf("kill j1: %s", errOut)
	}
	run.wait()
	manifests, _ := filepath.Glob(filepath.Join(jobDir, "ckpt-*", "MANIFEST"))
	newest := filepath.Dir(manifests[len(manifests)-1])
	older := filepath.Dir(manifests[len(manifests)-2])
	restart := func(dir string) (int, string) {
		t.Helper()
		code, _, errOut := dpvm(t, v.env, "restart", "--master", v.addr, dir)
		return code, errOut
	}
	files, _ := filepath.Glob(filepath.Join(newest, "task-*.ckpt"))
	if len(files) < 2 {
		t.Fatalf("set %s holds %d task files", newest, len(files))
	}
	read := func(p string) []byte {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	write := func(p string, b []byte) {
		t.Helper()
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// A manifest sealed under a key that is not the cluster secret's.
	manifest := filepath.Join(newest, jobset.ManifestName)
	orig := read(manifest)
	key := v.creds.cl.Secret.Key("job-manifest") // the label daemons derive the manifest key with
	m, err := jobset.ReadManifest(newest, key)
	if err != nil {
		t.Fatal(err)
	}
	forged := bytes.Repeat([]byte{7}, 32)
	if err := os.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	if err := jobset.WriteManifest(newest, m, forged); err != nil {
		t.Fatal(err)
	}
	if code, errOut := restart(newest); code == 0 || !strings.Contains(errOut, "MAC mismatch") {
		t.Fatalf("restart from a forged manifest: %d %s", code, errOut)
	}
	if err := os.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	write(manifest, orig)

	// Two task files swapped: each a valid checkpoint, of another task.
	a, b := read(files[0]), read(files[1])
	write(files[0], b)
	write(files[1], a)
	if code, errOut := restart(newest); code == 0 || !strings.Contains(errOut, "fails authentication") {
		t.Fatalf("restart from a set with swapped files: %d %s", code, errOut)
	}
	// One byte altered.
	alt := append([]byte(nil), a...)
	alt[len(alt)/2] ^= 0x40
	write(files[0], alt)
	write(files[1], b)
	if code, errOut := restart(newest); code == 0 || !strings.Contains(errOut, "fails authentication") {
		t.Fatalf("restart from an altered file: %d %s", code, errOut)
	}
	write(files[0], a)

	// The newest set deleted: the restart goes back to the older one, and
	// the master, which recorded the newer, says so.
	if err := os.RemoveAll(newest); err != nil {
		t.Fatal(err)
	}
	rs := start(t, "restart from the older set", v.env, "restart", "--master", v.addr, jobDir)
	v.master.waitFor(regexp.MustCompile(`job restarts from an older checkpoint set than the newest recorded.* seq=`+strconv.Itoa(seqOf(t, older))), true)
	_ = rs.cmd.Process.Signal(syscall.SIGKILL)
	rs.wait()
}

// seqOf is the sequence number of a set directory's name.
func seqOf(t *testing.T, setDir string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(setDir), "ckpt-"))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestExpiredHostCertificateOfProcesses: a host daemon joins with a
// certificate that expires 6 s later. Once it has, the master deletes the
// host for it, as a lost host is deleted (a renewed host would go on over
// a connection the master dials: daemon's TestHostCertificateEndRollsBack,
// which also rolls a job back); the host, cut off, stops at once, saying
// why; a daemon started again with that certificate refuses to start, and
// the master refuses a handshake with it. The machine serves on without
// it.
func TestExpiredHostCertificateOfProcesses(t *testing.T) {
	v := startVM(t, 1)
	cred, err := v.creds.cl.CA.IssueHost("h3", false, time.Now(), 6*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "h3.pem")
	if err := pki.WriteCredential(file, cred); err != nil {
		t.Fatal(err)
	}
	args := []string{"daemon", "--join", v.addr, "--credential", file, "--listen", "127.0.0.1:0", "--heartbeat", "100ms", "--dead-after", "2s"}
	h3 := start(t, "host 3", nil, args...)
	h3.waitFor(listening, true)
	if code, out, errOut := dpvm(t, v.env, "conf"); code != 0 || !strings.Contains(out, "h3") {
		t.Fatalf("conf with h3: %d\n%s\n%s", code, out, errOut)
	}
	v.master.waitFor(regexp.MustCompile(`msg="host deleted" host=h1 peer=h3 peer_name=h3 reason="the certificate of daemon h3 has expired, and no renewal: `), true)
	if code := h3.wait(); code == 0 || !strings.Contains(h3.err.String(), "this daemon's certificate has expired") {
		t.Fatalf("h3 exited with %d after its certificate expired, want a failure saying why:\n%s", code, h3.err.String())
	}
	again := start(t, "host 3 again", nil, args...)
	if code := again.wait(); code == 0 || !strings.Contains(again.err.String(), "this daemon's certificate has expired") {
		t.Fatalf("a daemon joining with an expired certificate exited with %d:\n%s", code, again.err.String())
	}
	// The master refuses a handshake with it.
	refused := regexp.MustCompile(`msg="refused a connection" host=h1 from=\S+ reason="handshake: [^"]*certificate has expired[^"]*"`)
	before := len(refused.FindAllString(v.master.err.String(), -1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep, err := transport.Dialer(transport.LocalFor(v.addr), cred, transport.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	if c, err := ep.Dial(ctx, v.addr); err == nil {
		// TLS 1.3: the server judges the client's certificate once the
		// client is done; the server then closes the connection.
		select {
		case <-c.Done():
		case <-ctx.Done():
			t.Fatal("the master kept a connection with an expired host certificate")
		}
		c.Close("done")
	}
	var all []string
	for all = refused.FindAllString(v.master.err.String(), -1); len(all) <= before; all = refused.FindAllString(v.master.err.String(), -1) {
		if ctx.Err() != nil {
			t.Fatal("the master did not refuse a handshake with the expired certificate")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, out, errOut := dpvm(t, v.env, "conf"); code != 0 || strings.Contains(out, "h3") || !strings.Contains(out, "h2") {
		t.Fatalf("conf after h3's certificate expired: %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := dpvm(t, v.env, "run", "hello", "-n", "2"); code != 0 || !strings.Contains(out, "2 children said hello") {
		t.Fatalf("run after h3's certificate expired: %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("h3 deleted for its certificate; a handshake with it: %s", all[len(all)-1])
}

// TestLargeFramesOfProcesses: 16 user connections (8 users, 2 each) send
// the master a 40 MiB call frame each, all at once: 640 MiB in flight,
// against a master given 512 MiB for its traffic (--traffic-budget 512:
// FrameBudget 128 MiB, of which clients' calls take at most 64 MiB until
// they are answered, and QUIC windows of 128 KiB) and a memory limit as
// large (GOMEMLIMIT). The frames wait for room, their streams unread; the
// master's frame bytes held at once (dpvm_frame_peak_bytes) stay within
// FrameBudget, and its peak resident memory (VmHWM) within the traffic
// budget plus a base of 64 MiB (its code and what it holds idle: 20-45
// MiB before the flood). Another
// user's call made while the flood is being served is answered, every
// flood call is answered, and the machine runs a program after it.
// (Before calls were counted until answered and decoded without a copy,
// the same flood took a master to 1.7-2.2 GiB resident with a 512 MiB
// frame budget.)
func TestLargeFramesOfProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const traffic, base = 512, 64 // MiB
	// dpvm runs its collector at GOGC=400, which lets the heap grow to
	// five times what is live between collections: a memory limit of the
	// traffic budget keeps that slack within it.
	limit := func(name string) []string {
		if name == "h1" {
			return []string{fmt.Sprintf("GOMEMLIMIT=%dMiB", traffic)}
		}
		return nil
	}
	v := startVMEnv(t, 1, nil, limit, "--metrics-listen", "127.0.0.1:0", "--traffic-budget", strconv.Itoa(traffic))
	url := v.master.waitFor(metricsOn, true)[1]
	const users, conns, size, frameBudget = 8, 2, 40 << 20, traffic << 20 / 4
	dial := func(user string) *daemon.Client {
		cred, err := v.creds.cl.User(user, pki.RoleUser)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := daemon.Dial(ctx, v.addr, cred)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	var clients []*daemon.Client
	for u := range users {
		for range conns {
			clients = append(clients, dial(fmt.Sprintf("user%d", u)))
		}
	}
	other := dial("other")
	// A msgpack bin of size bytes: a well-formed body, of the wrong type
	// for the method.
	body := make([]byte, 5+size)
	body[0] = 0xc6
	binary.BigEndian.PutUint32(body[1:], size)
	rssBefore := rssMiB(t, v.master)
	errs := make(chan error, len(clients))
	for _, cl := range clients {
		go func() {
			_, err := cl.CallRaw(ctx, "ps", body)
			errs <- err
		}()
	}
	// While the flood is served (its bytes held), another user's call is
	// answered.
	for {
		// A scrape the loaded master answers late is asked again.
		if fams, err := metricstest.TryScrape(url); err == nil {
			if held, _ := metricstest.Value(fams, "dpvm_frame_bytes"); held >= size {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatal("no flood call's bytes held")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := other.CallRaw(ctx, "ps", []byte{0x80}); err != nil {
		t.Fatalf("another user's ps during the flood: %v", err)
	}
	answered := len(errs)
	for range clients {
		if err := <-errs; err == nil || ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a call of %d MiB: %v, want an answer refusing its body", size>>20, err)
		}
	}
	fams := metricstest.Scrape(t, url)
	peak, ok := metricstest.Value(fams, "dpvm_frame_peak_bytes")
	if !ok || peak > frameBudget || peak < size {
		t.Fatalf("the master held %v bytes of frames at most (reported: %v), want at least a frame and within FrameBudget (%d)", peak, ok, frameBudget)
	}
	if _, err := other.CallRaw(ctx, "ps", []byte{0x80}); err != nil {
		t.Fatalf("another user's ps after the flood: %v", err)
	}
	if code, out, errOut := dpvm(t, v.env, "run", "hello", "-n", "2"); code != 0 || !strings.Contains(out, "2 children said hello") {
		t.Fatalf("run after the large frames: %d\n%s\n%s", code, out, errOut)
	}
	hwm := statusMiB(t, v.master, "VmHWM")
	t.Logf("%d calls of %d MiB at once (another user's answered after %d of them): frames held at most %d MiB (FrameBudget %d MiB); master resident %d MiB before, %d MiB at most (VmHWM; bound %d + %d MiB)",
		len(clients), size>>20, answered, int(peak)>>20, frameBudget>>20, rssBefore, hwm, traffic, base)
	if hwm > traffic+base {
		t.Errorf("the master's resident memory peaked at %d MiB, over its traffic budget (%d MiB) and a base of %d MiB", hwm, traffic, base)
	}
}
