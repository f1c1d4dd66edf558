package daemon

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
)

// masterPeer is the master's connection to host id.
func masterPeer(t *testing.T, m *Daemon, id int) *peer {
	t.Helper()
	m.nw.mu.Lock()
	defer m.nw.mu.Unlock()
	for hid, p := range m.nw.peers {
		if int(hid) == id {
			return p
		}
	}
	t.Fatalf("the master has no connection to h%d", id)
	return nil
}

// TestRevokedHostIsDeleted: a host whose certificate is revoked is
// deleted from the virtual machine at once, as a lost host is, not only
// disconnected.
func TestRevokedHostIsDeleted(t *testing.T) {
	list := filepath.Join(t.TempDir(), "revoked")
	vm := startVM(t, 3, Config{RevokedFile: list})
	m := vm.Master()
	p := masterPeer(t, m, 3)
	if err := pki.AppendRevoked(list, p.cert.Serial, "h3"); err != nil {
		t.Fatal(err)
	}
	if !m.reloadRevoked() {
		t.Fatal("the master did not take up the revocation list")
	}
	if m.hostKnown(3) {
		t.Fatal("the host of a revoked certificate is still a member")
	}
	select {
	case <-p.closed:
	default:
		t.Fatal("the connection of a revoked host is open")
	}
	if !m.hostKnown(2) {
		t.Fatal("another host was deleted")
	}
}

// TestExpiredCertificateDropsItsConnections: a connection whose
// certificate has expired is closed (a handshake checks the dates, a
// connection made before does not), and the host is left to register
// again with a renewal or be lost; connections whose certificates are
// valid stay.
func TestExpiredCertificateDropsItsConnections(t *testing.T) {
	vm := startVM(t, 3, Config{MasterGrace: time.Minute})
	m := vm.Master()
	p2, p3 := masterPeer(t, m, 2), masterPeer(t, m, 3)
	if p2.cert.NotAfter.IsZero() {
		t.Fatal("the connection does not know when its certificate expires")
	}
	m.dropExpired(time.Now())
	select {
	case <-p2.closed:
		t.Fatal("a valid certificate's connection was dropped")
	default:
	}
	m.dropExpired(p2.cert.NotAfter.Add(time.Second))
	for _, p := range []*peer{p2, p3} {
		select {
		case <-p.closed:
		default:
			t.Fatalf("the connection of %s outlived its certificate", p.name())
		}
	}
	// The hosts, whose certificates are (in truth) valid, register again
	// and stay members.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !m.hostKnown(2) || !m.hostKnown(3) || len(m.Hosts()) != 3 {
		select {
		case <-ctx.Done():
			t.Fatalf("hosts %+v", m.Hosts())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
