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

// byIndex shapes units by their index in the stream.
type byIndex map[int]Decision

func (b byIndex) Shape(u Unit) Decision { return b[u.Index] }

func memPair(t *testing.T, sh Shaper) (Stream, Stream, Conn, Conn) {
	t.Helper()
	k, err := pki.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	m := NewMem(sh, nil)
	l, err := m.Listen("127.0.0.1:0", identity(t, k, pki.RoleDaemon, "a"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := m.Dialer(l.Addr(), identity(t, k, pki.RoleDaemon, "b"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cc, err := d.Dial(ctx, l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cc.Peer().Name != "a" || sc.Peer().Name != "b" || cc.RemoteAddr() != l.Addr() {
		t.Fatalf("peers %+v %+v, remote %s", cc.Peer(), sc.Peer(), cc.RemoteAddr())
	}
	cs, err := cc.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := sc.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return cs, ss, cc, sc
}

func TestMemShaping(t *testing.T) {
	// Unit 1 is lost, 2 is held back past 3, 4 is delayed (and 5 waits for
	// it), 6 is held and flushed by 7.
	sh := byIndex{1: {Drop: true}, 2: {Hold: true}, 4: {Delay: time.Millisecond},
		6: {Hold: true}, 7: {Flush: true}}
	cs, ss, _, _ := memPair(t, sh)
	for _, w := range []string{"0", "1", "2", "3", "4", "5", "6", "7"} {
		if _, err := cs.Write([]byte(w)); err != nil {
			t.Fatal(err)
		}
	}
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(ss)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "0324567" {
		t.Fatalf("got %q, want 0324567", got)
	}
}

func TestMemFramesAndRaw(t *testing.T) {
	// Frames of one length byte; the shaper drops frame 1 and turns to raw
	// bytes after frame 2.
	var seen []string
	sh := shaperFunc(func(u Unit) Decision {
		seen = append(seen, string(u.Data))
		return Decision{Drop: u.Index == 1, Raw: u.Index == 2}
	})
	m := NewMem(sh, func(b []byte) int {
		if len(b) == 0 || len(b) < 1+int(b[0]) {
			return 0
		}
		return 1 + int(b[0])
	})
	k, _ := pki.NewCA(time.Now())
	l, _ := m.Listen("", identity(t, k, pki.RoleDaemon, "a"), Config{})
	d, _ := m.Dialer("", identity(t, k, pki.RoleDaemon, "b"), Config{})
	ctx := context.Background()
	cc, err := d.Dial(ctx, l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	sc, _ := l.Accept(ctx)
	cs, _ := cc.OpenStream(ctx)
	ss, _ := sc.AcceptStream(ctx)
	// Frames split across writes and several in one write.
	for _, w := range []string{"\x02a", "b\x01c\x01", "d", "rawbytes"} {
		if _, err := cs.Write([]byte(w)); err != nil {
			t.Fatal(err)
		}
	}
	cs.Close()
	got, _ := io.ReadAll(ss)
	if string(got) != "\x02ab\x01drawbytes" {
		t.Fatalf("got %q", got)
	}
	if strings.Join(seen, "|") != "\x02ab|\x01c|\x01d|rawbytes" {
		t.Fatalf("units %q", seen)
	}
}

type shaperFunc func(Unit) Decision

func (f shaperFunc) Shape(u Unit) Decision { return f(u) }

func TestMemCutAndAbort(t *testing.T) {
	cs, ss, cc, sc := memPair(t, byIndex{2: {Cut: true}})
	cs.Write([]byte("a"))
	cs.Write([]byte("b"))
	if _, err := cs.Write([]byte("c")); !errors.Is(err, ErrConnLost) {
		t.Fatalf("write after a cut: %v", err)
	}
	<-cc.Done()
	<-sc.Done()
	buf := make([]byte, 8)
	n, _ := ss.Read(buf)
	if string(buf[:n]) != "ab" {
		t.Fatalf("read %q before the cut", buf[:n])
	}
	if _, err := ss.Read(buf); !errors.Is(err, ErrConnLost) {
		t.Fatalf("read after a cut: %v", err)
	}

	// A crashed endpoint: its side ends, the other hears silence.
	k, _ := pki.NewCA(time.Now())
	m := NewMem(nil, nil)
	l, _ := m.Listen("", identity(t, k, pki.RoleDaemon, "a"), Config{})
	d, _ := m.Dialer("", identity(t, k, pki.RoleDaemon, "b"), Config{})
	ctx := context.Background()
	c1, err := d.Dial(ctx, l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := l.Accept(ctx)
	l.Abort()
	<-c2.Done()
	select {
	case <-c1.Done():
		t.Fatal("the crash was announced")
	default:
	}
	s1, err := c1.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Write([]byte("into the void")); err != nil {
		t.Fatalf("write to a silent peer: %v", err)
	}
	if _, err := d.Dial(ctx, l.Addr()); err == nil {
		t.Fatal("dialled a crashed endpoint")
	}
	c1.Close("giving up")
	<-c1.Done()
	if _, err := l.Accept(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("accept after abort: %v", err)
	}
}

func TestMemRefusesStrangers(t *testing.T) {
	k1, _ := pki.NewCA(time.Now())
	k2, _ := pki.NewCA(time.Now())
	m := NewMem(nil, nil)
	l, _ := m.Listen("", identity(t, k1, pki.RoleDaemon, "a"), Config{})
	d, _ := m.Dialer("", identity(t, k2, pki.RoleDaemon, "stranger"), Config{})
	if _, err := d.Dial(context.Background(), l.Addr()); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("a stranger dialled in: %v", err)
	}
	if _, err := d.Dial(context.Background(), "mem:99"); err == nil {
		t.Fatal("dialled nobody")
	}
}
