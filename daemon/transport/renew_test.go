package transport

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
)

// TestRenewedCertificate: after Renew, new connections in both directions
// present the renewed certificate's serial, and a connection made before
// carries on.
func TestRenewedCertificate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ca, err := pki.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srvID := identity(t, ca, pki.RoleDaemon, "h1")
	cliID := identity(t, ca, pki.RoleDaemon, "h2")
	srv, err := Listen("127.0.0.1:0", srvID, Config{HandshakeTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := Dialer(LocalFor(srv.Addr()), cliID, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// echo accepts connections and echoes the first stream of each.
	accepted := make(chan Conn, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := srv.Accept(ctx)
			if err != nil {
				return
			}
			accepted <- c
			go func() {
				s, err := c.AcceptStream(ctx)
				if err != nil {
					return
				}
				_, _ = io.Copy(s, s)
				s.Close()
			}()
		}
	}()
	dial := func() (Conn, Conn) {
		t.Helper()
		c, err := cli.Dial(ctx, srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		select {
		case sc := <-accepted:
			return c, sc
		case <-ctx.Done():
			t.Fatal("no connection accepted")
		}
		return nil, nil
	}
	echo := func(c Conn) {
		t.Helper()
		s, err := c.OpenStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		s.Close()
		b, err := io.ReadAll(s)
		if err != nil || string(b) != "ping" {
			t.Fatalf("echo: %q %v", b, err)
		}
	}
	old, oldSrv := dial()
	if old.Peer().Serial != srvID.Serial || oldSrv.Peer().Serial != cliID.Serial {
		t.Fatalf("before renewal: the client sees %s, the server %s", old.Peer().Serial, oldSrv.Peer().Serial)
	}

	srvNew, err := ca.IssueHost("h1", false, time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	cliNew, err := ca.IssueHost("h2", false, time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := srvID.Renew(srvNew); err != nil {
		t.Fatal(err)
	}
	if err := cliID.Renew(cliNew); err != nil {
		t.Fatal(err)
	}
	if srvID.Current() != srvNew || cliID.Current() != cliNew {
		t.Fatal("Current is not the renewal")
	}
	c, sc := dial()
	if c.Peer().Serial != srvNew.Serial || sc.Peer().Serial != cliNew.Serial {
		t.Fatalf("after renewal: the client sees %s (want %s), the server %s (want %s)",
			c.Peer().Serial, srvNew.Serial, sc.Peer().Serial, cliNew.Serial)
	}
	echo(c)
	echo(old) // the connection made under the old certificates works on

	// Not a renewal: another name, another role, another CA.
	other, err := pki.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []*pki.Credential{
		identity(t, ca, pki.RoleDaemon, "h3"),
		identity(t, ca, pki.RoleUser, "h1"),
		identity(t, other, pki.RoleDaemon, "h1"),
	} {
		if err := srvID.Renew(bad); !errors.Is(err, pki.ErrNotRenewal) {
			t.Errorf("renew h1 with %s: %v, want ErrNotRenewal", bad.Peer, err)
		}
	}
	if srvID.Current() != srvNew {
		t.Fatal("a refused renewal replaced the credential")
	}
	cancel()
	srv.Close()
	<-done
}

// TestMaxConns: a listener holding MaxConns connections refuses one more
// before its handshake, and takes it once one has ended; every attempt
// proving its address first (RetryAbove negative) still gets through.
func TestMaxConns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ca, err := pki.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Listen("127.0.0.1:0", identity(t, ca, pki.RoleDaemon, "h1"), Config{HandshakeTimeout: 2 * time.Second, MaxConns: 2, RetryAbove: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	go func() {
		for {
			if _, err := srv.Accept(ctx); err != nil {
				return
			}
		}
	}()
	cli, err := Dialer(LocalFor(srv.Addr()), identity(t, ca, pki.RoleAdmin, "root"), Config{HandshakeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var conns []Conn
	for range 2 {
		c, err := cli.Dial(ctx, srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	if _, err := cli.Dial(ctx, srv.Addr()); err == nil {
		t.Fatal("a third connection was accepted, at most 2")
	}
	conns[0].Close("done")
	for {
		c, err := cli.Dial(ctx, srv.Addr())
		if err == nil {
			c.Close("done")
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no connection after one of two ended: %v", err)
		}
	}
}

// TestRefusedHandshakes: a connection whose handshake fails (a certificate
// of another CA) is reported to Config.Refused with the peer's address and
// why; an accepted one is not.
func TestRefusedHandshakes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ca, err := pki.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	type refusal struct{ addr, why string }
	refused := make(chan refusal, 4)
	srv, err := Listen("127.0.0.1:0", identity(t, ca, pki.RoleDaemon, "h1"), Config{HandshakeTimeout: 2 * time.Second,
		Refused: func(addr, why string) { refused <- refusal{addr, why} }})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	accepted := make(chan Conn, 4)
	go func() {
		for {
			c, err := srv.Accept(ctx)
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	good, err := Dialer(LocalFor(srv.Addr()), identity(t, ca, pki.RoleAdmin, "root"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	c, err := good.Dial(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	select { // accepted before it ends: not a refusal
	case <-accepted:
	case <-ctx.Done():
		t.Fatal("the good connection was not accepted")
	}
	c.Close("done")
	bad, err := Dialer(LocalFor(srv.Addr()), identity(t, other, pki.RoleAdmin, "mallory"), Config{HandshakeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := bad.Dial(ctx, srv.Addr()); err == nil {
		t.Fatal("a certificate of another CA connected")
	}
	select {
	case r := <-refused:
		t.Logf("refused from %s: %s", r.addr, r.why)
		if r.addr != bad.Addr() || !strings.Contains(r.why, "handshake") {
			t.Fatalf("refusal %+v, want from %s, naming the handshake", r, bad.Addr())
		}
	case <-ctx.Done():
		t.Fatal("the failed handshake was not reported")
	}
	select {
	case r := <-refused:
		t.Fatalf("a second refusal: %+v", r)
	default:
	}
}
