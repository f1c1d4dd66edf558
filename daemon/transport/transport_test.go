package transport

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/dpvm/dpvm/daemon/pki"
)

func identity(t testing.TB, k *pki.CA, role pki.Role, name string) *pki.Credential {
	t.Helper()
	var id *pki.Credential
	var err error
	if role == pki.RoleDaemon {
		id, err = k.IssueHost(name, false, time.Now(), 0)
	} else {
		id, err = k.IssueUser(name, role, time.Now(), 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestMutualTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key, _ := pki.NewCA(time.Now())
	other, _ := pki.NewCA(time.Now())
	srv, err := Listen("127.0.0.1:0", identity(t, key, pki.RoleDaemon, "h1"), Config{HandshakeTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	accepted := make(chan Conn, 1)
	go func() {
		for {
			c, err := srv.Accept(ctx)
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()

	// A client holding the cluster key gets through, and each side sees
	// the other's role and name.
	cli, err := Dialer(LocalFor(srv.Addr()), identity(t, key, pki.RoleUser, "cli"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	c, err := cli.Dial(ctx, srv.Addr())
	if err != nil {
		t.Fatalf("dial with the cluster key: %v", err)
	}
	if p := c.Peer(); p.Role != pki.RoleDaemon || p.Name != "h1" {
		t.Fatalf("client sees %+v", p)
	}
	sc := <-accepted
	if p := sc.Peer(); p.Role != pki.RoleUser || p.Name != "cli" {
		t.Fatalf("server sees %+v", p)
	}
	st, err := c.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	st.Close()
	ss, err := sc.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(ss)
	if err != nil || string(b) != "ping" {
		t.Fatalf("read %q, %v", b, err)
	}

	// A client with another key is refused.
	bad, err := Dialer(LocalFor(srv.Addr()), identity(t, other, pki.RoleDaemon, "intruder"), Config{HandshakeTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := bad.Dial(ctx, srv.Addr()); err == nil {
		t.Fatal("a client without the cluster key connected")
	}
	// And a server with another key is not trusted by our client.
	rogue, err := Listen("127.0.0.1:0", identity(t, other, pki.RoleDaemon, "rogue"), Config{HandshakeTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	if _, err := cli.Dial(ctx, rogue.Addr()); err == nil {
		t.Fatal("connected to a server without the cluster key")
	}
}

func TestLocalFor(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:9000": "127.0.0.1:0",
		"127.3.2.1:1":    "127.0.0.1:0",
		"localhost:5":    "127.0.0.1:0",
		"[::1]:7":        "[::1]:0",
		"10.1.2.3:4":     ":0",
		"garbage":        ":0",
	} {
		if got := LocalFor(in); got != want {
			t.Errorf("LocalFor(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRestartResetsConnections: an endpoint that goes away without a word
// (its socket closed, as when its process is killed) and comes back at the
// same address with the same credential answers the old connection's
// next packet with a stateless reset, so its peer sees the connection end
// at once instead of after the idle timeout.
func TestRestartResetsConnections(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key, _ := pki.NewCA(time.Now())
	id := identity(t, key, pki.RoleDaemon, "h1")
	cfg := Config{HandshakeTimeout: 2 * time.Second, IdleTimeout: time.Minute}
	srv, err := Listen("127.0.0.1:0", id, cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr()
	go func() {
		for {
			c, err := srv.Accept(ctx)
			if err != nil {
				return
			}
			go func() {
				st, err := c.AcceptStream(ctx)
				if err == nil {
					_, _ = io.Copy(io.Discard, st)
				}
			}()
		}
	}()
	cli, err := Dialer(LocalFor(addr), identity(t, key, pki.RoleDaemon, "h2"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	c, err := cli.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	// The endpoint vanishes: its socket is closed under its connections,
	// which send nothing.
	_ = srv.udp.Close()
	_ = srv.tr.Close()
	again, err := Listen(addr, id, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	// The peer writes on; the new endpoint resets the connection.
	ended := make(chan error, 1)
	go func() {
		_, err := st.Read(make([]byte, 1))
		ended <- err
	}()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-ended:
			var reset *quic.StatelessResetError
			if !errors.As(err, &reset) {
				t.Fatalf("the connection ended with %v, want a stateless reset", err)
			}
			return
		case <-tick.C:
			// Large enough to draw a reset (RFC 9000 §10.3: a reset is
			// smaller than the packet it answers).
			_, _ = st.Write(make([]byte, 64))
		case <-deadline:
			t.Fatal("the connection to the vanished endpoint did not end within 10 s")
		}
	}
}
