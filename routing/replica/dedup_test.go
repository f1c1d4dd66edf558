package replica

import (
	"bytes"
	"testing"
)

// TestDedup: a retried command returns its first result without running
// again, an older one returns nil, a new one runs; the sessions survive a
// snapshot; bad commands change nothing.
func TestDedup(t *testing.T) {
	app := newCounter()
	d := NewDedup(app)
	cmd := func(client, seq uint64, op string) []byte {
		return AppendCommand(nil, Command{Client: client, Seq: seq, Op: []byte(op)})
	}
	if got := d.Apply(1, cmd(1, 1, "1:1:k")); string(got) != "1" {
		t.Fatalf("first run: %q", got)
	}
	if got := d.Apply(2, cmd(1, 1, "1:1:k")); string(got) != "1" {
		t.Errorf("retry: %q, want the first result", got)
	}
	if got := d.Apply(3, cmd(2, 1, "2:1:k")); string(got) != "2" {
		t.Errorf("another client: %q", got)
	}
	if got := d.Apply(4, cmd(1, 2, "1:2:k")); string(got) != "3" {
		t.Errorf("next command: %q", got)
	}
	if got := d.Apply(5, cmd(1, 1, "1:1:k")); got != nil {
		t.Errorf("an older command: %q, want nil", got)
	}
	for _, bad := range [][]byte{nil, {0x80}, cmd(0, 1, "x"), cmd(1, 0, "x")} {
		if got := d.Apply(6, bad); got != nil {
			t.Errorf("bad command %x: %q", bad, got)
		}
	}
	if app.dups != 0 || app.Counts["k"] != 3 || d.Last(1) != 2 {
		t.Errorf("dups %d, count %d, last %d", app.dups, app.Counts["k"], d.Last(1))
	}
	snap, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	d2 := NewDedup(newCounter())
	if err := d2.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if got := d2.Apply(7, cmd(1, 2, "1:2:k")); string(got) != "3" {
		t.Errorf("retry after restore: %q", got)
	}
	again, _ := d2.Snapshot()
	if !bytes.Equal(snap, again) {
		t.Error("a retry changed the state")
	}
	for _, bad := range [][]byte{nil, {9}, snap[:3], append([]byte{dedupVersion, 1, 5, 1, 99}, 'x')} {
		if err := d2.Restore(bad); err == nil {
			t.Errorf("Restore(%x) took it", bad)
		}
	}
}
