package ckpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/dpvm/dpvm/task"
)

// seededRand is a deterministic salt source for tests.
func seededRand(seed uint64) io.Reader { return rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}) }

func encodeWith(t testing.TB, o WriteOptions, meta *Meta, st task.Task) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := WriteWith(&buf, testKey, meta, st, o)
	if err != nil {
		t.Fatalf("WriteWith(%v): %v", o.Auth, err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteWith returned %d, wrote %d bytes", n, buf.Len())
	}
	return buf.Bytes()
}

// TestAuthRoundTrip writes and reads states of several sizes (below one
// GMAC segment, several segments, an exact multiple) with each
// authentication, from memory and from a stream of unknown length.
func TestAuthRoundTrip(t *testing.T) {
	for _, n := range []int{0, 100, gmacSegment / 8, 3*gmacSegment/8 + 77, 4 * gmacSegment / 8} {
		want := &big{Iter: n, Data: make([]float64, n)}
		r := rand.New(rand.NewPCG(uint64(n), 2))
		for i := range want.Data {
			want.Data[i] = r.NormFloat64()
		}
		wantMeta := sampleMeta()
		wantMeta.Type = "ckpt-test.big"
		for _, a := range []Auth{AuthHMAC, AuthGMAC, AuthChannel} {
			b := encodeWith(t, WriteOptions{Auth: a, Rand: seededRand(uint64(n))}, sampleMeta(), want)
			if got := binary.LittleEndian.Uint16(b[10:]); got != authFlags(a) {
				t.Fatalf("%v: flags %#x", a, got)
			}
			for _, src := range []io.Reader{bytes.NewReader(b), hideLen{bytes.NewReader(b)}, iotest.HalfReader(bytes.NewReader(b))} {
				m, got, err := ReadLimits(src, testKey, Limits{Channel: true})
				if err != nil {
					t.Fatalf("%v, %d elements: %v", a, n, err)
				}
				if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(m, wantMeta) {
					t.Fatalf("%v, %d elements: read back differs", a, n)
				}
			}
		}
	}
}

// TestGMACSalt: the same state under two salts gives different bytes, one
// salt gives the same bytes, and a salt source that fails fails the write.
func TestGMACSalt(t *testing.T) {
	st := randNumbers(rand.New(rand.NewPCG(3, 3)), 5)
	a := encodeWith(t, WriteOptions{Auth: AuthGMAC, Rand: seededRand(1)}, sampleMeta(), st)
	b := encodeWith(t, WriteOptions{Auth: AuthGMAC, Rand: seededRand(1)}, sampleMeta(), st)
	c := encodeWith(t, WriteOptions{Auth: AuthGMAC, Rand: seededRand(2)}, sampleMeta(), st)
	if !bytes.Equal(a, b) || bytes.Equal(a, c) {
		t.Fatal("salt does not decide the bytes")
	}
	if len(a) != len(encode(t, sampleMeta(), st))+saltSize {
		t.Fatal("a GMAC checkpoint is not an HMAC one plus the salt")
	}
	// The default source is crypto/rand.
	d := encodeWith(t, WriteOptions{Auth: AuthGMAC}, sampleMeta(), st)
	if _, _, err := Read(bytes.NewReader(d), testKey); err != nil {
		t.Fatal(err)
	}
	_, err := WriteWith(io.Discard, testKey, sampleMeta(), st, WriteOptions{Auth: AuthGMAC, Rand: iotest.ErrReader(errors.New("no entropy"))})
	if err == nil {
		t.Fatal("a failing salt source was not reported")
	}
	if _, err := WriteWith(io.Discard, testKey, sampleMeta(), st, WriteOptions{Auth: Auth(9)}); err == nil {
		t.Fatal("unknown authentication accepted")
	}
}

// TestChannelNeedsChannel: a checkpoint without a MAC is refused from a
// source not said to authenticate it, and one whose flags are changed to
// say so is refused too.
func TestChannelNeedsChannel(t *testing.T) {
	st := sampleNested(rand.New(rand.NewPCG(4, 4)))
	b := encodeWith(t, WriteOptions{Auth: AuthChannel}, sampleMeta(), st)
	_, _, err := Read(bytes.NewReader(b), testKey)
	if !errors.Is(err, ErrTampered) || !errors.Is(err, errNoMAC) {
		t.Fatalf("channel checkpoint from a file: %v", err)
	}
	h := encode(t, sampleMeta(), st)
	h[10] = flagChannel
	if _, _, err := Read(bytes.NewReader(h), testKey); !errors.Is(err, ErrTampered) {
		t.Fatalf("HMAC checkpoint relabelled as channel: %v", err)
	}
	// Relabelled and read from a channel: the CRC-32C does not match.
	if _, _, err := ReadLimits(bytes.NewReader(h), testKey, Limits{Channel: true}); !errors.Is(err, ErrTampered) {
		t.Fatalf("HMAC checkpoint relabelled as channel, from a channel: %v", err)
	}
	g := encodeWith(t, WriteOptions{Auth: AuthGMAC, Rand: seededRand(5)}, sampleMeta(), st)
	for _, f := range []uint16{0, flagChannel, flagGMAC | flagChannel, 4} {
		bad := bytes.Clone(g)
		binary.LittleEndian.PutUint16(bad[10:], f)
		if _, _, err := ReadLimits(bytes.NewReader(bad), testKey, Limits{Channel: true}); err == nil {
			t.Fatalf("GMAC checkpoint with flags %#x accepted", f)
		}
	}
}

// TestAuthFlipsAndTruncation: every one-bit flip of small GMAC and channel
// checkpoints, and 300 seeded ones of a GMAC checkpoint of several
// segments, are refused with a sentinel; in the mac, as tampering. Every
// prefix of the small ones and 50 seeded prefixes of the large one (read in
// halves) are refused as truncated.
func TestAuthFlipsAndTruncation(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	bigOne := &big{Iter: 1, Data: make([]float64, 5*gmacSegment/16)}
	for i := range bigOne.Data {
		bigOne.Data[i] = float64(i)
	}
	cases := []struct {
		a     Auth
		st    any
		flips int // random flips; 0: every byte
	}{
		{AuthGMAC, sampleNested(rand.New(rand.NewPCG(7, 7))), 0},
		{AuthChannel, sampleNested(rand.New(rand.NewPCG(8, 8))), 0},
		{AuthGMAC, bigOne, 300},
	}
	for _, c := range cases {
		st := c.st.(task.Task)
		b := encodeWith(t, WriteOptions{Auth: c.a, Rand: seededRand(9)}, sampleMeta(), st)
		lim := Limits{Channel: c.a == AuthChannel}
		mut := make([]byte, len(b))
		check := func(off int) {
			copy(mut, b)
			mut[off] ^= 1 << r.IntN(8)
			m, got, err := ReadLimits(bytes.NewReader(mut), testKey, lim)
			if err == nil || m != nil || got != nil {
				t.Fatalf("%v: flip at %d of %d accepted", c.a, off, len(b))
			}
			if !errors.Is(err, ErrTampered) && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrVersion) {
				t.Fatalf("%v: flip at %d: %v is none of the sentinels", c.a, off, err)
			}
			if off >= len(b)-macSize && !errors.Is(err, ErrTampered) {
				t.Fatalf("%v: flip in the mac at %d: %v", c.a, off, err)
			}
		}
		if c.flips == 0 {
			for off := range b {
				check(off)
			}
			for n := range len(b) {
				if _, _, err := ReadLimits(bytes.NewReader(b[:n]), testKey, lim); !errors.Is(err, ErrTruncated) {
					t.Fatalf("%v: prefix of %d bytes: %v", c.a, n, err)
				}
			}
		} else {
			for range c.flips {
				check(r.IntN(len(b)))
			}
			for range 50 {
				n := r.IntN(len(b))
				if _, _, err := ReadLimits(iotest.HalfReader(bytes.NewReader(b[:n])), testKey, lim); !errors.Is(err, ErrTruncated) {
					t.Fatalf("%v: prefix of %d bytes: %v", c.a, n, err)
				}
			}
		}
		if _, _, err := ReadLimits(bytes.NewReader(b), []byte("another key"), lim); c.a != AuthChannel && !errors.Is(err, ErrTampered) {
			t.Fatalf("%v under another key: %v", c.a, err)
		}
	}
}

// TestGMACSmallStreamStaysSmall: a small checkpoint's MAC buffers only
// what it is given (a whole segment from the pool is faulted in afresh
// after each collection, milliseconds on some machines); a stream of
// several segments fills its first piece by growing it and the later
// ones from the pool, and tags the same bytes as one written at once.
func TestGMACSmallStreamStaysSmall(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	m, err := newGMAC(key, []byte("salt"))
	if err != nil {
		t.Fatal(err)
	}
	m.write(make([]byte, 259))
	if m.pooled || cap(m.seg) > firstSeg {
		t.Fatalf("259 bytes buffered in %d bytes (pooled %v)", cap(m.seg), m.pooled)
	}
	small := m.sum()
	m.stop()

	data := make([]byte, 2*gmacSegment+1000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	whole, err := newGMAC(key, []byte("salt"))
	if err != nil {
		t.Fatal(err)
	}
	whole.write(data)
	bits, err := newGMAC(key, []byte("salt"))
	if err != nil {
		t.Fatal(err)
	}
	for p := data; len(p) > 0; {
		n := min(len(p), 333)
		bits.write(p[:n])
		if bits.next == 1 && bits.seg != nil && !bits.pooled {
			t.Fatal("the second piece is not from the pool")
		}
		p = p[n:]
	}
	if a, b := whole.sum(), bits.sum(); !bytes.Equal(a, b) {
		t.Fatalf("tags differ by how the stream was cut: %x vs %x", a, b)
	}
	whole.stop()
	bits.stop()
	if bytes.Equal(small, make([]byte, len(small))) {
		t.Fatal("empty tag")
	}
}

// TestKeyID: a checkpoint names its key, a reader with several keys picks
// it by that name (under each authentication), an unknown name is refused
// with the reader's error, and a format 1 checkpoint, which names no key,
// is still read under the key given.
func TestKeyID(t *testing.T) {
	other := []byte("fedcba9876543210fedcba9876543210")
	id := KeyID{1, 2, 3, 4, 5, 6, 7, 8}
	errUnknown := errors.New("unknown key")
	keyFor := func(got KeyID) ([]byte, error) {
		if got == id {
			return testKey, nil
		}
		return nil, errUnknown
	}
	state := randNumbers(rand.New(rand.NewPCG(12, 12)), 100)
	for _, a := range []Auth{AuthHMAC, AuthGMAC} {
		var buf bytes.Buffer
		if _, err := WriteWith(&buf, testKey, sampleMeta(), state, WriteOptions{Auth: a, KeyID: id}); err != nil {
			t.Fatal(err)
		}
		b := buf.Bytes()
		if got := KeyID(b[headerSize : headerSize+KeyIDSize]); got != id {
			t.Fatalf("%v: key id %x written, want %x", a, got, id)
		}
		// The key argument is ignored when KeyFor picks one.
		if _, _, err := ReadLimits(bytes.NewReader(b), other, Limits{KeyFor: keyFor}); err != nil {
			t.Fatalf("%v: read by key id: %v", a, err)
		}
		bad := bytes.Clone(b)
		bad[headerSize] ^= 0xff
		_, _, err := ReadLimits(bytes.NewReader(bad), testKey, Limits{KeyFor: keyFor})
		if !errors.Is(err, errUnknown) || !strings.Contains(err.Error(), "fe02030405060708") {
			t.Fatalf("%v: unknown key id: %v", a, err)
		}
		// Without KeyFor the id is authenticated with the rest.
		if _, _, err := Read(bytes.NewReader(bad), testKey); !errors.Is(err, ErrTampered) {
			t.Fatalf("%v: altered key id: %v", a, err)
		}
	}
	var old bytes.Buffer
	if _, err := WriteWith(&old, testKey, sampleMeta(), state, WriteOptions{version: 1}); err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint16(old.Bytes()[8:]); v != 1 {
		t.Fatalf("format %d written, want 1", v)
	}
	if _, _, err := ReadLimits(bytes.NewReader(old.Bytes()), testKey, Limits{KeyFor: keyFor}); err != nil {
		t.Fatalf("format 1: %v", err)
	}
	if _, _, err := ReadLimits(bytes.NewReader(old.Bytes()), other, Limits{KeyFor: keyFor}); !errors.Is(err, ErrTampered) {
		t.Fatalf("format 1 under another key: %v", err)
	}
}
