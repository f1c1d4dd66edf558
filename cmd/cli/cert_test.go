package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpvm/dpvm/daemon/pki"
)

func dpvmRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	st := Run(append([]string{"dpvm"}, args...), &out, &errb)
	return st, out.String(), errb.String()
}

// TestKeygenAndCert: keygen writes the starter set, cert issues host and
// user credentials under its CA, show names them, and a cluster key file
// of an older keygen is refused with the upgrade command, which keeps its
// checkpoint key in the new secret.
func TestKeygenAndCert(t *testing.T) {
	t.Setenv("DPVM_CLUSTER_KEY", "")
	t.Setenv("DPVM_CREDENTIAL", "")
	dir := filepath.Join(t.TempDir(), "creds")
	st, out, errOut := dpvmRun(t, "keygen", "--out", dir)
	if st != 0 || !strings.Contains(out, "dpvm cert host --ca "+filepath.Join(dir, "ca.pem")) {
		t.Fatalf("keygen: %d\n%s\n%s", st, out, errOut)
	}
	if st, _, _ := dpvmRun(t, "keygen", "--out", dir); st == 0 {
		t.Fatal("keygen overwrote a directory of credentials")
	}
	ca := filepath.Join(dir, pki.CAFile)
	node := filepath.Join(dir, "node2.pem")
	if st, out, errOut := dpvmRun(t, "cert", "host", "--ca", ca, "--name", "node2", "--out", node, "--days", "30"); st != 0 {
		t.Fatalf("cert host: %d\n%s\n%s", st, out, errOut)
	}
	alice := filepath.Join(dir, "alice.pem")
	if st, out, errOut := dpvmRun(t, "cert", "user", "--ca", ca, "--name", "alice", "--out", alice); st != 0 {
		t.Fatalf("cert user: %d\n%s\n%s", st, out, errOut)
	}
	if st, _, errOut := dpvmRun(t, "cert", "user", "--ca", ca, "--name", "mallory", "--role", "daemon", "--out", filepath.Join(dir, "m.pem")); st != 2 || !strings.Contains(errOut, "role") {
		t.Fatalf("cert user --role daemon: %d %s", st, errOut)
	}
	st, out, errOut = dpvmRun(t, "cert", "show", node, alice, filepath.Join(dir, pki.MasterFile))
	if st != 0 || !strings.Contains(out, "daemon node2,") || !strings.Contains(out, "user alice,") || !strings.Contains(out, "daemon master (master),") {
		t.Fatalf("cert show: %d\n%s\n%s", st, out, errOut)
	}
	// Revoking by credential file and by serial.
	list := filepath.Join(dir, "revoked")
	if st, out, errOut := dpvmRun(t, "cert", "revoke", "--list", list, alice, "ABCD"); st != 0 || !strings.Contains(out, "user alice") {
		t.Fatalf("cert revoke: %d\n%s\n%s", st, out, errOut)
	}
	aliceCred, err := pki.LoadCredential(alice)
	if err != nil {
		t.Fatal(err)
	}
	if rv, err := pki.LoadRevoked(list); err != nil || !rv.Has(aliceCred.Serial) || !rv.Has("abcd") {
		t.Fatalf("revocation list: %v %v", rv.Serials(), err)
	}
	if st, _, _ := dpvmRun(t, "cert", "revoke", "--list", list, "not-hex"); st != 2 {
		t.Fatal("revoked a serial that is not hex")
	}
	// A credential, not the CA, is what clients take.
	st, _, errOut = dpvmRun(t, "ps", "--master", "127.0.0.1:1", "--credential", ca)
	if st != 2 || !strings.Contains(errOut, "dpvm cert upgrade") {
		t.Fatalf("ps with the CA file: %d %s", st, errOut)
	}
	// The old flag names the upgrade.
	st, _, errOut = dpvmRun(t, "ps", "--master", "127.0.0.1:1", "--cluster-key", ca)
	if st != 2 || !strings.Contains(errOut, "--cluster-key") || !strings.Contains(errOut, "dpvm cert upgrade OLDKEY --out DIR") {
		t.Fatalf("ps --cluster-key: %d %s", st, errOut)
	}
	// Upgrade an old key file (the CA file has its format).
	up := filepath.Join(t.TempDir(), "up")
	st, out, errOut = dpvmRun(t, "cert", "upgrade", ca, "--out", up)
	if st != 0 || !strings.Contains(out, "the old key's checkpoints verify under key") {
		t.Fatalf("cert upgrade: %d\n%s\n%s", st, out, errOut)
	}
	ring, err := pki.LoadKeyring(filepath.Join(up, pki.SecretFile))
	if err != nil || len(ring.IDs()) != 2 {
		t.Fatalf("upgraded secret: %v %v", ring, err)
	}
	// Rotation adds a current key and keeps the others.
	sec := filepath.Join(up, pki.SecretFile)
	if st, out, errOut := dpvmRun(t, "cert", "rotate-secret", sec); st != 0 {
		t.Fatalf("rotate-secret: %d\n%s\n%s", st, out, errOut)
	}
	rot, err := pki.LoadKeyring(sec)
	if err != nil || len(rot.IDs()) != 3 || rot.IDs()[1] != ring.IDs()[0] {
		t.Fatalf("rotated secret: %v %v", rot, err)
	}
	if fi, err := os.Stat(sec); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("rotated secret's mode: %v %v", fi, err)
	}
}
