package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/task"
)

// methodRow is a method's row in daemon/pki/README.md's table.
func methodRow(m *method) string {
	served := "any daemon"
	if m.master {
		served = "master"
	}
	return fmt.Sprintf("| `%s` | %s | %s | %s |", m.name, m.who, m.owns, served)
}

// TestMethodTableREADME: daemon/pki/README.md's table of control methods
// says what the code's table does, row for row, in the same order.
func TestMethodTableREADME(t *testing.T) {
	b, err := os.ReadFile("pki/README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Control methods\n")
	if !ok {
		t.Fatal(`pki/README.md has no "## Control methods" section`)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	var got []string // the rows of the section's first table
	for _, l := range strings.Split(sec, "\n") {
		if strings.HasPrefix(l, "| `") {
			got = append(got, strings.TrimSpace(l))
		} else if len(got) > 0 && !strings.HasPrefix(l, "|") {
			break
		}
	}
	var want []string
	for i := range methodTable {
		want = append(want, methodRow(&methodTable[i]))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("pki/README.md's table of control methods differs from the code's; the code's is:\n%s", strings.Join(want, "\n"))
	}
}

// TestMethodRulesEnforced: for every method of the table open to users
// with an ownership rule, a user's call naming what another owns is
// refused with ErrForbidden, before the handler acts.
func TestMethodRulesEnforced(t *testing.T) {
	d, _ := newTestDaemon(t)
	ctx := context.Background()
	bobs, err := d.SpawnTask(fn(t, func(c *task.Ctx, _ int) error {
		_, err := c.Recv(task.AnyTask, 1, nil, task.Safe())
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	d.owners.setTasks([]task.TID{bobs}, owner{name: "bob"})
	d.owners.setJob(7, owner{name: "bob"})
	alice := &peer{cert: pki.Peer{Role: pki.RoleUser, Name: "alice"}, info: HostInfo{Name: "alice"}}
	bodies := map[ownRule]any{
		ownTask:   tidArgs{TID: bobs},
		ownJob:    jobArgs{Job: 7},
		ownJobDir: jobArgs{Job: 7},
		ownSpawn:  spawnArgs{Parent: bobs, Req: task.SpawnRequest{Type: "x", Count: 1}},
	}
	for i := range methodTable {
		m := &methodTable[i]
		if m.who != callUser || m.owns == ownNone || m.owns == ownRun || m.owns == ownCall {
			continue // ownRun: TestRestartCheckpointOwner; ownCall: TestCancelOwnCallsOnly
		}
		args, ok := bodies[m.owns]
		if !ok {
			t.Errorf("%s: no case for rule %q", m.name, m.owns)
			continue
		}
		if m.name == mMigrate {
			args = migrateArgs{TID: bobs, To: "h1"}
		}
		body, err := encodeMsg(args)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.safeHandle(ctx, alice, m.name, body); !errors.Is(err, ErrForbidden) {
			t.Errorf("alice's %s on bob's: %v, want ErrForbidden", m.name, err)
		}
	}
	if err := d.Kill(bobs); err != nil {
		t.Errorf("bob's task was killed by a refused call: %v", err)
	}
}

// TestLocalCallSkipsCodec: a call a daemon makes to itself with its
// method's request type reaches the handler without the codec — it
// allocates less than the same call as an encoded body — and answers the
// same.
func TestLocalCallSkipsCodec(t *testing.T) {
	d, _ := newTestDaemon(t)
	for range 3 {
		if _, err := d.SpawnTask(fn(t, func(c *task.Ctx, _ int) error {
			_, err := c.Recv(task.AnyTask, 1, nil, task.Safe())
			return err
		})); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	body, err := encodeMsg(psArgs{All: true})
	if err != nil {
		t.Fatal(err)
	}
	var typed, coded psReply
	if err := d.callHost(ctx, d.cfg.HostID, mPS, psArgs{All: true}, &typed); err != nil {
		t.Fatal(err)
	}
	if err := d.callHost(ctx, d.cfg.HostID, mPS, msgpack.RawMessage(body), &coded); err != nil {
		t.Fatal(err)
	}
	if len(typed.Tasks) != 3 || len(coded.Tasks) != 3 {
		t.Fatalf("ps: %d tasks typed, %d through the codec; want 3", len(typed.Tasks), len(coded.Tasks))
	}
	a := testing.AllocsPerRun(50, func() {
		var r psReply
		_ = d.callHost(ctx, d.cfg.HostID, mPS, psArgs{All: true}, &r)
	})
	b := testing.AllocsPerRun(50, func() {
		var r psReply
		_ = d.callHost(ctx, d.cfg.HostID, mPS, msgpack.RawMessage(body), &r)
	})
	if a >= b {
		t.Fatalf("a typed local call allocates %.0f times, through the codec %.0f", a, b)
	}
	t.Logf("allocations of a local ps: %.0f typed, %.0f through the codec", a, b)
}

// TestCancelOwnCallsOnly: call.cancel on one connection cancels that
// connection's call of the ID named, never another connection's.
func TestCancelOwnCallsOnly(t *testing.T) {
	d, _ := newTestDaemon(t)
	alice := &peer{cert: pki.Peer{Role: pki.RoleUser, Name: "alice"}, ctx: context.Background()}
	bob := &peer{cert: pki.Peer{Role: pki.RoleUser, Name: "bob"}, ctx: context.Background()}
	bobCtx, bobDone := bob.callCtx(7)
	defer bobDone()
	aliceCtx, aliceDone := alice.callCtx(7)
	defer aliceDone()
	body, err := encodeMsg(cancelArgs{ID: 7})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.safeHandle(context.Background(), alice, mCancel, body); err != nil {
		t.Fatal(err)
	}
	if aliceCtx.Err() == nil {
		t.Error("alice's call 7 runs on after she cancelled it")
	}
	if bobCtx.Err() != nil {
		t.Error("alice's cancel ended bob's call 7")
	}
}
