package daemon

import (
	"encoding/binary"
	"fmt"

	"github.com/dpvm/dpvm/routing"
)

// maxMsgDepth bounds the nesting of msgpack arrays and maps in a control
// message: the decoder recurses once per level (skipping unknown fields
// too), so a frame of nested one-element arrays would otherwise cost a
// stack as deep as the frame is long.
const maxMsgDepth = 32

// maxMsgItems bounds the items one array or map of a control message may
// claim: the decoder sizes slices from the claim before reading them.
const maxMsgItems = 1 << 20

// checkDepth scans the first msgpack value of b and refuses it if its
// arrays and maps nest deeper than max, or one claims more items than
// maxMsgItems or than the bytes left could hold (each takes one at least).
// It walks the bytes once, without recursion and without allocating per
// element; a value otherwise truncated passes (the decoder reports it).
func checkDepth(b []byte, max int) error {
	var stack [maxMsgDepth + 1]uint64 // items left at each open level
	depth := 0
	left := uint64(1) // items left at the current level
	i := 0
	for {
		for left == 0 {
			if depth == 0 {
				return nil
			}
			depth--
			left = stack[depth]
		}
		left--
		if i >= len(b) {
			return nil
		}
		c := b[i]
		i++
		var n uint64 // items of a container
		container, skip := false, 0
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			container, n = true, 2*uint64(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			container, n = true, uint64(c&0x0f)
		case c >= 0xa0 && c <= 0xbf:
			skip = int(c & 0x1f)
		default:
			var ok bool
			container, n, skip, i, ok = sized(b, c, i)
			if !ok {
				return nil
			}
		}
		if container {
			if n > maxMsgItems || n > uint64(len(b)-i) {
				return fmt.Errorf("msgpack container claims %d items with %d bytes left: %w", n, len(b)-i, routing.ErrMalformed)
			}
			if depth >= max {
				return fmt.Errorf("msgpack nested deeper than %d levels: %w", max, routing.ErrMalformed)
			}
			stack[depth] = left
			depth++
			left = n
		}
		if skip > len(b)-i {
			return nil
		}
		i += skip
	}
}

// sized decodes the header of msgpack type byte c whose length or count
// follows at b[i:]: whether it is a container and its items, or the bytes
// to skip, and where its body starts. ok is false when b ends first.
func sized(b []byte, c byte, i int) (container bool, n uint64, skip, next int, ok bool) {
	width := func(w int) (uint64, bool) {
		if len(b)-i < w {
			return 0, false
		}
		var v uint64
		switch w {
		case 1:
			v = uint64(b[i])
		case 2:
			v = uint64(binary.BigEndian.Uint16(b[i:]))
		case 4:
			v = uint64(binary.BigEndian.Uint32(b[i:]))
		}
		i += w
		return v, true
	}
	clamp := func(v uint64) int { return int(min(v, uint64(len(b)))) }
	var v uint64
	switch c {
	case 0xc4, 0xd9: // bin8, str8
		v, ok = width(1)
		return false, 0, clamp(v), i, ok
	case 0xc5, 0xda: // bin16, str16
		v, ok = width(2)
		return false, 0, clamp(v), i, ok
	case 0xc6, 0xdb: // bin32, str32
		v, ok = width(4)
		return false, 0, clamp(v), i, ok
	case 0xc7: // ext8: length, type
		v, ok = width(1)
		return false, 0, clamp(v + 1), i, ok
	case 0xc8:
		v, ok = width(2)
		return false, 0, clamp(v + 1), i, ok
	case 0xc9:
		v, ok = width(4)
		return false, 0, clamp(v + 1), i, ok
	case 0xca, 0xce, 0xd2: // 4-byte numbers
		return false, 0, 4, i, true
	case 0xcb, 0xcf, 0xd3: // 8-byte numbers
		return false, 0, 8, i, true
	case 0xcc, 0xd0:
		return false, 0, 1, i, true
	case 0xcd, 0xd1:
		return false, 0, 2, i, true
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16 (and the type)
		return false, 0, 1 + 1<<(c-0xd4), i, true
	case 0xdc: // array16
		v, ok = width(2)
		return true, v, 0, i, ok
	case 0xdd:
		v, ok = width(4)
		return true, v, 0, i, ok
	case 0xde: // map16
		v, ok = width(2)
		return true, 2 * v, 0, i, ok
	case 0xdf:
		v, ok = width(4)
		return true, 2 * v, 0, i, ok
	}
	return false, 0, 0, i, true // 0xc1, never used: the decoder refuses it
}
