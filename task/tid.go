package task

import (
	"fmt"
	"strconv"
	"strings"
)

// HostID identifies a host of a virtual machine. IDs start at 1 and are
// never reused within a virtual machine's life. The zero HostID means no
// host.
type HostID uint32

// String returns the host ID as "h3".
func (h HostID) String() string { return "h" + strconv.FormatUint(uint64(h), 10) }

// MarshalText implements encoding.TextMarshaler: host IDs print as "h3".
func (h HostID) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (h *HostID) UnmarshalText(b []byte) error {
	v, err := ParseHostID(string(b))
	if err != nil {
		return err
	}
	*h = v
	return nil
}

// ParseHostID parses "h3" (and "h0", the zero host ID).
func ParseHostID(s string) (HostID, error) {
	rest, ok := strings.CutPrefix(s, "h")
	if !ok {
		return 0, fmt.Errorf("parse host ID %q: want h<number>", s)
	}
	n, err := strconv.ParseUint(rest, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("parse host ID %q: %w", s, err)
	}
	return HostID(n), nil
}

// TID identifies a task for its whole life. It names the task's origin host
// (the host it was spawned on) and a number unique on that host; migrating a
// task never changes its TID. TIDs are comparable and can be used as map
// keys. The zero TID names no task (the Parent of a root task).
type TID uint64

// AnyTask is the wildcard source for Recv, TryRecv and Probe: a message from
// any task matches. It is PVM's -1.
const AnyTask TID = ^TID(0)

// AnyTag is the wildcard tag for Recv, TryRecv and Probe. Message tags are
// non-negative.
const AnyTag = -1

// NewTID returns the TID of task number n spawned on host h.
func NewTID(h HostID, n uint32) TID { return TID(uint64(h)<<32 | uint64(n)) }

// Host is the task's origin host.
func (t TID) Host() HostID { return HostID(t >> 32) }

// Num is the task's number on its origin host.
func (t TID) Num() uint32 { return uint32(t) }

// IsZero reports whether t names no task.
func (t TID) IsZero() bool { return t == 0 }

// String formats t as "t<host>:<num>", e.g. "t1:42". The zero TID prints as
// "-" and AnyTask as "*".
func (t TID) String() string {
	switch t {
	case 0:
		return "-"
	case AnyTask:
		return "*"
	}
	return "t" + strconv.FormatUint(uint64(t.Host()), 10) + ":" + strconv.FormatUint(uint64(t.Num()), 10)
}

// MarshalText implements encoding.TextMarshaler, so TIDs print as strings
// in JSON.
func (t TID) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *TID) UnmarshalText(b []byte) error {
	v, err := ParseTID(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// ParseTID parses the forms String produces: "t1:42", "-" (the zero TID) and
// "*" (AnyTask).
func ParseTID(s string) (TID, error) {
	switch s {
	case "-":
		return 0, nil
	case "*":
		return AnyTask, nil
	}
	rest, ok := strings.CutPrefix(s, "t")
	if !ok {
		return 0, fmt.Errorf("parse TID %q: %w", s, ErrBadTID)
	}
	hs, ns, ok := strings.Cut(rest, ":")
	if !ok {
		return 0, fmt.Errorf("parse TID %q: %w", s, ErrBadTID)
	}
	h, err := strconv.ParseUint(hs, 10, 32)
	if err != nil || h == 0 {
		return 0, fmt.Errorf("parse TID %q: bad host: %w", s, ErrBadTID)
	}
	n, err := strconv.ParseUint(ns, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("parse TID %q: bad number: %w", s, ErrBadTID)
	}
	return NewTID(HostID(h), uint32(n)), nil
}
