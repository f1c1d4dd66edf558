package ckpt

import (
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/dpvm/dpvm/task"
)

// Format is the format version this build writes and the newest it
// reads. Version 2 adds the key identifier after the header; version 1
// checkpoints are still read.
const Format = 2

// KeyIDSize is the length of the key identifier a version 2 checkpoint
// carries after its header.
const KeyIDSize = 8

// KeyID names the key a checkpoint was authenticated under without
// revealing it. The zero value names no key.
type KeyID = [KeyIDSize]byte

// Defaults of Limits.
const (
	DefaultMaxMeta  = 1 << 30  // 1 GiB
	DefaultMaxState = 64 << 30 // 64 GiB
	DefaultPrealloc = 16 << 20 // 16 MiB
)

// Limits bounds what ReadLimits accepts and allocates. The zero value of a
// field means its default.
type Limits struct {
	// MaxMeta is the largest meta section (mailbox included), in bytes.
	MaxMeta int64
	// MaxState is the largest state section, in bytes, and also the most
	// memory decoding the state may allocate.
	MaxState int64
	// Prealloc is the largest numeric block allocated in full as soon as
	// its header is read when the stream is not known to hold it (a network
	// stream); a larger one grows, doubling, as its bytes arrive. Blocks in
	// a regular file or an in-memory reader are allocated in full when the
	// file holds them.
	Prealloc int64
	// Channel says the source is a channel that authenticates its peer
	// and protects its bytes (a QUIC stream between daemons under mutual
	// TLS): checkpoints written with AuthChannel, which carry no MAC, are
	// accepted from it. Never set it for a file.
	Channel bool
	// KeyFor, if set, picks the key of a checkpoint that names its key
	// (format 2) from its identifier, in place of Read's key argument; its
	// error is returned wrapped (say which key is missing). Checkpoints of
	// format 1, and those whose identifier is zero, name no key and are
	// checked under the key argument.
	KeyFor func(id KeyID) ([]byte, error)
}

func (l Limits) withDefaults() Limits {
	if l.MaxMeta <= 0 {
		l.MaxMeta = DefaultMaxMeta
	}
	if l.MaxState <= 0 {
		l.MaxState = DefaultMaxState
	}
	if l.Prealloc <= 0 {
		l.Prealloc = DefaultPrealloc
	}
	return l
}

// Write streams a checkpoint of state (a registered task, a pointer to its
// struct) with meta to w, authenticated with key (HMAC-SHA256). It returns
// the bytes written. The state is encoded while it is written and numeric
// slices go out straight from their memory: it is never held twice. The
// task must not run while Write reads it.
func Write(w io.Writer, key []byte, meta *Meta, state task.Task) (int64, error) {
	return WriteWith(w, key, meta, state, WriteOptions{})
}

// WriteWith is Write with the authentication o chooses: AuthHMAC (Write's),
// AuthGMAC (faster, several cores, for files) or AuthChannel (no MAC, only
// for a channel that authenticates its bytes).
func WriteWith(w io.Writer, key []byte, meta *Meta, state task.Task, o WriteOptions) (int64, error) {
	n, err := write(w, key, meta, state, o)
	if err != nil {
		return n, fmt.Errorf("ckpt: write: %w", err)
	}
	return n, nil
}

func write(w io.Writer, key []byte, meta *Meta, state task.Task, o WriteOptions) (int64, error) {
	if len(key) == 0 {
		return 0, errors.New("empty MAC key")
	}
	if meta == nil || state == nil {
		return 0, errors.New("nil meta or state")
	}
	name, err := task.TypeName(state)
	if err != nil {
		return 0, err
	}
	if meta.Type != "" && meta.Type != name {
		return 0, fmt.Errorf("meta names task type %q, the state is a %q", meta.Type, name)
	}
	if meta.TID == 0 {
		return 0, errors.New("meta has a zero TID")
	}
	rv := reflect.ValueOf(state)
	if rv.IsNil() {
		return 0, fmt.Errorf("nil %T", state)
	}
	p, err := planFor(rv.Type().Elem())
	if err != nil {
		return 0, fmt.Errorf("task type %q: %w", name, err)
	}

	var m mac
	var salt []byte
	switch o.Auth {
	case AuthHMAC:
		m = newHasher(newMAC(key))
	case AuthGMAC:
		if salt, err = newSalt(o.Rand); err != nil {
			return 0, err
		}
		if m, err = newGMAC(key, salt); err != nil {
			return 0, err
		}
	case AuthChannel:
		m = &crcMAC{}
	default:
		return 0, fmt.Errorf("unknown authentication %v", o.Auth)
	}
	s := newSink(w, m)
	defer s.mac.stop()
	var h [headerSize]byte
	copy(h[:], magic)
	version := uint16(Format)
	if o.version != 0 {
		version = o.version
	}
	binary.LittleEndian.PutUint16(h[8:], version)
	binary.LittleEndian.PutUint16(h[10:], authFlags(o.Auth))
	if err := s.write(h[:]); err != nil {
		return s.n, fmt.Errorf("header: %w", err)
	}
	if version >= 2 {
		if err := s.write(o.KeyID[:]); err != nil {
			return s.n, fmt.Errorf("header: key id: %w", err)
		}
	}
	if salt != nil {
		if err := s.write(salt); err != nil {
			return s.n, fmt.Errorf("header: %w", err)
		}
	}

	wm := toWire(meta)
	wm.Type = name
	sw, err := newSecWriter(s, secMeta)
	if err != nil {
		return s.n, fmt.Errorf("meta section: %w", err)
	}
	defer sw.release()
	enc := msgpack.NewEncoder(sw)
	enc.UseCompactInts(true)
	if err := enc.Encode(wm); err != nil {
		return s.n, fmt.Errorf("meta section: %w", err)
	}
	if err := sw.close(); err != nil {
		return s.n, fmt.Errorf("meta section: %w", err)
	}

	sw2, err := newSecWriter(s, secState)
	if err != nil {
		return s.n, fmt.Errorf("state section: %w", err)
	}
	defer sw2.release()
	sw = sw2
	enc.Reset(sw)
	enc.UseCompactInts(true)
	se := &stateEncoder{enc: enc, w: sw}
	if err := se.value(rv.Elem(), p); err != nil {
		return s.n, fmt.Errorf("state section of task type %q: %w", name, err)
	}
	if err := sw.close(); err != nil {
		return s.n, fmt.Errorf("state section: %w", err)
	}

	var t [1 + 8]byte
	t[0] = trailerTag
	binary.LittleEndian.PutUint64(t[1:], uint64(s.n))
	if err := s.write(t[:]); err != nil {
		return s.n, fmt.Errorf("trailer: %w", err)
	}
	if err := s.writeUnauthenticated(s.mac.sum()); err != nil {
		return s.n, fmt.Errorf("trailer: %w", err)
	}
	return s.n, nil
}

// Read decodes a checkpoint from r with the default Limits. See ReadLimits.
func Read(r io.Reader, key []byte) (*Meta, task.Task, error) {
	return ReadLimits(r, key, Limits{})
}

// ReadLimits decodes a checkpoint from r, restoring the state into a new
// task of meta's type (task.New), and verifies the MAC at the end. On any
// error it returns nil meta and task: the partly restored task is
// discarded. It reads exactly the checkpoint's bytes, never beyond them.
//
// When the framing is intact, the MAC is checked before any other problem
// is reported: a checkpoint altered anywhere gives ErrTampered. Otherwise
// the errors wrap ErrTruncated (the stream ended early), ErrCorrupt,
// ErrVersion (a newer format) or task.ErrUnknownType.
func ReadLimits(r io.Reader, key []byte, lim Limits) (*Meta, task.Task, error) {
	m, t, err := read(r, key, lim.withDefaults())
	if err != nil {
		return nil, nil, fmt.Errorf("ckpt: read: %w", err)
	}
	return m, t, nil
}

func read(r io.Reader, key []byte, lim Limits) (*Meta, task.Task, error) {
	if len(key) == 0 && lim.KeyFor == nil {
		return nil, nil, errors.New("empty MAC key")
	}
	src := newSource(r)
	var h [headerSize]byte
	if err := src.fullUnauthenticated(h[:], "header"); err != nil {
		return nil, nil, err
	}
	if string(h[:8]) != magic {
		return nil, nil, fmt.Errorf("not a dpvm checkpoint (magic %q, want %q): %w", h[:8], magic, ErrCorrupt)
	}
	v := binary.LittleEndian.Uint16(h[8:])
	switch {
	case v == 0:
		return nil, nil, fmt.Errorf("header: format version 0: %w", ErrCorrupt)
	case v > Format:
		return nil, nil, fmt.Errorf("format version %d, this build reads up to %d: %w", v, Format, ErrVersion)
	}
	if z := binary.LittleEndian.Uint32(h[12:]); z != 0 {
		return nil, nil, fmt.Errorf("header: reserved %#x, want 0: %w", z, ErrCorrupt)
	}
	auth, err := flagsAuth(binary.LittleEndian.Uint16(h[10:]))
	if err != nil {
		return nil, nil, err
	}
	var id KeyID
	if v >= 2 {
		if err := src.fullUnauthenticated(id[:], "header: key id"); err != nil {
			return nil, nil, err
		}
		if lim.KeyFor != nil && auth != AuthChannel && id != (KeyID{}) {
			if key, err = lim.KeyFor(id); err != nil {
				return nil, nil, fmt.Errorf("key %x: %w", id[:], err)
			}
		}
	}
	if len(key) == 0 && auth != AuthChannel {
		return nil, nil, errors.New("empty MAC key")
	}
	switch auth {
	case AuthHMAC:
		src.mac = newHasher(newMAC(key))
	case AuthChannel:
		if !lim.Channel {
			return nil, nil, fmt.Errorf("%w: %w", errNoMAC, ErrTampered)
		}
		src.mac = &crcMAC{}
	case AuthGMAC:
		var salt [saltSize]byte
		if err := src.fullUnauthenticated(salt[:], "header: salt"); err != nil {
			return nil, nil, err
		}
		if src.mac, err = newGMAC(key, salt[:]); err != nil {
			return nil, nil, err
		}
		src.mac.write(h[:])
		if v >= 2 {
			src.mac.write(id[:])
		}
		src.mac.write(salt[:])
	}
	defer src.mac.stop()
	if auth != AuthGMAC {
		src.mac.write(h[:])
		if v >= 2 {
			src.mac.write(id[:])
		}
	}

	// The meta section. A problem with its content is kept until the MAC
	// has been checked.
	ms, err := newSecReader(src, secMeta, "meta", lim.MaxMeta)
	if err != nil {
		return nil, nil, err
	}
	defer ms.release()
	var meta *Meta
	var wm wireMeta
	start := src.n
	raw, metaErr := scanRaw(ms, lim.MaxMeta, nil)
	if src.err != nil {
		return nil, nil, src.err
	}
	if metaErr == nil {
		metaErr = msgpack.Unmarshal(raw, &wm)
	}
	if metaErr != nil {
		metaErr = fmt.Errorf("meta section at offset %d: %v: %w", start, metaErr, ErrCorrupt)
	} else if meta, metaErr = fromWire(&wm); metaErr != nil {
		metaErr = fmt.Errorf("meta section at offset %d: %v: %w", start, metaErr, ErrCorrupt)
	} else if end, err := ms.atEnd(); err != nil {
		return nil, nil, err
	} else if !end {
		metaErr = fmt.Errorf("meta section at offset %d: bytes after the meta: %w", start, ErrCorrupt)
	}
	if _, err := ms.drain(); err != nil {
		return nil, nil, err
	}

	// The state section.
	ss, err := newSecReader(src, secState, "state", lim.MaxState)
	if err != nil {
		return nil, nil, err
	}
	defer ss.release()
	var t task.Task
	var stateErr error
	if metaErr == nil {
		t, stateErr = task.New(meta.Type, nil)
		if stateErr == nil {
			start := src.n
			stateErr = decodeState(ss, src, t, lim)
			if src.err != nil {
				return nil, nil, src.err
			}
			if stateErr != nil {
				stateErr = fmt.Errorf("state section of task type %q at offset %d: %w", meta.Type, start, stateErr)
			}
		}
	}
	if _, err := ss.drain(); err != nil {
		return nil, nil, err
	}

	// The trailer.
	before := src.n
	var tr [1 + 8]byte
	if err := src.full(tr[:], "trailer"); err != nil {
		return nil, nil, err
	}
	want := src.mac.sum()
	var got [macSize]byte
	if err := src.fullUnauthenticated(got[:], "trailer"); err != nil {
		return nil, nil, err
	}
	if !hmac.Equal(want, got[:]) {
		if auth == AuthChannel {
			return nil, nil, fmt.Errorf("CRC-32C mismatch over %d bytes: %w", before+int64(len(tr)), ErrTampered)
		}
		return nil, nil, fmt.Errorf("MAC mismatch over %d bytes (altered after it was written, or written under another key): %w", before+int64(len(tr)), ErrTampered)
	}
	if tr[0] != trailerTag {
		return nil, nil, fmt.Errorf("trailer at offset %d: tag %q, want %q: %w", before, tr[0], trailerTag, ErrCorrupt)
	}
	if n := binary.LittleEndian.Uint64(tr[1:]); n != uint64(before) {
		return nil, nil, fmt.Errorf("trailer at offset %d: length %d: %w", before, n, ErrCorrupt)
	}
	if metaErr != nil {
		return nil, nil, metaErr
	}
	if stateErr != nil {
		return nil, nil, stateErr
	}
	return meta, t, nil
}

// decodeState reads the state section's value into t's struct and checks
// that nothing follows it.
func decodeState(ss *secReader, src *source, t task.Task, lim Limits) error {
	rv := reflect.ValueOf(t).Elem()
	p, err := planFor(rv.Type())
	if err != nil {
		return err
	}
	dec := msgpack.NewDecoder(ss)
	d := &stateDecoder{dec: dec, leaf: msgpack.NewDecoder(nil), r: ss, src: src, budget: lim.MaxState, prealloc: lim.Prealloc}
	if err := d.value(rv, p); err != nil {
		return err
	}
	end, err := ss.atEnd()
	if err != nil {
		return err
	}
	if !end {
		return corrupt("bytes after the state")
	}
	return nil
}
