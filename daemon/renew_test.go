package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/task"
)

// TestRenewCertificate: a host daemon whose credential file is replaced by
// a renewed certificate presents the new serial on new connections, keeps
// the connection to the master it made under the old one, and its expiry
// warning follows the new certificate.
func TestRenewCertificate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vm := startVM(t, 1, Config{})
	m := vm.Master()
	dir := t.TempDir()
	file := filepath.Join(dir, "h2.pem")
	// The first certificate expires in ten days: the daemon warns at start.
	old, err := vm.Cluster.CA.IssueHost("h2", false, time.Now(), 10*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WriteCredential(file, old); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	h2, err := Start(ctx, Config{Listen: "127.0.0.1:0", Join: m.Addr(), Credential: old, CredentialFile: file,
		Heartbeat: 50 * time.Millisecond, Output: &syncBuffer{}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h2.Halt(context.Background()) })
	const warning = "certificate expires soon"
	if n := strings.Count(logs.String(), warning); n != 1 {
		t.Fatalf("%d expiry warnings at start, want 1:\n%s", n, logs.String())
	}
	admin, err := transport.Dialer(transport.LocalFor(h2.Addr()), vm.Cluster.Admin, transport.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	serialOf := func() string {
		t.Helper()
		c, err := admin.Dial(ctx, h2.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close("done")
		return c.Peer().Serial
	}
	if s := serialOf(); s != old.Serial {
		t.Fatalf("before renewal h2 presents %s, want %s", s, old.Serial)
	}

	// Renew: the new file is written beside and moved over the old one,
	// as an operator would.
	renewed, err := vm.Cluster.Host("h2")
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "h2.pem.new")
	if err := pki.WriteCredential(tmp, renewed); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	// The heartbeat notices the change; poll with a deadline.
	for h2.credential().Serial != renewed.Serial {
		select {
		case <-ctx.Done():
			t.Fatalf("the renewed certificate was not taken up:\n%s", logs.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if s := serialOf(); s != renewed.Serial {
		t.Fatalf("after renewal h2 presents %s, want %s", s, renewed.Serial)
	}
	if !strings.Contains(logs.String(), "renewed certificate taken up") {
		t.Fatalf("no log line for the renewal:\n%s", logs.String())
	}
	h2.checkExpiry(time.Now())
	if n := strings.Count(logs.String(), warning); n != 1 {
		t.Fatalf("%d expiry warnings after renewal, want still 1: the warning follows the new certificate", n)
	}
	h2.checkExpiry(renewed.NotAfter.Add(-24 * time.Hour))
	if n := strings.Count(logs.String(), warning); n != 2 {
		t.Fatalf("%d expiry warnings a day before the new certificate expires, want 2", n)
	}

	// The connection to the master made under the old certificate still
	// carries work: a task placed on h2 runs and reports.
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		kids, err := c.Spawn(fn(t, func(c *task.Ctx, _ int) error { return c.Send(c.Parent(), 1, "on h2") }), 1, task.OnHost("h2"))
		if err != nil {
			return err
		}
		var s string
		if _, err := c.Recv(kids[0], 1, &s); err != nil {
			return err
		}
		if s != "on h2" {
			t.Errorf("got %q", s)
		}
		return nil
	})

	// A file that is not a renewal (another host's certificate) is refused
	// and changes nothing.
	other, err := vm.Cluster.Host("h3")
	if err != nil {
		t.Fatal(err)
	}
	tmp = filepath.Join(dir, "h3.pem")
	if err := pki.WriteCredential(tmp, other); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	if err := h2.ReloadCredential(); err == nil || !strings.Contains(err.Error(), "names") {
		t.Fatalf("h3's certificate taken as h2's renewal: %v", err)
	}
	if s := serialOf(); s != renewed.Serial {
		t.Fatalf("after a refused renewal h2 presents %s, want %s", s, renewed.Serial)
	}
}
