package hostlist

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/dpvm/dpvm/task"
)

func entry(id int, addr string) Entry {
	return Entry{ID: task.HostID(id), Name: fmt.Sprintf("h%d", id), Addr: addr, Cores: 2, Speed: 1, MemMiB: 1024}
}

// TestApplyInOrder: a host applying the master's deltas in order holds
// the master's list, and reports each change once.
func TestApplyInOrder(t *testing.T) {
	m, h := New(), New()
	var ds []Delta
	add := func(e Entry) {
		if d, _, ok := m.Add(e); ok {
			ds = append(ds, d)
		}
	}
	add(entry(0, "m:1"))
	add(entry(1, "a:1"))
	add(entry(2, "b:1"))
	add(entry(1, "a:2")) // a changed address
	add(entry(1, "a:2")) // the same again: no delta
	if d, _, ok := m.Remove(2, "left"); ok {
		ds = append(ds, d)
	}
	if _, _, ok := m.Remove(2, "left"); ok {
		t.Fatal("removing a host not on the list made a delta")
	}
	if m.Version() != 5 || len(ds) != 5 {
		t.Fatalf("master at version %d with %d deltas, want 5 and 5", m.Version(), len(ds))
	}
	var kinds []Kind
	for _, d := range ds {
		ch, err := h.Apply(d)
		if err != nil {
			t.Fatalf("apply %+v: %v", d, err)
		}
		for _, c := range ch {
			kinds = append(kinds, c.Kind)
		}
	}
	if want := []Kind{Added, Added, Added, Changed, Removed}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("changes %v, want %v", kinds, want)
	}
	if !reflect.DeepEqual(h.Entries(), m.Entries()) || h.Version() != m.Version() {
		t.Errorf("host holds %v at %d, master %v at %d", h.Entries(), h.Version(), m.Entries(), m.Version())
	}
	// Every delta again: nothing changes.
	for _, d := range ds {
		if ch, err := h.Apply(d); err != nil || len(ch) != 0 {
			t.Errorf("applying %+v again: %v, %v", d, ch, err)
		}
	}
}

// TestGap: a delta past the next version is held and reported as a gap;
// the missing one fills it, or the whole list does.
func TestGap(t *testing.T) {
	m := New()
	var ds []Delta
	for i := range 4 {
		d, _, _ := m.Add(entry(i, "x"))
		ds = append(ds, d)
	}
	h := New()
	if _, err := h.Apply(ds[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Apply(ds[2]); !errors.Is(err, ErrGap) || !h.Gap() {
		t.Fatalf("delta 3 after 1: %v, gap %v; want ErrGap", err, h.Gap())
	}
	ch, err := h.Apply(ds[1]) // fills the gap: 2, then the held 3
	if err != nil || len(ch) != 2 || h.Version() != 3 || h.Gap() {
		t.Fatalf("delta 2 filling the gap: %v %v, version %d, gap %v", ch, err, h.Version(), h.Gap())
	}

	// A lost delta: the whole list makes up for it, and the held delta
	// past it follows on.
	h2 := New()
	_, _ = h2.Apply(ds[0])
	if _, err := h2.Apply(ds[3]); !errors.Is(err, ErrGap) {
		t.Fatalf("delta 4 after 1: %v", err)
	}
	v, all := m.Snapshot()
	old := New()
	_, _ = old.Apply(ds[0])
	_, _ = old.Apply(ds[1])
	_, _ = old.Apply(ds[2])
	v3, at3 := old.Snapshot()
	ch = h2.Reset(v3, at3)
	if h2.Gap() || h2.Version() != v || !reflect.DeepEqual(h2.Entries(), all) || len(ch) != 3 {
		t.Errorf("after the list of version 3: version %d (want %d), gap %v, %v; changes %v", h2.Version(), v, h2.Gap(), h2.Entries(), ch)
	}
	// An older list than the one held changes nothing.
	if ch := h2.Reset(1, nil); ch != nil || h2.Len() != 4 {
		t.Errorf("an older list changed %v, leaving %d hosts", ch, h2.Len())
	}
}

// TestHeldBound: past a gap at most MaxHeld deltas are held.
func TestHeldBound(t *testing.T) {
	h := New()
	for i := range MaxHeld + 10 {
		_, _ = h.Apply(Delta{Seq: uint64(i + 2), Op: OpAdd, Entry: entry(i, "x")})
	}
	if len(h.held) != MaxHeld {
		t.Errorf("%d deltas held, want %d", len(h.held), MaxHeld)
	}
	if _, err := h.Apply(Delta{Op: OpAdd}); !errors.Is(err, ErrBadDelta) {
		t.Errorf("a delta of version 0: %v", err)
	}
}

// TestUnreliableDelivery: deltas lost, repeated and reordered; a host
// that sees a gap asks for the whole list, which comes some deliveries
// later. Each host ends with the master's list, and its changes replayed
// from empty give the same list.
func TestUnreliableDelivery(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		m := New()
		var ds []Delta
		for range 60 {
			id := rng.IntN(12)
			var d Delta
			var ok bool
			if rng.IntN(3) == 0 {
				d, _, ok = m.Remove(task.HostID(id), "gone")
			} else {
				d, _, ok = m.Add(entry(id, fmt.Sprintf("a%d", rng.IntN(3))))
			}
			if ok {
				ds = append(ds, d)
			}
		}
		// The delivery: each delta dropped, repeated or moved later.
		var wire []Delta
		for _, d := range ds {
			switch rng.IntN(10) {
			case 0: // lost
			case 1:
				wire = append(wire, d, d)
			default:
				wire = append(wire, d)
			}
		}
		for i := range wire {
			if j := i + rng.IntN(3); j < len(wire) {
				wire[i], wire[j] = wire[j], wire[i]
			}
		}
		h := New()
		mirror := map[task.HostID]Entry{}
		play := func(ch []Change) {
			for _, c := range ch {
				if c.Kind == Removed {
					delete(mirror, c.Entry.ID)
				} else {
					mirror[c.Entry.ID] = c.Entry
				}
			}
		}
		asked := -1
		for i, d := range wire {
			ch, err := h.Apply(d)
			play(ch)
			if errors.Is(err, ErrGap) && asked < 0 {
				asked = i + 3 // the answer comes a few deliveries later
			}
			if i == asked {
				v, all := replay(ds, d.Seq)
				play(h.Reset(v, all))
				asked = -1
			}
		}
		if h.Version() != m.Version() {
			v, all := m.Snapshot()
			play(h.Reset(v, all))
		}
		if !reflect.DeepEqual(h.Entries(), m.Entries()) {
			t.Fatalf("seed %d: host holds %v, master %v", seed, h.Entries(), m.Entries())
		}
		if len(mirror) != h.Len() {
			t.Fatalf("seed %d: the changes replayed hold %d hosts, the list %d", seed, len(mirror), h.Len())
		}
		for _, e := range h.Entries() {
			if mirror[e.ID] != e {
				t.Fatalf("seed %d: the changes replayed hold %v for %v", seed, mirror[e.ID], e)
			}
		}
	}
}

// replay is the master's list at version v (at most its last).
func replay(ds []Delta, v uint64) (uint64, []Entry) {
	l := New()
	for _, d := range ds {
		if d.Seq > v {
			break
		}
		_, _ = l.Apply(d)
	}
	return l.Snapshot()
}
