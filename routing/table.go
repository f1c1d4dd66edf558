package routing

import (
	"encoding/binary"
	"fmt"
	"slices"
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
	// past holds, for tasks that moved, the hosts they lived on before
	// their current route's, newest first, at most MaxPast; retired lists
	// the forgotten tasks whose past is kept, oldest first, at most
	// MaxRetired (see Past).
	past    map[task.TID][]task.HostID
	retired []task.TID
	// endedAt holds, for the retired tasks that ended (Forget), the
	// epoch of the route they ended on (see Ended).
	endedAt map[task.TID]uint64
}

// MaxPast is how many earlier hosts a Table remembers for each task.
const MaxPast = 4

// MaxRetired is how many forgotten (ended) tasks a Table remembers the
// hosts of.
const MaxRetired = 1 << 14

// NewTable returns an empty table: every task lives on its origin host.
func NewTable() *Table {
	return &Table{m: map[task.TID]Route{}, past: map[task.TID][]task.HostID{}, endedAt: map[task.TID]uint64{}}
}

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
	if r.Host != cur.Host {
		t.remember(tid, cur.Host)
	}
	t.m[tid] = r
	t.version++
	return true
}

// remember records h as the host tid lived on before its current one.
func (t *Table) remember(tid task.TID, h task.HostID) {
	if h == 0 {
		return
	}
	p := t.past[tid]
	if len(p) > 0 && p[0] == h {
		return
	}
	if len(p) < MaxPast {
		p = append(p, 0)
	}
	copy(p[1:], p)
	p[0] = h
	t.past[tid] = p
}

// AddPast records h as a host tid lived on before its current route's,
// as the newest of them (unless it is already among them): what a task's
// origin host tells of its past, on demand (routing/route), to a host that
// was not told of its moves. A host the current route names, or none, is
// not recorded.
func (t *Table) AddPast(tid task.TID, h task.HostID) {
	if h == t.Lookup(tid).Host || slices.Contains(t.past[tid], h) {
		return
	}
	t.remember(tid, h)
}

// Past lists the hosts tid lived on before its current route's, newest
// first, as far as this table has seen routes change (at most MaxPast);
// for an ended task (Forget), the host it ended on first. A task that
// never moved has none: its origin is in its TID.
func (t *Table) Past(tid task.TID) []task.HostID { return t.past[tid] }

// Forget drops tid's entry (the task has exited). The hosts it lived on
// are kept, for the MaxRetired tasks that ended last, so that what they
// sent before (resends of messages not yet acknowledged) is still known
// to come from where they lived.
func (t *Table) Forget(tid task.TID) { t.drop(tid, true) }

// Evict drops tid's entry without its task having ended (a route cache's
// bound, routing/route): as Forget, but Ended does not report it.
func (t *Table) Evict(tid task.TID) { t.drop(tid, false) }

// drop is Forget (ended) and Evict.
func (t *Table) drop(tid task.TID, ended bool) {
	r, had := t.m[tid]
	if had && r.Host != tid.Host() {
		t.remember(tid, r.Host)
	}
	delete(t.m, tid)
	t.version++
	if ended && had {
		t.endedAt[tid] = r.Epoch
	}
	if _, ok := t.past[tid]; !ok && !(ended && had) {
		return
	}
	t.retired = append(t.retired, tid)
	if len(t.retired) > MaxRetired {
		old := t.retired[0]
		t.retired = t.retired[1:]
		if _, live := t.m[old]; !live {
			delete(t.past, old)
			delete(t.endedAt, old)
		}
	}
}

// Ended reports whether tid ended after it moved (Forget dropped its
// entry, among the MaxRetired tasks retired last, and no route of it was
// recorded since), and the epoch of the route it ended on.
func (t *Table) Ended(tid task.TID) (uint64, bool) {
	if _, live := t.m[tid]; live {
		return 0, false
	}
	e, ok := t.endedAt[tid]
	return e, ok
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

// RefusalSize is the binary size of one Refusal (AppendRefusal): the
// TID, the route's host and epoch, and the in-transit flag.
const RefusalSize = 8 + 4 + 8 + 1

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
	if len(b)%RefusalSize != 0 {
		return fmt.Errorf("refuse frame of %d bytes: %w", len(b), ErrMalformed)
	}
	for ; len(b) > 0; b = b[RefusalSize:] {
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
