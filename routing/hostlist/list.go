package hostlist

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/dpvm/dpvm/task"
)

// Entry is one host of the list: what another host needs to know of it
// to reach it, to check who speaks for it, and to place work on it.
type Entry struct {
	ID     task.HostID
	Name   string
	Addr   string
	Cores  int
	Speed  float64
	MemMiB int64
	Master bool
}

// Op is what a delta does.
type Op uint8

// Ops.
const (
	// OpAdd adds a host, or replaces the entry of one the list holds.
	OpAdd Op = 1
	// OpRemove removes a host.
	OpRemove Op = 2
)

// Delta is one change of the list: the version it makes, what it does,
// the host's entry (OpRemove: its ID alone) and, for a removal, why.
type Delta struct {
	Seq    uint64
	Op     Op
	Entry  Entry
	Reason string
}

// Kind is what a Change did to a host.
type Kind uint8

// Kinds of change.
const (
	// Added: the host is new to the list.
	Added Kind = iota + 1
	// Changed: the host's entry was replaced by a different one.
	Changed
	// Removed: the host left the list (Entry is the entry it had).
	Removed
)

// Change is what Apply, Reset, Add or Remove did to one host.
type Change struct {
	Kind   Kind
	Entry  Entry
	Reason string // Removed: why
}

// MaxHeld bounds the deltas a List holds past a gap; past it the
// newest are dropped (the whole list makes up for them).
const MaxHeld = 1024

// Errors.
var (
	// ErrGap: a delta came past the next version; the list is behind
	// and the whole list should be asked for.
	ErrGap = errors.New("host list: a delta past a gap")
	// ErrBadDelta: a delta of version 0 or of an unknown op.
	ErrBadDelta = errors.New("host list: bad delta")
)

// List is a versioned host list. The zero List is not usable; use New.
type List struct {
	version uint64
	hosts   map[task.HostID]Entry
	held    map[uint64]Delta
}

// New returns an empty list at version 0.
func New() *List {
	return &List{hosts: map[task.HostID]Entry{}, held: map[uint64]Delta{}}
}

// Version is the version of the last change the list holds.
func (l *List) Version() uint64 { return l.version }

// Len is the number of hosts on the list.
func (l *List) Len() int { return len(l.hosts) }

// Get returns host id's entry.
func (l *List) Get(id task.HostID) (Entry, bool) {
	e, ok := l.hosts[id]
	return e, ok
}

// Entries lists the hosts, by ID.
func (l *List) Entries() []Entry {
	out := make([]Entry, 0, len(l.hosts))
	for _, e := range l.hosts {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Gap reports whether the list holds deltas past a gap: it is waiting for
// the deltas before them or for the whole list.
func (l *List) Gap() bool { return len(l.held) > 0 }

// Add sets e on the list (the master's side): it adds the host or
// replaces its entry, and returns the delta that tells the hosts, of the
// list's next version. ok is false, and nothing changes, when the list
// already holds e as it is.
func (l *List) Add(e Entry) (Delta, []Change, bool) {
	if old, had := l.hosts[e.ID]; had && old == e {
		return Delta{}, nil, false
	}
	d := Delta{Seq: l.version + 1, Op: OpAdd, Entry: e}
	return d, l.apply(d, nil), true
}

// Remove takes host id off the list (the master's side) and returns the
// delta that tells the hosts. ok is false, and nothing changes, when the
// list does not hold the host.
func (l *List) Remove(id task.HostID, reason string) (Delta, []Change, bool) {
	if _, had := l.hosts[id]; !had {
		return Delta{}, nil, false
	}
	d := Delta{Seq: l.version + 1, Op: OpRemove, Entry: Entry{ID: id}, Reason: reason}
	return d, l.apply(d, nil), true
}

// Snapshot is the whole list and its version (a joining host's).
func (l *List) Snapshot() (uint64, []Entry) { return l.version, l.Entries() }

// Apply applies a delta heard from the master, with any held deltas it
// makes next, and returns what changed. A delta of a version already
// applied changes nothing; one past the next version is held and Apply
// returns ErrGap (the changes are then none).
func (l *List) Apply(d Delta) ([]Change, error) {
	if d.Seq == 0 || (d.Op != OpAdd && d.Op != OpRemove) {
		return nil, fmt.Errorf("%w: version %d, op %d", ErrBadDelta, d.Seq, d.Op)
	}
	switch {
	case d.Seq <= l.version:
		return nil, nil
	case d.Seq > l.version+1:
		if len(l.held) < MaxHeld {
			l.held[d.Seq] = d
		}
		return nil, fmt.Errorf("%w: version %d after %d", ErrGap, d.Seq, l.version)
	}
	return l.drain(l.apply(d, nil)), nil
}

// Reset replaces the list by the whole list of version v (the master's
// answer to a host that asked for it), applies the held deltas past v
// that follow on, and returns what changed. A list older than the one
// held is ignored.
func (l *List) Reset(v uint64, entries []Entry) []Change {
	if v < l.version {
		return nil
	}
	var ch []Change
	now := make(map[task.HostID]Entry, len(entries))
	for _, e := range entries {
		now[e.ID] = e
	}
	for _, old := range l.Entries() {
		if _, ok := now[old.ID]; !ok {
			delete(l.hosts, old.ID)
			ch = append(ch, Change{Kind: Removed, Entry: old, Reason: "not on the master's list"})
		}
	}
	for _, e := range entries {
		ch = l.set(e, ch)
	}
	l.version = v
	return l.drain(ch)
}

// drain applies the held deltas that follow on the version, in order,
// and forgets those it has passed.
func (l *List) drain(ch []Change) []Change {
	for len(l.held) > 0 {
		d, ok := l.held[l.version+1]
		if !ok {
			break
		}
		delete(l.held, d.Seq)
		ch = l.apply(d, ch)
	}
	for s := range l.held {
		if s <= l.version {
			delete(l.held, s)
		}
	}
	return ch
}

// apply applies d, the next version, and appends what changed to ch.
func (l *List) apply(d Delta, ch []Change) []Change {
	l.version = d.Seq
	if d.Op == OpRemove {
		if old, ok := l.hosts[d.Entry.ID]; ok {
			delete(l.hosts, d.Entry.ID)
			ch = append(ch, Change{Kind: Removed, Entry: old, Reason: d.Reason})
		}
		return ch
	}
	return l.set(d.Entry, ch)
}

// set puts e on the list and appends what changed to ch.
func (l *List) set(e Entry, ch []Change) []Change {
	old, had := l.hosts[e.ID]
	l.hosts[e.ID] = e
	switch {
	case !had:
		ch = append(ch, Change{Kind: Added, Entry: e})
	case old != e:
		ch = append(ch, Change{Kind: Changed, Entry: e})
	}
	return ch
}
