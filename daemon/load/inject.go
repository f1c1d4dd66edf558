package load

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Mode says how an overlay combines with the underlying source's figures.
// Values are part of the wire format: append only.
type Mode uint8

const (
	// Replace puts the overlay's figures in place of the source's.
	Replace Mode = iota
	// Add adds the overlay's figures (which may be negative) to the
	// source's; results are clamped at zero.
	Add
)

// String returns "replace" or "add".
func (m Mode) String() string {
	switch m {
	case Replace:
		return "replace"
	case Add:
		return "add"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ParseMode reads "replace" or "add" (as String writes them).
func ParseMode(s string) (Mode, error) {
	switch s {
	case "replace", "":
		return Replace, nil
	case "add":
		return Add, nil
	}
	return 0, fmt.Errorf("%w: mode %q (replace or add)", ErrInvalid, s)
}

// Overlay is an emulated change of a live host's situation, as `dpvm load
// inject HOST --users N --load L [--mem-free MIB] [--for DURATION]` asks for
// it. A nil figure leaves the source's as it is. Load is the other
// runnable processes (Sample.External): the daemon's own tasks are still
// counted on top of it.
type Overlay struct {
	Mode       Mode          `json:"mode" msgpack:"mo"`
	Users      *int          `json:"users,omitempty" msgpack:"u,omitempty"`
	Load       *float64      `json:"load,omitempty" msgpack:"l,omitempty"`
	MemFreeMiB *float64      `json:"mem_free_mib,omitempty" msgpack:"m,omitempty"`
	For        time.Duration `json:"for,omitempty" msgpack:"f,omitempty"` // 0: until cleared
}

// Validate reports an overlay that sets nothing, an unknown mode, a
// negative duration, or a figure out of range (negative figures only in Add
// mode). Errors wrap ErrInvalid.
func (o Overlay) Validate() error {
	bad := func(f string, a ...any) error {
		return fmt.Errorf("%w: overlay: "+f, append([]any{ErrInvalid}, a...)...)
	}
	lo := 0.0
	switch o.Mode {
	case Replace:
	case Add:
		lo = -1
	default:
		return bad("unknown mode %d", o.Mode)
	}
	if o.Users == nil && o.Load == nil && o.MemFreeMiB == nil {
		return bad("sets nothing (give users, load or free memory)")
	}
	if o.For < 0 {
		return bad("duration %v is negative", o.For)
	}
	if u := o.Users; u != nil && (*u < int(lo)*MaxUsers || *u > MaxUsers) {
		return bad("users %d out of range %d..%d", *u, int(lo)*MaxUsers, MaxUsers)
	}
	if l := o.Load; l != nil && !(*l >= lo*MaxLoad && *l <= MaxLoad) {
		return bad("load %g out of range %g..%g", *l, lo*MaxLoad, float64(MaxLoad))
	}
	if m := o.MemFreeMiB; m != nil && !(*m >= lo*MaxMemMiB && *m <= MaxMemMiB) {
		return bad("free memory %g MiB out of range %g..%g", *m, lo*MaxMemMiB, float64(MaxMemMiB))
	}
	return nil
}

// String describes the overlay, e.g. "replace users=2 load=3 for 1m0s".
func (o Overlay) String() string {
	s := o.Mode.String()
	if o.Users != nil {
		s += fmt.Sprintf(" users=%d", *o.Users)
	}
	if o.Load != nil {
		s += fmt.Sprintf(" load=%g", *o.Load)
	}
	if o.MemFreeMiB != nil {
		s += fmt.Sprintf(" mem_free_mib=%g", *o.MemFreeMiB)
	}
	if o.For > 0 {
		s += " for " + o.For.String()
	}
	return s
}

// Apply returns s changed by the overlay, labelled "+injected" and
// emulated. The emulated part of the external load is what the overlay
// adds beyond the real (non-emulated) part of s.
func (o Overlay) Apply(s Sample) Sample {
	measured := s.External - s.EmulatedLoad
	if o.Users != nil {
		s.Users = combineInt(o.Mode, s.Users, *o.Users)
	}
	if o.Load != nil {
		s.External = combine(o.Mode, s.External, *o.Load)
	}
	if o.MemFreeMiB != nil {
		s.MemFreeMiB = combine(o.Mode, s.MemFreeMiB, *o.MemFreeMiB)
	}
	s.EmulatedLoad = math.Min(s.External, math.Max(0, s.External-measured))
	s.Source += "+injected"
	s.Emulated = true
	return s
}

func combine(m Mode, base, v float64) float64 {
	if m == Add {
		return math.Max(0, base+v)
	}
	return v
}

func combineInt(m Mode, base, v int) int {
	if m == Add {
		return max(0, base+v)
	}
	return v
}

// Injected overlays run-time changes on another source: while an overlay
// is set and not expired, Sample returns the base's figures changed by it.
// It is safe for concurrent use; the base must be too (every Source of this
// package is).
type Injected struct {
	base Source

	mu    sync.Mutex
	o     Overlay
	until time.Time // zero: until cleared
	set   bool
}

// NewInjected returns an Injected over base with no overlay.
func NewInjected(base Source) *Injected { return &Injected{base: base} }

// Set validates o and puts it in place of any overlay set before; with
// o.For > 0 it expires at now + o.For.
func (in *Injected) Set(now time.Time, o Overlay) error {
	if err := o.Validate(); err != nil {
		return err
	}
	o = o.clone()
	in.mu.Lock()
	defer in.mu.Unlock()
	in.o, in.set, in.until = o, true, time.Time{}
	if o.For > 0 {
		in.until = now.Add(o.For)
	}
	return nil
}

// Clear removes the overlay and reports whether one was in force.
func (in *Injected) Clear(now time.Time) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	active := in.activeLocked(now)
	in.set = false
	return active
}

// Active returns the overlay in force at now, its expiry (zero: until
// cleared) and whether there is one.
func (in *Injected) Active(now time.Time) (o Overlay, until time.Time, ok bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.activeLocked(now) {
		return Overlay{}, time.Time{}, false
	}
	return in.o.clone(), in.until, true
}

// activeLocked reports whether an overlay is in force at now, dropping an
// expired one.
func (in *Injected) activeLocked(now time.Time) bool {
	if in.set && !in.until.IsZero() && !now.Before(in.until) {
		in.set = false
	}
	return in.set
}

// Sample returns the base's sample, changed by the overlay in force at now.
func (in *Injected) Sample(now time.Time) (Sample, error) {
	s, err := in.base.Sample(now)
	if err != nil {
		return Sample{}, err
	}
	if o, _, ok := in.Active(now); ok {
		s = o.Apply(s)
	}
	return s, nil
}

func (o Overlay) clone() Overlay {
	if o.Users != nil {
		u := *o.Users
		o.Users = &u
	}
	if o.Load != nil {
		l := *o.Load
		o.Load = &l
	}
	if o.MemFreeMiB != nil {
		m := *o.MemFreeMiB
		o.MemFreeMiB = &m
	}
	return o
}
