package transport

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-acc
	if server == nil {
		t.Fatal("no connection accepted")
	}
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return client, server
}

// handshake runs a bulk stream's TLS handshake between two daemons'
// certificates on a loopback connection. With sealed, the ends are what
// the lane uses (sealed records after a handshake that reads no further
// than its own records); without, they are the TLS connections
// themselves, as the lane was before.
func handshake(t testing.TB, sealed bool) (client, server io.ReadWriteCloser) {
	t.Helper()
	ca, _ := pki.NewCA(time.Now())
	a, b := identity(t, ca, pki.RoleDaemon, "h1"), identity(t, ca, pki.RoleDaemon, "h2")
	nc, sc := tcpPair(t)
	var cr, sr net.Conn = nc, sc
	sconf := b.ServerConfig()
	if sealed {
		cr, sr = &recordBounded{Conn: nc}, &recordBounded{Conn: sc}
		sconf.SessionTicketsDisabled = true
	}
	tc, ts := tls.Client(cr, a.ClientConfig()), tls.Server(sr, sconf)
	errc := make(chan error, 1)
	go func() { errc <- ts.Handshake() }()
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !sealed {
		return tc, ts
	}
	c, err := newSealedConn(nc, tc, true)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSealedConn(sc, ts, false)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

// TestSealedConn: bytes written in writes of any size come out the same
// at the other end, read with buffers of any size, both ways at once.
func TestSealedConn(t *testing.T) {
	c, s := handshake(t, true)
	var want []byte
	for i, n := range []int{1, 0, 7, sealWriteRecord - 1, sealWriteRecord, sealWriteRecord + 1, 3*sealWriteRecord + 5, 1 << 20} {
		for j := range n {
			want = append(want, byte(i*31+j*7))
		}
	}
	for _, dir := range []struct {
		name string
		w, r io.ReadWriteCloser
	}{{"client to server", c, s}, {"server to client", s, c}} {
		errc := make(chan error, 1)
		go func() {
			// Writes of the sizes above, then one byte at a time for a while.
			var err error
			rest := want
			for _, n := range []int{1, 0, 7, sealWriteRecord - 1, sealWriteRecord, sealWriteRecord + 1} {
				if _, err = dir.w.Write(rest[:n]); err != nil {
					break
				}
				rest = rest[n:]
			}
			for err == nil && len(rest) > 1<<20 {
				_, err = dir.w.Write(rest[:1])
				rest = rest[1:]
			}
			if err == nil {
				_, err = dir.w.Write(rest)
			}
			errc <- err
		}()
		got := make([]byte, 0, len(want))
		for _, n := range []int{1, 5, 100, 70000, 300000} {
			buf := make([]byte, n)
			for len(got) < len(want) && len(got) < 2*len(want)/3 {
				m, err := dir.r.Read(buf[:min(n, len(want)-len(got))])
				if err != nil {
					t.Fatalf("%s: read: %v", dir.name, err)
				}
				got = append(got, buf[:m]...)
				if n < 1000 && len(got) > len(want)/3 {
					break
				}
			}
		}
		rest := make([]byte, len(want)-len(got))
		if _, err := io.ReadFull(dir.r, rest); err != nil {
			t.Fatalf("%s: read: %v", dir.name, err)
		}
		got = append(got, rest...)
		if err := <-errc; err != nil {
			t.Fatalf("%s: write: %v", dir.name, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: the bytes read are not those written", dir.name)
		}
	}
}

// TestSealedConnRefuses: a record altered on the wire, one replayed, and
// one whose length exceeds the bound all fail with ErrSealedRecord, and
// the stream stays failed.
func TestSealedConnRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		alter func(rec []byte) []byte
	}{
		{"a ciphertext byte flipped", func(rec []byte) []byte { rec[sealHdrBytes+3] ^= 1; return rec }},
		{"a tag byte flipped", func(rec []byte) []byte { rec[len(rec)-1] ^= 0x80; return rec }},
		{"the length changed", func(rec []byte) []byte { rec[0]--; return rec[:len(rec)-1] }},
		{"the record sent twice", func(rec []byte) []byte { return append(rec, rec...) }},
		{"a length past the bound", func([]byte) []byte { return []byte{0, 0, 0x10, 0} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := handshake(t, true)
			sc := s.(*sealedConn)
			// Seal a record with the client's keys, alter it, and send it
			// on the raw connection.
			cc := c.(*sealedConn)
			nonce, err := cc.out.next()
			if err != nil {
				t.Fatal(err)
			}
			hdr := []byte{10, 0, 0, 0}
			rec := cc.out.aead.Seal(hdr, nonce[:], []byte("0123456789"), hdr)
			if _, err := cc.c.Write(tc.alter(rec)); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64)
			var n int
			for err == nil {
				n, err = sc.Read(buf)
				if err == nil && (tc.name != "the record sent twice" || string(buf[:n]) != "0123456789") {
					t.Fatalf("read %q from an altered stream", buf[:n])
				}
			}
			if !errors.Is(err, ErrSealedRecord) {
				t.Fatalf("read: %v, want ErrSealedRecord", err)
			}
			if _, err2 := sc.Read(buf); !errors.Is(err2, ErrSealedRecord) {
				t.Fatalf("a second read: %v, want ErrSealedRecord", err2)
			}
		})
	}
}

// TestSealedConnEmptyRecord: an empty record is skipped: Read returns the
// next record's bytes, never 0 bytes without an error.
func TestSealedConnEmptyRecord(t *testing.T) {
	c, s := handshake(t, true)
	cc := c.(*sealedConn)
	for _, p := range []string{"", "", "x"} {
		cc.wmu.Lock()
		err := cc.writeRecord([]byte(p))
		cc.wmu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 64)
	if n, err := s.Read(buf); n != 1 || err != nil || buf[0] != 'x' {
		t.Fatalf("read %q, %v; want \"x\"", buf[:n], err)
	}
}

// TestSealKeysRekey: both ends change keys at the same record, and a
// record sealed under the old key does not open under the new one.
func TestSealKeysRekey(t *testing.T) {
	key := bytes.Repeat([]byte{7}, sealKeyBytes)
	w, _ := newSealKeys(key)
	r, _ := newSealKeys(key)
	w.seq, r.seq = sealRekeyRecords-1, sealRekeyRecords-1
	var sealed [][]byte
	for i := range 3 {
		n, err := w.next()
		if err != nil {
			t.Fatal(err)
		}
		sealed = append(sealed, w.aead.Seal(nil, n[:], []byte{byte(i)}, nil))
	}
	if bytes.Equal(w.key[:], key) {
		t.Fatal("the key did not change after sealRekeyRecords records")
	}
	for i, ct := range sealed {
		n, err := r.next()
		if err != nil {
			t.Fatal(err)
		}
		if p, err := r.aead.Open(nil, n[:], ct, nil); err != nil || !bytes.Equal(p, []byte{byte(i)}) {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	old, _ := newSealKeys(key)
	n, _ := old.next()
	if _, err := r.aead.Open(nil, n[:], old.aead.Seal(nil, n[:], []byte{1}, nil), nil); err == nil {
		t.Fatal("a record sealed under the old key opened under the new one")
	}
}

// BenchmarkBulkStream compares the lane's streams side by side: TLS
// records (how the lane was) and sealed records, 1 MiB messages sent and
// echoed back on loopback; ns/op is a round trip.
//
//	go test -run '^$' -bench BulkStream -count 3 ./daemon/transport
func BenchmarkBulkStream(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		for _, v := range []struct {
			name   string
			sealed bool
		}{{"tls", false}, {"sealed", true}} {
			b.Run(v.name+"/"+sizeLabel(size), func(b *testing.B) {
				c, s := handshake(b, v.sealed)
				go func() {
					buf := make([]byte, size)
					for {
						if _, err := io.ReadFull(s, buf); err != nil {
							return
						}
						if _, err := s.Write(buf); err != nil {
							return
						}
					}
				}()
				msg := bytes.Repeat([]byte{0xa5}, size)
				in := make([]byte, size)
				b.SetBytes(int64(2 * size))
				cpu := processCPU()
				for b.Loop() {
					if _, err := c.Write(msg); err != nil {
						b.Fatal(err)
					}
					if _, err := io.ReadFull(c, in); err != nil {
						b.Fatal(err)
					}
				}
				// CPU time of both ends: on a shared machine it moves less
				// with the load than the time does.
				b.ReportMetric(float64(processCPU()-cpu)/float64(b.N)/1e3, "cpu-µs/op")
			})
		}
	}
}

// processCPU is the CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func sizeLabel(n int) string {
	if n >= 1<<20 {
		return "1MiB"
	}
	return "64KiB"
}
