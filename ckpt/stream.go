package ckpt

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"
)

// Layout constants. They are part of the format (see doc.go).
const (
	magic       = "DPVMCKPT"
	headerSize  = 16
	maxChunk    = 16 << 20 // largest chunk of a section
	secMeta     = 'M'
	secState    = 'S'
	trailerTag  = 'E'
	macSize     = sha256.Size
	trailerSize = 1 + 8 + macSize
)

// secBuf is the size of a section writer's and reader's buffer.
const secBuf = 256 << 10

func newMAC(key []byte) hash.Hash { return hmac.New(sha256.New, key) }

// bufPool recycles the sections' buffers (secBuf bytes each).
var bufPool = sync.Pool{New: func() any { b := make([]byte, secBuf); return &b }}

func getBuf() []byte  { return *bufPool.Get().(*[]byte) }
func putBuf(b []byte) { bufPool.Put(&b) }

// sink is the bottom of the writing side: it counts and authenticates every
// byte it passes to the destination.
type sink struct {
	w   io.Writer
	mac mac
	n   int64
	err error
}

func newSink(w io.Writer, m mac) *sink { return &sink{w: w, mac: m} }

func (s *sink) write(p []byte) error {
	if s.err != nil {
		return s.err
	}
	s.mac.write(p)
	return s.put(p)
}

// writeBlock writes the memory of a numeric block, hashing it alongside. A
// GMAC takes the whole block at once (it tags the aligned MiBs where they
// are, on its workers) and the destination gets it in one write; other
// MACs take it piece by piece, each piece hashed while the one before is
// written.
func (s *sink) writeBlock(p []byte) error {
	if g, ok := s.mac.(*gmacMAC); ok {
		if s.err != nil {
			return s.err
		}
		g.writeAsync(p)
		return s.put(p)
	}
	for off := 0; off < len(p) && s.err == nil; off += hashPiece {
		piece := p[off:min(len(p), off+hashPiece)]
		s.mac.writeAsync(piece)
		s.put(piece)
	}
	return s.err
}

// put writes p to the destination.
func (s *sink) put(p []byte) error {
	if s.err != nil {
		return s.err
	}
	n, err := s.w.Write(p)
	s.n += int64(n)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		s.err = fmt.Errorf("at offset %d: %w", s.n, err)
	}
	return s.err
}

// writeUnauthenticated writes p without adding it to the MAC (the MAC
// itself).
func (s *sink) writeUnauthenticated(p []byte) error { return s.put(p) }

// secWriter writes one section as a sequence of chunks. Small writes are
// gathered in a buffer whose first four bytes are kept for the chunk
// header; a large write goes straight to the sink, cut into chunks, so a
// numeric slice is never copied on its way out.
type secWriter struct {
	s   *sink
	buf []byte
}

func newSecWriter(s *sink, kind byte) (*secWriter, error) {
	if err := s.write([]byte{kind}); err != nil {
		return nil, err
	}
	return &secWriter{s: s, buf: getBuf()[:4]}, nil
}

// release returns the writer's buffer; the writer is not used after.
func (w *secWriter) release() {
	if w.buf != nil {
		putBuf(w.buf[:cap(w.buf)])
		w.buf = nil
	}
}

func (w *secWriter) Write(p []byte) (int, error) { return w.write(p, false) }

// write writes p; block says p is a numeric block's memory, which stays
// unchanged until the checkpoint is written and may be hashed alongside.
func (w *secWriter) write(p []byte, block bool) (int, error) {
	if len(w.buf)+len(p) <= cap(w.buf) {
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	if err := w.flush(); err != nil {
		return 0, err
	}
	if len(p) <= (cap(w.buf)-4)/2 {
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	for off := 0; off < len(p); {
		n := min(len(p)-off, maxChunk)
		var h [4]byte
		binary.LittleEndian.PutUint32(h[:], uint32(n))
		if err := w.s.write(h[:]); err != nil {
			return off, err
		}
		var err error
		if block && len(p) >= asyncMin {
			err = w.s.writeBlock(p[off : off+n])
		} else {
			err = w.s.write(p[off : off+n])
		}
		if err != nil {
			return off, err
		}
		off += n
	}
	return len(p), nil
}

func (w *secWriter) WriteByte(c byte) error {
	if len(w.buf) == cap(w.buf) {
		if err := w.flush(); err != nil {
			return err
		}
	}
	w.buf = append(w.buf, c)
	return nil
}

func (w *secWriter) flush() error {
	if len(w.buf) == 4 {
		return nil
	}
	binary.LittleEndian.PutUint32(w.buf, uint32(len(w.buf)-4))
	err := w.s.write(w.buf)
	w.buf = w.buf[:4]
	return err
}

// close ends the section with an empty chunk.
func (w *secWriter) close() error {
	if err := w.flush(); err != nil {
		return err
	}
	return w.s.write([]byte{0, 0, 0, 0})
}

// source is the bottom of the reading side: it counts and authenticates
// every byte it takes from the stream, and never reads a byte beyond the
// checkpoint. Its error is sticky: once the stream fails or the framing is
// broken nothing further is read.
type source struct {
	r     io.Reader
	mac   mac // set once the header has said which
	n     int64
	err   error
	avail int64 // bytes the stream is known to hold at offset 0, or -1
}

func newSource(r io.Reader) *source {
	return &source{r: r, avail: knownLength(r)}
}

// knownLength is how many bytes r is known to hold from its current
// position, for readers whose length is a fact rather than a claim (a
// regular file, an in-memory reader), or -1.
func knownLength(r io.Reader) int64 {
	switch x := r.(type) {
	case *bytes.Reader:
		return int64(x.Len())
	case *bytes.Buffer:
		return int64(x.Len())
	case *os.File:
		fi, err := x.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return -1
		}
		pos, err := x.Seek(0, io.SeekCurrent)
		if err != nil || pos > fi.Size() {
			return -1
		}
		return fi.Size() - pos
	}
	return -1
}

// remaining is how many more bytes the stream is known to hold, or -1.
func (s *source) remaining() int64 {
	if s.avail < 0 {
		return -1
	}
	return s.avail - s.n
}

// fail records a framing error at the current offset.
func (s *source) fail(sentinel error, format string, args ...any) error {
	if s.err == nil {
		s.err = fmt.Errorf("%s at offset %d: %w", fmt.Sprintf(format, args...), s.n, sentinel)
	}
	return s.err
}

func (s *source) readErr(err error, what string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return s.fail(ErrTruncated, "%s: the stream ends", what)
	}
	if s.err == nil {
		s.err = fmt.Errorf("%s at offset %d: read: %w", what, s.n, err)
	}
	return s.err
}

// full reads exactly len(p) authenticated bytes.
func (s *source) full(p []byte, what string) error {
	if s.err != nil {
		return s.err
	}
	n, err := io.ReadFull(s.r, p)
	s.mac.write(p[:n])
	s.n += int64(n)
	if err != nil {
		return s.readErr(err, what)
	}
	return nil
}

// fullUnauthenticated reads exactly len(p) bytes outside the MAC.
func (s *source) fullUnauthenticated(p []byte, what string) error {
	if s.err != nil {
		return s.err
	}
	n, err := io.ReadFull(s.r, p)
	s.n += int64(n)
	if err != nil {
		return s.readErr(err, what)
	}
	return nil
}

// some reads between 1 and len(p) authenticated bytes.
func (s *source) some(p []byte, what string) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	for {
		n, err := s.r.Read(p)
		if n > 0 {
			s.mac.write(p[:n])
			s.n += int64(n)
			return n, nil
		}
		if err == nil {
			continue
		}
		return 0, s.readErr(err, what)
	}
}

// block reads exactly len(p) bytes of a numeric block's memory (within the
// current chunk), hashing them alongside: each piece read is handed to the
// MAC while the next is read (in pieces this small the hashing keeps up
// with the reading better than in larger ones that a GMAC could tag where
// they are).
func (s *source) block(p []byte, what string) error {
	if g, ok := s.mac.(*gmacMAC); ok {
		return s.blockGMAC(g, p, what)
	}
	for len(p) > 0 {
		if s.err != nil {
			return s.err
		}
		n, err := s.r.Read(p[:min(len(p), hashPiece)])
		if n > 0 {
			s.mac.writeAsync(p[:n])
			s.n += int64(n)
			p = p[n:]
			continue
		}
		if err == nil {
			continue
		}
		return s.readErr(err, what)
	}
	return nil
}

// blockGMAC is block under a GMAC: it reads up to the next piece boundary
// of the GMAC (copied into the piece being filled), then whole pieces
// straight into p, each tagged where it is by the workers while the next
// is read, then the rest.
func (s *source) blockGMAC(g *gmacMAC, p []byte, what string) error {
	for len(p) > 0 {
		if s.err != nil {
			return s.err
		}
		n := min(len(p), gmacSegment-len(g.seg))
		if len(g.seg) > 0 {
			n = min(n, hashPiece)
		}
		got, err := io.ReadFull(s.r, p[:n])
		if got > 0 {
			g.writeAsync(p[:got])
			s.n += int64(got)
			p = p[got:]
		}
		if err != nil {
			return s.readErr(err, what)
		}
	}
	return nil
}

// secReader reads the content of one section, hiding its chunk framing: it
// returns io.EOF at the section's end. It buffers small reads (it is the
// msgpack decoder's io.ByteScanner) and reads large ones straight into the
// caller's memory. It never reads beyond the current chunk.
type secReader struct {
	s     *source
	name  string
	buf   []byte
	r, w  int
	left  int   // bytes of the current chunk still in the stream
	total int64 // content bytes of the section announced so far
	limit int64
	done  bool // the end chunk has been read
}

func newSecReader(s *source, kind byte, name string, limit int64) (*secReader, error) {
	var k [1]byte
	if err := s.full(k[:], name+" section"); err != nil {
		return nil, err
	}
	if k[0] != kind {
		return nil, s.fail(ErrCorrupt, "%s section: kind %q, want %q", name, k[0], kind)
	}
	return &secReader{s: s, name: name, buf: getBuf(), limit: limit}, nil
}

// release returns the reader's buffer; the reader is not used after.
func (sr *secReader) release() {
	if sr.buf != nil {
		putBuf(sr.buf)
		sr.buf = nil
	}
}

// next reads the next chunk header; io.EOF means the section ended.
func (sr *secReader) next() error {
	var h [4]byte
	if err := sr.s.full(h[:], sr.name+" section: chunk header"); err != nil {
		return err
	}
	n := binary.LittleEndian.Uint32(h[:])
	if n == 0 {
		sr.done = true
		return io.EOF
	}
	if n > maxChunk {
		return sr.s.fail(ErrCorrupt, "%s section: chunk of %d bytes, limit %d", sr.name, n, maxChunk)
	}
	if sr.total+int64(n) > sr.limit {
		return sr.s.fail(ErrCorrupt, "%s section: more than %d bytes (the limit)", sr.name, sr.limit)
	}
	sr.left = int(n)
	sr.total += int64(n)
	return nil
}

// avail makes sure the current chunk has bytes left (or reports io.EOF at
// the section's end).
func (sr *secReader) avail() error {
	for sr.left == 0 {
		if sr.done {
			return io.EOF
		}
		if err := sr.next(); err != nil {
			return err
		}
	}
	return nil
}

func (sr *secReader) fill() error {
	if err := sr.avail(); err != nil {
		return err
	}
	n, err := sr.s.some(sr.buf[:min(len(sr.buf), sr.left)], sr.name+" section")
	sr.left -= n
	sr.r, sr.w = 0, n
	return err
}

func (sr *secReader) Read(p []byte) (int, error) {
	if sr.r < sr.w {
		n := copy(p, sr.buf[sr.r:sr.w])
		sr.r += n
		return n, nil
	}
	if len(p) == 0 {
		return 0, nil
	}
	if len(p) >= len(sr.buf) {
		if err := sr.avail(); err != nil {
			return 0, err
		}
		sr.r, sr.w = 0, 0
		n, err := sr.s.some(p[:min(len(p), sr.left)], sr.name+" section")
		sr.left -= n
		return n, err
	}
	if err := sr.fill(); err != nil {
		return 0, err
	}
	n := copy(p, sr.buf[sr.r:sr.w])
	sr.r += n
	return n, nil
}

// readBlock fills p with section content, reading it straight from the
// stream into p where it is large; p is a numeric block's memory, which
// nothing else writes while the checkpoint is read, so it is hashed
// alongside.
func (sr *secReader) readBlock(p []byte) error {
	async := len(p) >= asyncMin
	for len(p) > 0 {
		if sr.r < sr.w {
			n := copy(p, sr.buf[sr.r:sr.w])
			sr.r += n
			p = p[n:]
			continue
		}
		if len(p) < len(sr.buf) {
			_, err := io.ReadFull(sr, p)
			return err
		}
		if err := sr.avail(); err != nil {
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		sr.r, sr.w = 0, 0
		n := min(len(p), sr.left)
		var err error
		if async {
			err = sr.s.block(p[:n], sr.name+" section")
		} else {
			err = sr.s.full(p[:n], sr.name+" section")
		}
		if err != nil {
			return err
		}
		sr.left -= n
		p = p[n:]
	}
	return nil
}

func (sr *secReader) ReadByte() (byte, error) {
	if sr.r == sr.w {
		if err := sr.fill(); err != nil {
			return 0, err
		}
	}
	c := sr.buf[sr.r]
	sr.r++
	return c, nil
}

func (sr *secReader) UnreadByte() error {
	if sr.r == 0 {
		return errors.New("ckpt: UnreadByte with nothing read")
	}
	sr.r--
	return nil
}

// atEnd reports whether the section has no content left, reading the end
// chunk if need be.
func (sr *secReader) atEnd() (bool, error) {
	if sr.r < sr.w {
		return false, nil
	}
	err := sr.avail()
	if err == io.EOF {
		return true, nil
	}
	return false, err
}

// drain skips the rest of the section (still authenticating it) and returns
// how many content bytes it skipped.
func (sr *secReader) drain() (int64, error) {
	skipped := int64(sr.w - sr.r)
	sr.r, sr.w = 0, 0
	for {
		if err := sr.avail(); err != nil {
			if err == io.EOF {
				return skipped, nil
			}
			return skipped, err
		}
		n, err := sr.s.some(sr.buf[:min(len(sr.buf), sr.left)], sr.name+" section")
		sr.left -= n
		skipped += int64(n)
		if err != nil {
			return skipped, err
		}
	}
}
