package daemon

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/ckpt"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// TestAuthorizeTable: which certificate may call which method.
func TestAuthorizeTable(t *testing.T) {
	user := &peer{cert: pki.Peer{Role: pki.RoleUser, Name: "alice"}}
	admin := &peer{cert: pki.Peer{Role: pki.RoleAdmin, Name: "root"}}
	host := &peer{cert: pki.Peer{Role: pki.RoleDaemon, Name: "h2"}}
	master := &peer{cert: pki.Peer{Role: pki.RoleDaemon, Name: "h1", Master: true}}
	stranger := &peer{cert: pki.Peer{Role: "ghost", Name: "x"}}
	cases := []struct {
		p      *peer
		method string
		ok     bool
	}{
		{nil, mMigSusp, true},
		{user, mPS, true}, {user, mSpawn, true}, {user, mKill, true}, {user, mMigrate, true}, {user, mCheckpoint, true},
		{user, mHalt, false}, {user, mDelete, false}, {user, mInject, false},
		{user, mJoin, false}, {user, mMigSusp, false}, {user, mCkLoad, false}, {user, mStart, false},
		{admin, mHalt, true}, {admin, mDelete, true}, {admin, mInject, true},
		{admin, mMigSend, false}, {admin, mCkWrite, false}, {admin, mInjectHere, false},
		{host, mJoin, true}, {host, mWait, true}, {host, mStart, false}, {host, mWatch, false},
		{master, mStart, true}, {master, mWatch, true},
		{host, mMigSusp, false}, {host, mMigLoad, false}, {host, mCkPause, false}, {host, mCkLoad, false}, {host, mInjectHere, false},
		{master, mMigSusp, true}, {master, mCkLoad, true}, {master, mInjectHere, true},
		{stranger, mPS, false},
	}
	for _, c := range cases {
		err := authorize(c.p, c.method)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, ErrForbidden) {
			who := "self"
			if c.p != nil {
				who = c.p.cert.String()
			}
			t.Errorf("%s calling %s: %v, want allowed=%v", who, c.method, err, c.ok)
		}
	}
}

// TestRolesOverQUIC: between real daemons, a user certificate is refused
// admin-only and daemon-only methods, a host other than the master may not
// drive a move step, and a host certificate cannot claim another host's
// identity nor join as the master's.
func TestRolesOverQUIC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vm := startVM(t, 3, Config{})
	m := vm.Master()
	alice, err := vm.Cluster.User("alice", pki.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := Dial(ctx, m.Addr(), alice)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if hs, err := cl.Hosts(ctx); err != nil || len(hs) != 3 {
		t.Fatalf("a user lists the hosts: %v %v", hs, err)
	}
	if err := cl.call(ctx, mHalt, nil, nil); !errors.Is(err, ErrForbidden) {
		t.Fatalf("a user halted: %v", err)
	}
	if err := cl.call(ctx, mMigSusp, migStep{TID: task.NewTID(2, 1)}, nil); !errors.Is(err, ErrForbidden) {
		t.Fatalf("a user called a move step: %v", err)
	}
	if _, err := Dial(ctx, m.Addr(), vm.Cluster.Master); !errors.Is(err, ErrForbidden) {
		t.Fatalf("a client with a host certificate: %v", err)
	}

	// h3 asks h2 to suspend a task: only the master may.
	h3 := vm.Daemons[2]
	if err := h3.callHost(ctx, 2, mMigSusp, migStep{TID: task.NewTID(2, 1)}, nil); !errors.Is(err, ErrForbidden) {
		t.Fatalf("a host drove a move step: %v", err)
	}
	if err := h3.callHost(ctx, 2, mCkPause, ckStep{Job: 1}, nil); !errors.Is(err, ErrForbidden) {
		t.Fatalf("a host drove a checkpoint step: %v", err)
	}
	// Nor start tasks there: a host's spawns go through the master, which
	// counts them against the quotas.
	if err := h3.callHost(ctx, 2, mStart, spawnArgs{Req: task.SpawnRequest{Type: "x", Count: 1}}, nil); !errors.Is(err, ErrForbidden) {
		t.Fatalf("a host started tasks on another: %v", err)
	}

	// A daemon holding h3's certificate says it is h2.
	h3cred, err := vm.Cluster.Host("h3")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := transport.Dialer(transport.LocalFor(m.Addr()), h3cred, transport.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	_, err = greet(ctx, tr, m.Addr(), &hello{Host: 2, Name: "h2", Addr: "127.0.0.1:1", Info: HostInfo{ID: 2, Name: "h2"}}, routing.DefaultMaxFrame)
	if err == nil || !strings.Contains(err.Error(), "cannot speak for host h2") {
		t.Fatalf("h3's certificate spoke for h2: %v", err)
	}
	// A second master certificate does not join.
	if _, err := greet(ctx, tr, m.Addr(), &hello{Name: "h1", Addr: "127.0.0.1:1", Join: true, Info: HostInfo{Build: ThisBuild()}}, routing.DefaultMaxFrame); err == nil {
		t.Fatal("a host joined with h3's certificate while h3 is in the machine")
	}
	mtr, err := transport.Dialer(transport.LocalFor(m.Addr()), vm.Cluster.Master, transport.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer mtr.Close()
	_, err = greet(ctx, mtr, m.Addr(), &hello{Addr: "127.0.0.1:1", Join: true, Info: HostInfo{Build: ThisBuild()}}, routing.DefaultMaxFrame)
	if err == nil || !strings.Contains(err.Error(), "cannot join as a host") {
		t.Fatalf("the master's certificate joined as a host: %v", err)
	}
	// The machine goes on.
	if err := cl.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointKeyRotation: a checkpoint written under the cluster
// secret's key verifies after the secret is rotated (the old key second),
// whether it names its key (format 2, read under that key alone) or not
// (format 1, as older builds wrote it: every key is tried); once rotations
// have dropped the key, the first is refused with an error naming the key,
// the second as failing authentication.
func TestCheckpointKeyRotation(t *testing.T) {
	old, err := pki.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := old.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	dropped := rotated
	for range pki.MaxSecrets {
		if dropped, err = dropped.Rotate(); err != nil {
			t.Fatal(err)
		}
	}
	if slices.Contains(dropped.IDs(), old.IDs()[0]) {
		t.Fatal("the old key survived the rotations")
	}
	dir := ckpt.Dir{Path: t.TempDir()}
	st := &fnTask{Fn: "x", Arg: 7}
	w := New(Config{Secret: old})
	defer w.Halt(context.Background())
	key, id := w.keyID(labelCkpt)
	var named []byte
	if _, err := dir.Save("named.ckpt", func(out io.Writer) error {
		var b bytes.Buffer
		_, err := ckpt.WriteWith(io.MultiWriter(out, &b), key, &ckpt.Meta{TID: task.NewTID(2, 5)}, st, ckpt.WriteOptions{KeyID: id})
		named = b.Bytes()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := dir.Save("format1.ckpt", func(out io.Writer) error {
		_, err := out.Write(asFormat1(t, named, key))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	d := New(Config{Secret: rotated})
	defer d.Halt(context.Background())
	for _, name := range []string{"named.ckpt", "format1.ckpt"} {
		meta, got, err := d.readCkptFile(dir, name)
		if err != nil || meta.TID != task.NewTID(2, 5) || got.(*fnTask).Arg != 7 {
			t.Fatalf("%s read under the rotated secret: %v %+v", name, err, got)
		}
	}
	if k, _ := d.keyID(labelCkpt); k == nil || bytes.Equal(k, key) {
		t.Fatal("the rotated secret does not write under its new key")
	}
	d2 := New(Config{Secret: dropped})
	defer d2.Halt(context.Background())
	_, _, err = d2.readCkptFile(dir, "named.ckpt")
	if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), "authenticated with key "+old.IDs()[0]+", which this daemon's keyring does not hold") {
		t.Fatalf("read after the key was dropped: %v", err)
	}
	if _, _, err := d2.readCkptFile(dir, "format1.ckpt"); !errors.Is(err, ckpt.ErrTampered) {
		t.Fatalf("format 1 read after the key was dropped: %v", err)
	}
}

// asFormat1 rewrites an HMAC checkpoint of format 2 as format 1, the
// format of older builds: no key id, and the trailer's length and MAC
// recomputed under key.
func asFormat1(t *testing.T, b, key []byte) []byte {
	t.Helper()
	const header, idLen, trailer = 16, 8, 41
	if binary.LittleEndian.Uint16(b[8:]) != 2 || binary.LittleEndian.Uint16(b[10:]) != 0 {
		t.Fatal("asFormat1: not an HMAC checkpoint of format 2")
	}
	out := append([]byte(nil), b[:header]...)
	binary.LittleEndian.PutUint16(out[8:], 1)
	out = append(out, b[header+idLen:len(b)-trailer]...)
	out = append(out, 'E')
	out = binary.LittleEndian.AppendUint64(out, uint64(len(out)-1))
	mac := hmac.New(sha256.New, key)
	mac.Write(out)
	out = mac.Sum(out)
	if _, _, err := ckpt.Read(bytes.NewReader(out), key); err != nil {
		t.Fatalf("asFormat1: %v", err)
	}
	return out
}

// TestRevocation: a certificate added to the master's revocation list
// loses its connection, is refused at the next handshake, and the list
// reaches the hosts.
func TestRevocation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list := filepath.Join(t.TempDir(), "revoked")
	vm := startVM(t, 2, Config{RevokedFile: list})
	m := vm.Master()
	alice, err := vm.Cluster.User("alice", pki.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := Dial(ctx, m.Addr(), alice)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pki.AppendRevoked(list, alice.Serial, "alice"); err != nil {
		t.Fatal(err)
	}
	if !m.reloadRevoked() {
		t.Fatal("the master did not take up the revocation list")
	}
	select {
	case <-cl.closed:
	case <-ctx.Done():
		t.Fatal("the revoked client kept its connection")
	}
	if _, err := Dial(ctx, m.Addr(), alice); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("a revoked certificate connected: %v", err)
	}
	h2 := vm.Daemons[1]
	for !h2.revoked.Load().Has(alice.Serial) {
		select {
		case <-ctx.Done():
			t.Fatal("the revocation list did not reach the host")
		case <-time.After(10 * time.Millisecond):
		}
	}
	// Others still get in.
	cl2, err := Dial(ctx, m.Addr(), vm.Cluster.Admin)
	if err != nil {
		t.Fatal(err)
	}
	cl2.Close()
}

// TestExpiryWarning: a daemon whose certificate expires within the
// warning period says so, once a day.
func TestExpiryWarning(t *testing.T) {
	cl, err := pki.NewCluster(time.Now(), "h1", "admin")
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	d := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer d.Halt(context.Background())
	d.cfg.Credential = cl.Master
	now := cl.Master.NotAfter.Add(-10 * 24 * time.Hour)
	d.checkExpiry(now)
	d.checkExpiry(now.Add(time.Hour))
	if n := strings.Count(logs.String(), "certificate expires soon"); n != 1 {
		t.Fatalf("%d warnings within a day, want 1:\n%s", n, logs.String())
	}
	d.checkExpiry(now.Add(25 * time.Hour))
	if n := strings.Count(logs.String(), "certificate expires soon"); n != 2 {
		t.Fatalf("%d warnings after a day, want 2", n)
	}
	d.expiryWarn.Store(0)
	d.checkExpiry(cl.Master.NotAfter.Add(-60 * 24 * time.Hour))
	if n := strings.Count(logs.String(), "certificate expires soon"); n != 2 {
		t.Fatal("a warning two months before expiry")
	}
}

// TestOwnership: a user kills and migrates the tasks they spawned and the
// tasks of jobs they started, not another user's; an admin any.
func TestOwnership(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vm := startVM(t, 2, Config{})
	m := vm.Master()
	dial := func(name string, role pki.Role) *Client {
		cred, err := vm.Cluster.User(name, role)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := Dial(ctx, m.Addr(), cred)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	alice, bob := dial("alice", pki.RoleUser), dial("bob", pki.RoleUser)
	admin := adminClient(t, ctx, vm)
	typ, state, err := task.EncodeState(fn(t, func(c *task.Ctx, _ int) error {
		_, err := c.Recv(task.AnyTask, task.AnyTag, nil)
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	tids, err := alice.Spawn(ctx, typ, state, 2, "")
	if err != nil || len(tids) != 2 {
		t.Fatalf("alice spawns: %v %v", tids, err)
	}
	if err := bob.Kill(ctx, tids[0]); !errors.Is(err, ErrForbidden) {
		t.Fatalf("bob killed alice's task: %v", err)
	}
	if _, err := bob.Migrate(ctx, tids[0], "h1", Direct); !errors.Is(err, ErrForbidden) {
		t.Fatalf("bob migrated alice's task: %v", err)
	}
	if err := alice.Kill(ctx, tids[0]); err != nil {
		t.Fatalf("alice kills her task: %v", err)
	}
	if err := admin.Kill(ctx, tids[1]); err != nil {
		t.Fatalf("the admin kills alice's task: %v", err)
	}
	// A job's tasks are its owner's.
	roots, err := alice.SpawnRoots(ctx, typ, state, 1, "", JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := bob.Kill(ctx, roots[0]); !errors.Is(err, ErrForbidden) {
		t.Fatalf("bob killed alice's job: %v", err)
	}
	if err := alice.Kill(ctx, roots[0]); err != nil {
		t.Fatalf("alice kills her job's root: %v", err)
	}
	// A task nobody spawned as a person is an admin's.
	own, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error {
		_, err := c.Recv(task.AnyTask, task.AnyTag, nil)
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := alice.Kill(ctx, own); !errors.Is(err, ErrForbidden) {
		t.Fatalf("alice killed a task of nobody's: %v", err)
	}
	if err := admin.Kill(ctx, own); err != nil {
		t.Fatal(err)
	}
}

// TestConfineDir: a client may name directories inside the shared
// directory or an allowed one, not outside them, by .. or by a symbolic
// link.
func TestConfineDir(t *testing.T) {
	base := t.TempDir()
	shared := filepath.Join(base, "shared")
	allowed := filepath.Join(base, "allowed")
	outside := filepath.Join(base, "outside")
	for _, dir := range []string{shared, allowed, outside} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(shared, "escape")); err != nil {
		t.Fatal(err)
	}
	d := New(Config{SharedDir: shared, AllowDirs: []string{allowed}})
	defer d.Halt(context.Background())
	for dir, ok := range map[string]bool{
		"":                                     true,
		shared:                                 true,
		filepath.Join(shared, "job/ckpt-1"):    true,
		filepath.Join(allowed, "x"):            true,
		outside:                                false,
		filepath.Join(shared, "..", "outside"): false,
		filepath.Join(shared, "escape", "x"):   false,
		"/etc":                                 false,
		base:                                   false,
	} {
		err := d.confineDir(dir)
		if (err == nil) != ok || err != nil && !errors.Is(err, ErrOutsideShared) {
			t.Errorf("%q: %v, want allowed=%v", dir, err, ok)
		}
	}
	none := New(Config{})
	defer none.Halt(context.Background())
	if err := none.confineDir(shared); !errors.Is(err, ErrOutsideShared) {
		t.Errorf("no shared directory: %v", err)
	}
}
