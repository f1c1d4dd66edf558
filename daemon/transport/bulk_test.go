package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
)

// TestQUICBulkLane: two daemons' endpoints open bulk streams to each other
// (TLS on TCP, negotiated over their QUIC connection); bytes flow both
// ways. A holder of another certificate of the cluster that connects to
// the bulk listener with a made-up token gets no stream; a client, which
// listens for nothing, offers no lane.
func TestQUICBulkLane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ca, _ := pki.NewCA(time.Now())
	a, err := Listen("127.0.0.1:0", identity(t, ca, pki.RoleDaemon, "h1"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Listen("127.0.0.1:0", identity(t, ca, pki.RoleDaemon, "h2"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.bulk == nil || b.bulk == nil {
		t.Fatal("a listening endpoint opened no bulk listener")
	}
	accepted := make(chan Conn, 1)
	go func() {
		c, err := a.Accept(ctx)
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	cb, err := b.Dial(ctx, a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ca1 := <-accepted
	if ca1 == nil {
		t.Fatal("not accepted")
	}
	payload := make([]byte, 3<<20)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	for _, dir := range []struct {
		name     string
		from, to BulkConn
	}{{"dialer to listener", cb.(BulkConn), ca1.(BulkConn)}, {"listener to dialer", ca1.(BulkConn), cb.(BulkConn)}} {
		s, err := dir.from.OpenBulk(ctx)
		if err != nil {
			t.Fatalf("%s: open: %v", dir.name, err)
		}
		go func() {
			_, _ = s.Write(payload)
		}()
		r, err := dir.to.AcceptBulk(ctx)
		if err != nil {
			t.Fatalf("%s: accept: %v", dir.name, err)
		}
		got := make([]byte, len(payload))
		if _, err := io.ReadFull(r, got); err != nil || string(got) != string(payload) {
			t.Fatalf("%s: read %v", dir.name, err)
		}
	}

	// A certificate of the cluster with a token that names no connection.
	h3 := identity(t, ca, pki.RoleDaemon, "h3")
	nc, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(a.bulk.port())), h3.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write(make([]byte, tokenBytes)); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a bulk stream with a made-up token was kept open (read: %v)", err)
	}
	select {
	case s := <-ca1.(*quicConn).bulk.accept:
		t.Fatalf("a stream with a made-up token was accepted: %v", s)
	default:
	}

	// A client offers no lane: the daemon cannot open one to it.
	cli, err := Dialer(LocalFor(a.Addr()), identity(t, ca, pki.RoleUser, "cli"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	go func() {
		c, err := a.Accept(ctx)
		if err == nil {
			accepted2 <- c
		}
	}()
	cc, err := cli.Dial(ctx, a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close("done")
	srvSide := <-accepted2
	if _, err := srvSide.(BulkConn).OpenBulk(ctx); !errors.Is(err, ErrNoBulk) {
		t.Fatalf("open a bulk stream to a client: %v, want ErrNoBulk", err)
	}
}

var accepted2 = make(chan Conn, 1)

// TestMemBulkReset: the in-memory network's bulk lane carries bytes, and a
// shaper's Reset breaks the bulk stream alone: the connection and its
// other streams live on.
func TestMemBulkReset(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ca, _ := pki.NewCA(time.Now())
	m := NewMem(resetBulk{}, nil)
	a, _ := m.Listen(":0", identity(t, ca, pki.RoleDaemon, "h1"), Config{})
	b, _ := m.Listen(":0", identity(t, ca, pki.RoleDaemon, "h2"), Config{})
	go func() {
		c, err := a.Accept(ctx)
		if err == nil {
			accepted2 <- c
		}
	}()
	cb, err := b.Dial(ctx, a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ca1 := <-accepted2
	s, err := cb.(BulkConn).OpenBulk(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ca1.(BulkConn).AcceptBulk(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("fine")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(r, got); err != nil || string(got) != "fine" {
		t.Fatalf("read %q %v", got, err)
	}
	if _, err := s.Write([]byte("reset")); !errors.Is(err, ErrStreamReset) {
		t.Fatalf("write after reset: %v", err)
	}
	if _, err := r.Read(got); !errors.Is(err, ErrStreamReset) {
		t.Fatalf("read after reset: %v", err)
	}
	// The connection lives: a plain stream still works.
	st, err := cb.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	pst, err := ca1.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(pst, got[:2]); err != nil || string(got[:2]) != "ok" {
		t.Fatalf("plain stream after a reset: %q %v", got[:2], err)
	}
}

// resetBulk resets a bulk stream at the unit "reset".
type resetBulk struct{}

func (resetBulk) Shape(u Unit) Decision {
	return Decision{Reset: u.Bulk && string(u.Data) == "reset"}
}
