package ckpt

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"runtime"
	"sync"
)

// Auth is how a checkpoint is authenticated (the header's flags say which).
type Auth uint8

// Authentication modes.
const (
	// AuthHMAC: HMAC-SHA256 under the cluster's checkpoint key over every
	// byte (flags 0). Deterministic bytes, one core.
	AuthHMAC Auth = iota
	// AuthGMAC: a GMAC tag (AES-256-GCM with the bytes as additional data)
	// for every MiB under a key derived from the cluster's key and a random
	// salt, then HMAC-SHA256 over the tags (flag 1). The tags are computed
	// in parallel, and AES-GCM runs several times faster than SHA-256 where
	// Go cannot use the SHA instructions. For checkpoints at rest.
	AuthGMAC
	// AuthChannel: no MAC, only a CRC-32C of the bytes (flag 2), for a
	// checkpoint carried by a channel that authenticates its peer and
	// protects its bytes (a QUIC stream between daemons under mutual TLS).
	// A reader accepts it only when told its source is such a channel
	// (Limits.Channel).
	AuthChannel
)

func (a Auth) String() string {
	switch a {
	case AuthHMAC:
		return "hmac"
	case AuthGMAC:
		return "gmac"
	case AuthChannel:
		return "channel"
	}
	return fmt.Sprintf("Auth(%d)", uint8(a))
}

// Header flags (see doc.go).
const (
	flagGMAC    = 1 << 0
	flagChannel = 1 << 1
	knownFlags  = flagGMAC | flagChannel
)

// saltSize is the length of the salt that follows the header of an
// AuthGMAC checkpoint.
const saltSize = 16

// gmacSegment is the length of the pieces of the byte stream that get a
// GMAC tag each.
const gmacSegment = 1 << 20

// gmacLabel prefixes the salt in the derivation of an AuthGMAC checkpoint's
// key from the cluster's key.
const gmacLabel = "dpvm checkpoint gmac v1\x00"

// WriteOptions are the choices of WriteWith. The zero value is Write's:
// AuthHMAC.
type WriteOptions struct {
	// Auth selects the authentication.
	Auth Auth
	// Rand supplies AuthGMAC's salt (default crypto/rand.Reader). Two
	// checkpoints under one key must never share a salt.
	Rand io.Reader
	// KeyID names key in the checkpoint, so that a reader holding several
	// keys picks the right one (Limits.KeyFor).
	KeyID KeyID
	// version, if not zero, is the format written (tests write format 1,
	// as older builds did, to check that it is still read).
	version uint16
}

// mac authenticates a byte stream in order. write hashes p before it
// returns or copies it; writeAsync may keep p until sum or stop, which the
// caller does not change meanwhile (the memory of a numeric block).
type mac interface {
	write(p []byte)
	writeAsync(p []byte)
	// sum returns the trailer's 32-byte mac field for the bytes so far.
	sum() []byte
	// stop ends any goroutine, once pending work is done.
	stop()
}

// flagsAuth maps a header's flags to the authentication they name.
func flagsAuth(flags uint16) (Auth, error) {
	switch flags {
	case 0:
		return AuthHMAC, nil
	case flagGMAC:
		return AuthGMAC, nil
	case flagChannel:
		return AuthChannel, nil
	}
	return 0, fmt.Errorf("header: flags %#x (known: %#x, one at a time): %w", flags, knownFlags, ErrCorrupt)
}

func authFlags(a Auth) uint16 {
	switch a {
	case AuthGMAC:
		return flagGMAC
	case AuthChannel:
		return flagChannel
	}
	return 0
}

// newSalt draws a salt from r.
func newSalt(r io.Reader) ([]byte, error) {
	if r == nil {
		r = rand.Reader
	}
	s := make([]byte, saltSize)
	if _, err := io.ReadFull(r, s); err != nil {
		return nil, fmt.Errorf("salt: %w", err)
	}
	return s, nil
}

// crcMAC is AuthChannel's check: CRC-32C, little endian, then zeros.
type crcMAC struct{ c uint32 }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (m *crcMAC) write(p []byte)      { m.c = crc32.Update(m.c, castagnoli, p) }
func (m *crcMAC) writeAsync(p []byte) { m.write(p) }
func (m *crcMAC) stop()               {}
func (m *crcMAC) sum() []byte {
	out := make([]byte, macSize)
	binary.LittleEndian.PutUint32(out, m.c)
	return out
}

// gmacMAC is AuthGMAC: the stream is cut into gmacSegment pieces; piece i
// gets tag_i = AES-256-GCM-Seal(key K, nonce le64(i)‖0000, no plaintext,
// additional data piece i), with K = HMAC-SHA256(checkpoint key, gmacLabel ‖
// salt); the mac is HMAC-SHA256(K, tag_0 ‖ … ‖ tag_n-1 ‖ le64(bytes)). Full
// pieces are tagged by worker goroutines while the stream goes on.
type gmacMAC struct {
	k    []byte
	aead cipher.AEAD
	seg  []byte // the piece being filled
	// pooled says seg came from segPool (and goes back to it).
	pooled bool
	n      uint64 // bytes so far
	next   uint64 // index of the piece being filled

	jobs chan gmacJob
	wg   sync.WaitGroup // pieces being tagged
	mu   sync.Mutex
	tags []byte // 16 bytes per piece, filled by the workers
}

type gmacJob struct {
	i      uint64
	seg    []byte
	pooled bool
}

var segPool = sync.Pool{New: func() any { b := make([]byte, 0, gmacSegment); return &b }}

// firstSeg is the starting capacity of a stream's first piece, which grows
// with the stream: a small checkpoint never takes (and, after a collection
// emptied segPool, faults in) a whole segment's memory, which costs
// milliseconds on a machine slow to fault in pages.
const firstSeg = 4 << 10

func newGMAC(key, salt []byte) (*gmacMAC, error) {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(gmacLabel))
	h.Write(salt)
	k := h.Sum(nil)
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &gmacMAC{k: k, aead: aead}, nil
}

func (m *gmacMAC) write(p []byte) {
	for len(p) > 0 {
		if m.seg == nil {
			if m.next == 0 {
				m.seg, m.pooled = make([]byte, 0, firstSeg), false
			} else {
				m.seg, m.pooled = (*segPool.Get().(*[]byte))[:0], true
			}
		}
		c := min(len(p), gmacSegment-len(m.seg))
		m.seg = append(m.seg, p[:c]...)
		m.n += uint64(c)
		p = p[c:]
		if len(m.seg) == gmacSegment {
			m.dispatch()
		}
	}
}

// writeAsync tags the whole pieces inside p where they are (p does not
// change until sum or stop) and copies only the rest.
func (m *gmacMAC) writeAsync(p []byte) {
	for len(p) > 0 {
		if len(m.seg) == 0 && len(p) >= gmacSegment {
			m.send(p[:gmacSegment], false)
			m.n += gmacSegment
			p = p[gmacSegment:]
			continue
		}
		c := min(len(p), gmacSegment-len(m.seg))
		m.write(p[:c])
		p = p[c:]
	}
}

// dispatch hands the full piece being filled to the workers.
func (m *gmacMAC) dispatch() {
	m.send(m.seg, m.pooled)
	m.seg = nil
}

// send hands piece m.next to the workers; pooled says its buffer goes back
// to segPool once tagged.
func (m *gmacMAC) send(seg []byte, pooled bool) {
	if m.jobs == nil {
		workers := min(max(runtime.GOMAXPROCS(0), 1), 4)
		m.jobs = make(chan gmacJob, 2*workers)
		for range workers {
			go func(jobs <-chan gmacJob) {
				for j := range jobs {
					m.tag(j.i, j.seg, j.pooled)
					m.wg.Done()
				}
			}(m.jobs)
		}
	}
	m.wg.Add(1)
	m.jobs <- gmacJob{i: m.next, seg: seg, pooled: pooled}
	m.next++
}

// tag computes piece i's tag and, if pooled, returns its buffer to the
// pool.
func (m *gmacMAC) tag(i uint64, seg []byte, pooled bool) {
	var nonce [12]byte
	binary.LittleEndian.PutUint64(nonce[:], i)
	var t [16]byte
	m.aead.Seal(t[:0], nonce[:], nil, seg)
	if pooled {
		seg = seg[:0]
		segPool.Put(&seg)
	}
	m.mu.Lock()
	if need := int(i+1) * 16; len(m.tags) < need {
		m.tags = append(m.tags, make([]byte, need-len(m.tags))...)
	}
	copy(m.tags[i*16:], t[:])
	m.mu.Unlock()
}

func (m *gmacMAC) sum() []byte {
	if len(m.seg) > 0 {
		m.tag(m.next, m.seg, m.pooled)
		m.seg = nil
		m.next++
	}
	m.wg.Wait()
	h := hmac.New(sha256.New, m.k)
	m.mu.Lock()
	h.Write(m.tags[:m.next*16])
	m.mu.Unlock()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], m.n)
	h.Write(n[:])
	return h.Sum(nil)
}

func (m *gmacMAC) stop() {
	m.wg.Wait()
	if m.jobs != nil {
		close(m.jobs)
		m.jobs = nil
	}
	if m.seg != nil && m.pooled {
		seg := m.seg[:0]
		segPool.Put(&seg)
	}
	m.seg = nil
}

// errNoMAC refuses an AuthChannel checkpoint from a source not known to
// authenticate it.
var errNoMAC = errors.New("the checkpoint carries no MAC (written for an authenticated channel) and its source is not one")
