package routing

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/dpvm/dpvm/task"
)

// Route says where a task lives. Epoch grows every time the task moves; a
// route with a larger epoch supersedes one with a smaller. Epoch 0 is the
// implicit route of every task: its origin host.
type Route struct {
	Host  task.HostID `msgpack:"h"`
	Epoch uint64      `msgpack:"e"`
	// InTransit is set while the task moves to Host: messages for it are
	// held by its senders until the move commits or aborts.
	InTransit bool `msgpack:"t,omitempty"`
}

// Table is a routing table: the routes of tasks that do not live on their
// origin host. The master holds the authoritative one; every daemon keeps a
// cache updated by the master's broadcasts. A Table is not safe for
// concurrent use.
type Table struct {
	m       map[task.TID]Route
	version uint64
}

// NewTable returns an empty table: every task lives on its origin host.
func NewTable() *Table { return &Table{m: map[task.TID]Route{}} }

// Lookup returns tid's route: the entry if there is one, else the origin
// host at epoch 0.
func (t *Table) Lookup(tid task.TID) Route {
	if r, ok := t.m[tid]; ok {
		return r
	}
	return Route{Host: tid.Host()}
}

// Update applies r to tid if it is newer than what the table holds, and
// reports whether it did: a larger epoch, or the same epoch committing a
// move that was in transit. Routes never go back in epoch.
func (t *Table) Update(tid task.TID, r Route) bool {
	cur := t.Lookup(tid)
	newer := r.Epoch > cur.Epoch ||
		(r.Epoch == cur.Epoch && cur.InTransit && !r.InTransit && r.Host == cur.Host)
	if !newer {
		return false
	}
	t.m[tid] = r
	t.version++
	return true
}

// Forget drops tid's entry (the task has exited).
func (t *Table) Forget(tid task.TID) {
	delete(t.m, tid)
	t.version++
}

// Version changes whenever a route changes: a caller that remembers what
// Lookup said knows it still holds while Version is the same.
func (t *Table) Version() uint64 { return t.version }

// Entries lists the table's entries in TID order, for snapshots.
func (t *Table) Entries() []Entry {
	out := make([]Entry, 0, len(t.m))
	for tid, r := range t.m {
		out = append(out, Entry{TID: tid, Route: r})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TID < out[j].TID })
	return out
}

// Len is the number of entries.
func (t *Table) Len() int { return len(t.m) }

// Entry is one route in a table snapshot or broadcast.
type Entry struct {
	TID   task.TID `msgpack:"i"`
	Route Route    `msgpack:"r"`
}

// Refusal tells a sender that the daemon it sent to does not host To: it
// names the newest route the refusing daemon knows (Epoch 0 when it knows
// none), or Host 0 when To no longer exists (it has exited), in which case
// the sender drops its messages for To. The sender holds its messages for To until it learns a route with
// a larger epoch than the one it used, then resends them.
type Refusal struct {
	To    task.TID
	Route Route
}

const refusalSize = 8 + 4 + 8 + 1

// AppendRefusal appends r's binary encoding to dst.
func AppendRefusal(dst []byte, r Refusal) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.To))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(r.Route.Host))
	dst = binary.LittleEndian.AppendUint64(dst, r.Route.Epoch)
	t := byte(0)
	if r.Route.InTransit {
		t = 1
	}
	return append(dst, t)
}

// DecodeRefusals decodes the body of a KindRefuse frame.
func DecodeRefusals(b []byte, fn func(Refusal)) error {
	if len(b)%refusalSize != 0 {
		return fmt.Errorf("refuse frame of %d bytes: %w", len(b), ErrMalformed)
	}
	for ; len(b) > 0; b = b[refusalSize:] {
		if b[20] > 1 {
			return fmt.Errorf("refusal flag %d: %w", b[20], ErrMalformed)
		}
		fn(Refusal{
			To: task.TID(binary.LittleEndian.Uint64(b)),
			Route: Route{
				Host:      task.HostID(binary.LittleEndian.Uint32(b[8:])),
				Epoch:     binary.LittleEndian.Uint64(b[12:]),
				InTransit: b[20] == 1,
			},
		})
	}
	return nil
}
