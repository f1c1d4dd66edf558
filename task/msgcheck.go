package task

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// ErrMsgpackBounds is returned by CheckMsgpack for data that declares more
// than it holds, nests deeper than its limit, or is not msgpack.
var ErrMsgpackBounds = errors.New("msgpack declares more than its bytes hold")

// MaxMsgpackDepth is the deepest nesting of arrays and maps CheckMsgpack
// accepts, and the largest MsgpackLimits.MaxDepth may be.
const MaxMsgpackDepth = 256

// MsgpackLimits bounds what CheckMsgpackLimits accepts. The zero value
// means the defaults: MaxMsgpackDepth levels, and no bound on items other
// than the bytes that hold them.
type MsgpackLimits struct {
	// MaxDepth is how deep arrays and maps may nest (1 to
	// MaxMsgpackDepth; a scalar is depth 0, [nil] depth 1).
	MaxDepth int
	// MaxItems is how many items one array or map may declare (a map's
	// entry counts two); 0 means only the bytes left bound it.
	MaxItems int
}

// CheckMsgpack walks one msgpack value at the start of data without
// decoding it and reports a truncated value, an invalid byte, a nesting
// deeper than MaxMsgpackDepth, or a length that exceeds the bytes left:
// every array element, map entry, string, binary and extension byte must
// be there. msgpack's decoder allocates what a header declares before it
// reads the elements, and recurses once per level, so five bytes declaring
// four billion elements would exhaust memory and a frame of nested arrays
// a stack; untrusted data goes through this check first. Bytes after the
// value are not examined.
func CheckMsgpack(data []byte) error { return CheckMsgpackLimits(data, MsgpackLimits{}) }

// CheckMsgpackLimits is CheckMsgpack under the given limits. It walks the
// bytes once, without recursion, and allocates only for values nested
// more than 16 levels deep.
func CheckMsgpackLimits(data []byte, lim MsgpackLimits) error {
	maxDepth := lim.MaxDepth
	if maxDepth <= 0 || maxDepth > MaxMsgpackDepth {
		maxDepth = MaxMsgpackDepth
	}
	// Values left at each open level. The first levels' counts live in
	// this frame and deeper ones on the heap: an array for every level
	// would put 2 KiB on the stack, which a goroutine whose stack the
	// collector has shrunk grows again (a copy) on its first check.
	var shallow [16]uint64
	stack := shallow[:0]
	left := uint64(1)    // values left at the current level
	pending := uint64(1) // values left at every level: each takes a byte at least
	i := 0
	need := func(n uint64) error {
		if n > uint64(len(data)-i) {
			return fmt.Errorf("at byte %d: %d bytes declared, %d left: %w", i, n, len(data)-i, ErrMsgpackBounds)
		}
		return nil
	}
	// length reads a big-endian length of size bytes.
	length := func(size int) (uint64, error) {
		if err := need(uint64(size)); err != nil {
			return 0, err
		}
		var n uint64
		switch size {
		case 1:
			n = uint64(data[i])
		case 2:
			n = uint64(binary.BigEndian.Uint16(data[i:]))
		case 4:
			n = uint64(binary.BigEndian.Uint32(data[i:]))
		}
		i += size
		return n, nil
	}
	skip := func(n uint64) error {
		if err := need(n); err != nil {
			return err
		}
		i += int(n)
		return nil
	}
	items := func(n uint64) error {
		if lim.MaxItems > 0 && n > uint64(lim.MaxItems) {
			return fmt.Errorf("at byte %d: a container of %d items, at most %d: %w", i, n, lim.MaxItems, ErrMsgpackBounds)
		}
		if n > uint64(len(data)-i) || pending+n > uint64(len(data)-i) {
			return fmt.Errorf("at byte %d: %d values declared, %d bytes left: %w", i, n, len(data)-i, ErrMsgpackBounds)
		}
		if len(stack) >= maxDepth {
			return fmt.Errorf("at byte %d: arrays and maps nested deeper than %d levels: %w", i, maxDepth, ErrMsgpackBounds)
		}
		stack = append(stack, left)
		left = n
		pending += n
		return nil
	}
	for {
		for left == 0 {
			if len(stack) == 0 {
				return nil
			}
			left = stack[len(stack)-1]
			stack = stack[:len(stack)-1]
		}
		if i >= len(data) {
			return fmt.Errorf("truncated at byte %d: %w", i, ErrMsgpackBounds)
		}
		c := data[i]
		i++
		left--
		pending--
		var err error
		switch {
		case c <= 0x7f || c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3: // fixint, nil, bool
		case c >= 0x80 && c <= 0x8f:
			err = items(2 * uint64(c&0x0f))
		case c >= 0x90 && c <= 0x9f:
			err = items(uint64(c & 0x0f))
		case c >= 0xa0 && c <= 0xbf:
			err = skip(uint64(c & 0x1f))
		case c == 0xc4, c == 0xd9: // bin8, str8
			var n uint64
			if n, err = length(1); err == nil {
				err = skip(n)
			}
		case c == 0xc5, c == 0xda:
			var n uint64
			if n, err = length(2); err == nil {
				err = skip(n)
			}
		case c == 0xc6, c == 0xdb:
			var n uint64
			if n, err = length(4); err == nil {
				err = skip(n)
			}
		case c == 0xc7, c == 0xc8, c == 0xc9: // ext 8/16/32: length, type, data
			var n uint64
			if n, err = length(1 << (c - 0xc7)); err == nil {
				err = skip(n + 1)
			}
		case c == 0xca:
			err = skip(4)
		case c == 0xcb:
			err = skip(8)
		case c >= 0xcc && c <= 0xcf: // uint 8..64
			err = skip(1 << (c - 0xcc))
		case c >= 0xd0 && c <= 0xd3: // int 8..64
			err = skip(1 << (c - 0xd0))
		case c >= 0xd4 && c <= 0xd8: // fixext 1..16, with its type byte
			err = skip(1 + 1<<(c-0xd4))
		case c == 0xdc, c == 0xde:
			var n uint64
			if n, err = length(2); err == nil {
				if c == 0xde {
					n *= 2
				}
				err = items(n)
			}
		case c == 0xdd, c == 0xdf:
			var n uint64
			if n, err = length(4); err == nil {
				if c == 0xdf {
					n *= 2
				}
				err = items(n)
			}
		default: // 0xc1 is never used
			err = fmt.Errorf("at byte %d: invalid byte %#x: %w", i-1, c, ErrMsgpackBounds)
		}
		if err != nil {
			return err
		}
	}
}

// UnmarshalMsgpack decodes untrusted msgpack data into v, refusing data
// CheckMsgpack refuses before msgpack allocates for it.
func UnmarshalMsgpack(data []byte, v any) error {
	return UnmarshalMsgpackLimits(data, v, MsgpackLimits{})
}

// UnmarshalMsgpackLimits decodes untrusted msgpack data into v, refusing
// data CheckMsgpackLimits refuses under lim before msgpack allocates for it.
func UnmarshalMsgpackLimits(data []byte, v any, lim MsgpackLimits) error {
	if err := CheckMsgpackLimits(data, lim); err != nil {
		return err
	}
	return msgpack.Unmarshal(data, v)
}
