package transport

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// A bulk stream authenticates with a TLS 1.3 handshake and then carries
// its bytes in records of its own, sealed with AES-128-GCM under keys
// exported from that handshake (RFC 8446 §7.5), one key per direction.
// crypto/tls seals records of at most 16 KiB, each written by a syscall of
// its own and read through a buffer and copied out again; the lane's
// records are of up to sealMaxRecord bytes, sealed from the caller's
// buffer into the one written, and opened in place in the reader's buffer
// when it has room for the record, so that a large payload is neither
// copied on its way out nor on its way in beyond the kernel's copies.
//
// A record on the wire: the plaintext's length L (4 bytes, little-endian,
// at most sealMaxRecord), then L bytes of ciphertext and the 16-byte tag.
// The length is the record's additional data; the nonce is the record's
// number in its direction (8 bytes, big-endian, after 4 zero bytes), so a
// record that is dropped, replayed, reordered or altered fails to open and
// ends the stream. Each direction changes its key every sealRekeyRecords
// records (HKDF-Expand of the old key), well within AES-GCM's usage
// limits: at most 2^38 bytes under one key.
const (
	sealKeyBytes     = 16
	sealTagBytes     = 16
	sealHdrBytes     = 4
	sealMaxRecord    = 256 << 10
	sealWriteRecord  = 256 << 10 // records a large Write is cut into
	sealRekeyRecords = 1 << 20

	labelClientWrite = "EXPORTER-dpvm-bulk-client-write"
	labelServerWrite = "EXPORTER-dpvm-bulk-server-write"
	labelKeyUpdate   = "dpvm bulk key update"
)

// ErrSealedRecord is returned by a bulk stream's Read when a record fails
// to open or its length is out of bounds: the stream is not what its peer
// sealed, and is unusable.
var ErrSealedRecord = errors.New("bulk stream: a record failed authentication")

// sealKeys are one direction's keys: the AEAD of the current key, the
// number of the next record and the nonce of the last (a field, so that
// the AEAD, an interface, does not move a nonce to the heap per record).
type sealKeys struct {
	key   [sealKeyBytes]byte
	aead  cipher.AEAD
	seq   uint64
	nonce [12]byte
}

func newSealKeys(key []byte) (*sealKeys, error) {
	k := &sealKeys{}
	copy(k.key[:], key)
	return k, k.setKey()
}

func (k *sealKeys) setKey() error {
	b, err := aes.NewCipher(k.key[:])
	if err != nil {
		return err
	}
	k.aead, err = cipher.NewGCM(b)
	return err
}

// next returns the nonce of the next record, valid until the next call,
// and counts it, changing the key first when the previous one has sealed
// sealRekeyRecords records.
func (k *sealKeys) next() ([]byte, error) {
	if k.seq > 0 && k.seq%sealRekeyRecords == 0 {
		nk, err := hkdf.Expand(sha256.New, k.key[:], labelKeyUpdate, sealKeyBytes)
		if err != nil {
			return nil, err
		}
		copy(k.key[:], nk)
		if err := k.setKey(); err != nil {
			return nil, err
		}
	}
	binary.BigEndian.PutUint64(k.nonce[4:], k.seq)
	k.seq++
	return k.nonce[:], nil
}

// sealedConn is a bulk stream's connection once its handshake is over:
// sealed records on the TCP connection under the TLS session's exported
// keys. Reads and writes may run concurrently with each other.
type sealedConn struct {
	c net.Conn

	wmu  sync.Mutex
	out  *sealKeys
	wb   []byte // the record being written
	whdr [sealHdrBytes]byte
	werr error

	rmu     sync.Mutex
	in      *sealKeys
	rd      *bufio.Reader
	rhdr    [sealHdrBytes]byte
	rb      []byte // a record opened here, when the caller's buffer has no room for it
	pending []byte // opened plaintext not yet returned (in rb)
	rerr    error
}

// newSealedConn derives the stream's keys from tc's completed handshake;
// c is tc's TCP connection, from which tc has read nothing past the
// handshake's last record (see recordBounded).
func newSealedConn(c net.Conn, tc *tls.Conn, client bool) (*sealedConn, error) {
	cs := tc.ConnectionState()
	cw, err := cs.ExportKeyingMaterial(labelClientWrite, nil, sealKeyBytes)
	if err != nil {
		return nil, fmt.Errorf("bulk stream keys: %w", err)
	}
	sw, err := cs.ExportKeyingMaterial(labelServerWrite, nil, sealKeyBytes)
	if err != nil {
		return nil, fmt.Errorf("bulk stream keys: %w", err)
	}
	if !client {
		cw, sw = sw, cw
	}
	out, err := newSealKeys(cw)
	if err != nil {
		return nil, err
	}
	in, err := newSealKeys(sw)
	if err != nil {
		return nil, err
	}
	return &sealedConn{c: c, out: out, in: in, rd: bufio.NewReaderSize(c, 32<<10)}, nil
}

// Write seals p in records of at most sealWriteRecord bytes and writes
// each with one syscall, so the reader opens one while the next is sealed.
func (s *sealedConn) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.werr != nil {
		return 0, s.werr
	}
	done := 0
	for done < len(p) {
		n := min(len(p)-done, sealWriteRecord)
		if err := s.writeRecord(p[done : done+n]); err != nil {
			s.werr = err
			return done, err
		}
		done += n
	}
	return done, nil
}

func (s *sealedConn) writeRecord(p []byte) error {
	nonce, err := s.out.next()
	if err != nil {
		return err
	}
	need := sealHdrBytes + len(p) + sealTagBytes
	if cap(s.wb) < need {
		s.wb = make([]byte, need, max(need, sealHdrBytes+sealWriteRecord+sealTagBytes))
	}
	// The header is the additional data, which may not overlap Seal's
	// dst: it is sealed from a copy of its own.
	binary.LittleEndian.PutUint32(s.whdr[:], uint32(len(p)))
	b := append(s.wb[:0], s.whdr[:]...)
	b = s.out.aead.Seal(b, nonce, p, s.whdr[:])
	_, err = s.c.Write(b)
	return err
}

// Read returns the plaintext of the next record, or what is left of the
// last one. A record that fits in p with its tag is read into p and opened
// there; a larger one is opened in a buffer of the stream's and copied
// out as p allows.
func (s *sealedConn) Read(p []byte) (int, error) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if len(s.pending) > 0 {
		n := copy(p, s.pending)
		s.pending = s.pending[n:]
		return n, nil
	}
	if s.rerr != nil {
		return 0, s.rerr
	}
	if len(p) == 0 {
		return 0, nil
	}
	// An empty record yields nothing: read on, rather than return 0, nil.
	n, err := 0, error(nil)
	for n == 0 && err == nil {
		n, err = s.readRecord(p)
	}
	if err != nil {
		s.rerr = err
	}
	return n, err
}

func (s *sealedConn) readRecord(p []byte) (int, error) {
	hdr := s.rhdr[:]
	if _, err := io.ReadFull(s.rd, hdr); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, fmt.Errorf("%w: cut short", ErrSealedRecord)
		}
		return 0, err
	}
	l := int(binary.LittleEndian.Uint32(hdr))
	if l > sealMaxRecord {
		return 0, fmt.Errorf("%w: a record of %d bytes, at most %d", ErrSealedRecord, l, sealMaxRecord)
	}
	nonce, err := s.in.next()
	if err != nil {
		return 0, err
	}
	ct := l + sealTagBytes
	var buf []byte
	if len(p) >= ct {
		buf = p[:ct]
	} else {
		if cap(s.rb) < ct {
			s.rb = make([]byte, ct)
		}
		buf = s.rb[:ct]
	}
	if _, err := io.ReadFull(s.rd, buf); err != nil {
		return 0, fmt.Errorf("%w: cut short: %v", ErrSealedRecord, err)
	}
	plain, err := s.in.aead.Open(buf[:0], nonce, buf, hdr)
	if err != nil {
		return 0, ErrSealedRecord
	}
	if len(p) >= ct {
		return len(plain), nil
	}
	n := copy(p, plain)
	s.pending = plain[n:]
	return n, nil
}

// Close closes the TCP connection. No TLS alert is sent: the peer reads
// sealed records only, and sees the stream end.
func (s *sealedConn) Close() error { return s.c.Close() }

// recordBounded is a bulk stream's TCP connection during its TLS
// handshake: its reads stop at the end of each TLS record, so that
// crypto/tls, which reads ahead when it can, takes nothing of the sealed
// records that follow the handshake.
type recordBounded struct {
	net.Conn
	hdr  [5]byte // the current TLS record's header
	nhdr int     // bytes of it read
	left int     // bytes of the record's body still to read
}

func (c *recordBounded) Read(p []byte) (int, error) {
	if c.nhdr == len(c.hdr) && c.left == 0 {
		c.nhdr = 0
	}
	if c.nhdr < len(c.hdr) {
		n, err := c.Conn.Read(p[:min(len(p), len(c.hdr)-c.nhdr)])
		copy(c.hdr[c.nhdr:], p[:n])
		c.nhdr += n
		if c.nhdr == len(c.hdr) {
			c.left = int(binary.BigEndian.Uint16(c.hdr[3:]))
		}
		return n, err
	}
	n, err := c.Conn.Read(p[:min(len(p), c.left)])
	c.left -= n
	return n, err
}
