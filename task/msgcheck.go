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

// ErrMsgpackAmbiguous is returned for an extension msgpack's decoder could
// read as a map (see CheckMsgpackLimits). It wraps ErrMsgpackBounds.
var ErrMsgpackAmbiguous = fmt.Errorf("msgpack extension that reads as a map: %w", ErrMsgpackBounds)

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
//
// It also refuses, with ErrMsgpackAmbiguous, an extension whose payload
// begins like a map or nil: msgpack's decoder reads such an extension as
// that map when the Go value at its place is a map, and the bytes it then
// reads are the payload's, which this walk takes as opaque. Timestamps in
// their 4- and 8-byte forms begin so for some times; SafeMsgpack rewrites
// those instead of refusing them.
func CheckMsgpackLimits(data []byte, lim MsgpackLimits) error {
	_, err := walkMsgpack(data, lim, nil)
	return err
}

// MsgpackLen returns how many bytes the msgpack value at the start of data
// takes, checked as CheckMsgpackLimits checks it: where a value ends in a
// buffer that holds more (a field of an encoded struct), found without
// decoding or copying it.
func MsgpackLen(data []byte, lim MsgpackLimits) (int, error) {
	return walkMsgpack(data, lim, nil)
}

// SafeMsgpack returns data, checked as CheckMsgpackLimits does, in a form
// msgpack's decoder reads only as checked: data itself, or, when a
// timestamp's payload would read as a map, a copy in which every such
// timestamp is in its 12-byte form, which holds the same time and whose
// payload begins with a byte below 0x3c.
func SafeMsgpack(data []byte, lim MsgpackLimits) ([]byte, error) {
	var times []int
	if _, err := walkMsgpack(data, lim, &times); err != nil {
		return nil, err
	}
	if len(times) == 0 {
		return data, nil
	}
	out := make([]byte, 0, len(data)+7*len(times))
	prev := 0
	for _, at := range times {
		out = append(out, data[prev:at]...)
		var payload []byte
		if data[at] == 0xc7 { // ext 8: length, type, payload
			payload = data[at+3 : at+3+int(data[at+1])]
		} else { // fixext 4 or 8: type, payload
			payload = data[at+2 : at+2+1<<(data[at]-0xd4)]
		}
		prev = at + (len(payload) + 2)
		if data[at] == 0xc7 {
			prev++
		}
		var nsec uint32
		var sec uint64
		if len(payload) == 4 {
			sec = uint64(binary.BigEndian.Uint32(payload))
		} else {
			v := binary.BigEndian.Uint64(payload)
			nsec, sec = uint32(v>>34), v&(1<<34-1)
		}
		out = append(out, 0xc7, 12, timeExt)
		out = binary.BigEndian.AppendUint32(out, nsec)
		out = binary.BigEndian.AppendUint64(out, sec)
	}
	out = append(out, data[prev:]...)
	if _, err := walkMsgpack(out, lim, nil); err != nil {
		return nil, fmt.Errorf("timestamps rewritten: %w", err)
	}
	return out, nil
}

// timeExt is the extension type of msgpack's timestamps (-1).
const timeExt = 0xff

// mapOrNil reports whether c begins a map or nil, which msgpack's decoder
// accepts as a map's header.
func mapOrNil(c byte) bool {
	return c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf || c == 0xc0
}

// walkMsgpack is CheckMsgpackLimits, returning the bytes the value takes;
// with times not nil, it notes where each timestamp SafeMsgpack must
// rewrite begins instead of refusing it.
func walkMsgpack(data []byte, lim MsgpackLimits, times *[]int) (int, error) {
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
	// ext passes over an extension of n payload bytes whose code is at
	// byte at, with i at its type byte. msgpack's decoder, asked for a map
	// (DecodeMapLen, for every Go map type), passes over an extension's
	// header and reads the byte after it as the map's header; it then
	// reads on from there, inside the payload, as if the payload were
	// msgpack. An extension whose payload (or, when empty, the byte
	// after it) begins like a map or nil would hand the decoder bytes
	// this walk never checked, so it is refused; a timestamp that begins
	// so is noted for SafeMsgpack to rewrite, when times is not nil.
	ext := func(at int, n uint64) error {
		typ := data[i]
		i++
		if i < len(data) && mapOrNil(data[i]) {
			// Only the forms msgpack writes (fixext 4 and 8, and ext 8)
			// are rewritten.
			if typ != timeExt || (n != 4 && n != 8) || data[at] == 0xc8 || data[at] == 0xc9 || times == nil {
				return fmt.Errorf("at byte %d: an extension of type %d whose payload reads as a map (%#x): %w", at, int8(typ), data[i], ErrMsgpackAmbiguous)
			}
			*times = append(*times, at)
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
				return i, nil
			}
			left = stack[len(stack)-1]
			stack = stack[:len(stack)-1]
		}
		if i >= len(data) {
			return 0, fmt.Errorf("truncated at byte %d: %w", i, ErrMsgpackBounds)
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
			at := i - 1
			var n uint64
			if n, err = length(1 << (c - 0xc7)); err == nil {
				if err = need(n + 1); err == nil {
					err = ext(at, n)
				}
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
			if err = need(1 + 1<<(c-0xd4)); err == nil {
				err = ext(i-1, 1<<(c-0xd4))
			}
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
			return 0, err
		}
	}
}

// UnmarshalMsgpack decodes untrusted msgpack data into v, refusing data
// CheckMsgpack refuses before msgpack allocates for it.
func UnmarshalMsgpack(data []byte, v any) error {
	return UnmarshalMsgpackLimits(data, v, MsgpackLimits{})
}

// UnmarshalMsgpackLimits decodes untrusted msgpack data into v, refusing
// data CheckMsgpackLimits refuses under lim before msgpack allocates for it
// (timestamps it would refuse are rewritten; see SafeMsgpack).
func UnmarshalMsgpackLimits(data []byte, v any, lim MsgpackLimits) error {
	data, err := SafeMsgpack(data, lim)
	if err != nil {
		return err
	}
	return msgpack.Unmarshal(data, v)
}
