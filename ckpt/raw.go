package ckpt

import (
	"encoding/binary"
	"io"
)

// rawPiece is how much of a string or binary value is read at a time, so
// that a declared length is never allocated before its bytes arrive.
const rawPiece = 64 << 10

// rawScanner copies one msgpack value from a stream into buf, checking
// that the stream supplies every byte the value's lengths announce, that
// it nests at most maxDepth deep and that it is no longer than max. msgpack
// allocates a declared binary length at once; decoding from what
// rawScanner has copied is bounded by what actually arrived.
type rawScanner struct {
	r   io.Reader
	buf []byte
	max int64
}

// scanRaw returns the bytes of the next msgpack value of r.
func scanRaw(r io.Reader, max int64, buf []byte) ([]byte, error) {
	s := &rawScanner{r: r, buf: buf[:0], max: max}
	err := s.value(0)
	return s.buf, err
}

func (s *rawScanner) take(n uint64) error {
	for n > 0 {
		k := min(n, rawPiece)
		if int64(len(s.buf))+int64(k) > s.max {
			return corrupt("a value longer than %d bytes (the limit)", s.max)
		}
		s.buf = append(s.buf, make([]byte, k)...)
		if _, err := io.ReadFull(s.r, s.buf[len(s.buf)-int(k):]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// uint reads a big-endian length of size bytes.
func (s *rawScanner) uint(size int) (uint64, error) {
	if err := s.take(uint64(size)); err != nil {
		return 0, err
	}
	b := s.buf[len(s.buf)-size:]
	switch size {
	case 1:
		return uint64(b[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), nil
	}
	return uint64(binary.BigEndian.Uint32(b)), nil
}

func (s *rawScanner) items(n uint64, depth int) error {
	for ; n > 0; n-- {
		if err := s.value(depth + 1); err != nil {
			return err
		}
	}
	return nil
}

// sized reads a length of size bytes, then that many bytes (plus extra).
func (s *rawScanner) sized(size int, extra uint64) error {
	n, err := s.uint(size)
	if err != nil {
		return err
	}
	return s.take(n + extra)
}

// counted reads a count of size bytes, then per times that many values.
func (s *rawScanner) counted(size int, per uint64, depth int) error {
	n, err := s.uint(size)
	if err != nil {
		return err
	}
	return s.items(n*per, depth)
}

func (s *rawScanner) value(depth int) error {
	if depth > maxDepth {
		return corrupt("values nest deeper than %d", maxDepth)
	}
	if err := s.take(1); err != nil {
		return err
	}
	c := s.buf[len(s.buf)-1]
	switch {
	case c <= 0x7f || c >= 0xe0: // fixint
		return nil
	case c <= 0x8f: // fixmap
		return s.items(2*uint64(c&0x0f), depth)
	case c <= 0x9f: // fixarray
		return s.items(uint64(c&0x0f), depth)
	case c <= 0xbf: // fixstr
		return s.take(uint64(c & 0x1f))
	}
	switch c {
	case 0xc0, 0xc2, 0xc3: // nil, false, true
		return nil
	case 0xc4, 0xd9: // bin8, str8
		return s.sized(1, 0)
	case 0xc5, 0xda:
		return s.sized(2, 0)
	case 0xc6, 0xdb:
		return s.sized(4, 0)
	case 0xc7: // ext8: length, type, data
		return s.sized(1, 1)
	case 0xc8:
		return s.sized(2, 1)
	case 0xc9:
		return s.sized(4, 1)
	case 0xca, 0xce, 0xd2: // float32, uint32, int32
		return s.take(4)
	case 0xcb, 0xcf, 0xd3:
		return s.take(8)
	case 0xcc, 0xd0:
		return s.take(1)
	case 0xcd, 0xd1:
		return s.take(2)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16: type, data
		return s.take(1 + 1<<(c-0xd4))
	case 0xdc: // array16
		return s.counted(2, 1, depth)
	case 0xdd:
		return s.counted(4, 1, depth)
	case 0xde: // map16
		return s.counted(2, 2, depth)
	case 0xdf:
		return s.counted(4, 2, depth)
	}
	return corrupt("msgpack code %#x", c)
}
