package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestClusterFiles(t *testing.T) {
	now := time.Now()
	cl, err := NewCluster(now, "m", "root")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "creds")
	if err := cl.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{CAFile, SecretFile, MasterFile, AdminFile} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v, %v", f, fi.Mode(), err)
		}
	}
	if err := cl.WriteDir(dir); err == nil {
		t.Fatal("overwrote existing credentials")
	}
	m, err := LoadCredential(filepath.Join(dir, MasterFile))
	if err != nil {
		t.Fatal(err)
	}
	if m.Role != RoleDaemon || m.Name != "m" || !m.Master || m.Serial != cl.Master.Serial {
		t.Fatalf("master credential names %+v", m.Peer)
	}
	a, err := LoadCredential(filepath.Join(dir, AdminFile))
	if err != nil {
		t.Fatal(err)
	}
	if a.Role != RoleAdmin || a.Name != "root" || a.Master {
		t.Fatalf("admin credential names %+v", a.Peer)
	}
	b, _ := os.ReadFile(filepath.Join(dir, MasterFile))
	if bytes.Contains(b, mustPEM(t, cl.CA)[bytes.Index(mustPEM(t, cl.CA), []byte("-----BEGIN EC")):]) {
		t.Fatal("a credential file holds the CA's key")
	}
	ca, err := LoadCA(filepath.Join(dir, CAFile))
	if err != nil {
		t.Fatal(err)
	}
	h, err := ca.IssueHost("node2", false, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.VerifyChain(h.Chain(), now)
	if err != nil || p.Name != "node2" || p.Role != RoleDaemon || p.Master {
		t.Fatalf("verify a host's chain: %+v, %v", p, err)
	}
	if _, err := m.VerifyChain(h.Chain(), now.Add(2*time.Hour)); err == nil {
		t.Fatal("an expired certificate verified")
	}
	ring, err := LoadKeyring(filepath.Join(dir, SecretFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ring.Key("x"), cl.Secret.Key("x")) {
		t.Fatal("the secret file gives another key")
	}
	if _, err := LoadCredential(""); !errors.Is(err, ErrNoCredential) {
		t.Fatalf("LoadCredential(\"\") = %v", err)
	}
}

func mustPEM(t *testing.T, ca *CA) []byte {
	t.Helper()
	b, err := ca.PEM()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseCredentialRejects(t *testing.T) {
	now := time.Now()
	ca1, _ := NewCA(now)
	ca2, _ := NewCA(now)
	c1, _ := ca1.IssueUser("alice", RoleUser, now, 0)
	c2, _ := ca2.IssueUser("bob", RoleUser, now, 0)
	p1, _ := c1.PEM()
	p2, _ := c2.PEM()
	// The certificates of one credential with the key of another.
	mixed := append(append([]byte{}, p1[:bytes.Index(p1, []byte("-----BEGIN EC"))]...), p2[bytes.Index(p2, []byte("-----BEGIN EC")):]...)
	for name, b := range map[string][]byte{
		"empty":     nil,
		"garbage":   []byte("not a credential"),
		"mixed":     mixed,
		"truncated": p1[:len(p1)-40],
	} {
		if _, err := ParseCredential(b); !errors.Is(err, ErrBadCredential) {
			t.Errorf("%s: %v, want ErrBadCredential", name, err)
		}
	}
	if _, err := ParseCredential(mustPEM(t, ca1)); !errors.Is(err, ErrLegacyKey) {
		t.Errorf("a CA file as a credential: %v, want ErrLegacyKey", err)
	}
	if _, err := ca1.IssueUser("carol", RoleDaemon, now, 0); err == nil {
		t.Error("issued a user certificate with the daemon role")
	}
	for _, bad := range []string{"", "a b", "x/y", string(make([]byte, MaxName+1))} {
		if _, err := ca1.IssueHost(bad, false, now, 0); err == nil {
			t.Errorf("issued a certificate named %q", bad)
		}
	}
	// Another CA's certificate does not verify.
	if _, err := c1.VerifyChain(c2.Chain(), now); err == nil {
		t.Error("a chain of another CA verified")
	}
}

func TestKeyringRotate(t *testing.T) {
	r1, err := NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	r2, err := r1.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(r1.Key("l"), r2.Key("l")) {
		t.Fatal("rotation kept the current key")
	}
	ks := r2.Keys("l")
	if len(ks) != 2 || !bytes.Equal(ks[1].Key, r1.Key("l")) || ks[1].ID != r1.IDs()[0] {
		t.Fatalf("rotated keyring %v does not keep the old key second", r2.IDs())
	}
	if bytes.Equal(r2.Key("a"), r2.Key("b")) {
		t.Fatal("labels do not separate keys")
	}
	back, err := ParseKeyring(r2.PEM())
	if err != nil || !bytes.Equal(back.Key("l"), r2.Key("l")) || len(back.IDs()) != 2 {
		t.Fatalf("round trip: %v", err)
	}
	bad := r2.Secrets()
	bad[0].Key[0] ^= 1
	if _, err := KeyringOf(bad); !errors.Is(err, ErrBadCredential) {
		t.Fatalf("a key not matching its ID: %v", err)
	}
	if _, err := KeyringOf(nil); !errors.Is(err, ErrBadCredential) {
		t.Fatalf("an empty keyring: %v", err)
	}
	many := make([]Secret, MaxSecrets+1)
	if _, err := KeyringOf(many); !errors.Is(err, ErrBadCredential) {
		t.Fatalf("too many keys: %v", err)
	}
}

// TestUpgradeKeepsOldKey: a keyring upgraded from an older cluster key
// derives, under its second key, what older daemons derived from the CA's
// private key, so their checkpoints still verify.
func TestUpgradeKeepsOldKey(t *testing.T) {
	old, err := NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	oldPEM := mustPEM(t, old)
	cl, err := UpgradeCluster(oldPEM, time.Now(), "master", "admin")
	if err != nil {
		t.Fatal(err)
	}
	// What an older daemon computed: HMAC-SHA256 keyed with the scalar,
	// big-endian, without leading zeros.
	scalar, err := old.key.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, bytes.TrimLeft(scalar, "\x00"))
	m.Write([]byte("dpvm secret: checkpoint-mac"))
	want := m.Sum(nil)
	ks := cl.Secret.Keys("checkpoint-mac")
	if len(ks) != 2 || !bytes.Equal(ks[1].Key, want) {
		t.Fatal("the upgraded secret does not keep the old checkpoint key")
	}
	if bytes.Equal(ks[0].Key, want) {
		t.Fatal("the upgraded secret's current key is the old one")
	}
	if bytes.Equal(cl.CA.Certificate().Raw, old.Certificate().Raw) {
		t.Fatal("the upgrade kept the old CA")
	}
	if _, _, err := Upgrade([]byte("junk"), time.Now()); err == nil {
		t.Fatal("upgraded junk")
	}
}

// TestLegacySecretLeadingZero: the old derivation's key is the scalar
// without its leading zero bytes.
func TestLegacySecretLeadingZero(t *testing.T) {
	raw := make([]byte, 32)
	for i := 1; i < len(raw); i++ {
		raw[i] = byte(i)
	}
	key, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), raw)
	if err != nil {
		t.Fatal(err)
	}
	got, err := legacySecret(key)
	if err != nil || !bytes.Equal(got, raw[1:]) {
		t.Fatalf("legacySecret = %x, %v; want %x", got, err, raw[1:])
	}
}

func TestRevokedList(t *testing.T) {
	path := filepath.Join(t.TempDir(), "revoked")
	if r, err := LoadRevoked(path); err != nil || r.Len() != 0 {
		t.Fatalf("a missing list: %v %v", r, err)
	}
	if err := AppendRevoked(path, "0A1b", "alice"); err != nil {
		t.Fatal(err)
	}
	if err := AppendRevoked(path, "ff", ""); err != nil {
		t.Fatal(err)
	}
	r, err := LoadRevoked(path)
	if err != nil || !r.Has("0a1b") || !r.Has("ff") || r.Has("00") || r.Len() != 2 {
		t.Fatalf("list %v: %v", r.Serials(), err)
	}
	for _, bad := range []string{"zz", "", strings.Repeat("a", 65)} {
		if err := AppendRevoked(path, bad, ""); !errors.Is(err, ErrBadCredential) {
			t.Errorf("serial %q: %v", bad, err)
		}
	}
	if _, err := ParseRevoked(strings.NewReader("# comment\n\nnothex\n")); !errors.Is(err, ErrBadCredential) {
		t.Errorf("a bad line: %v", err)
	}
	if _, err := ParseRevoked(strings.NewReader(strings.Repeat("a", 5000))); !errors.Is(err, ErrBadCredential) {
		t.Errorf("an overlong line: %v", err)
	}
	if _, err := NewRevoked(make([]string, MaxRevoked+1)); !errors.Is(err, ErrBadCredential) {
		t.Errorf("too many serials: %v", err)
	}
	var nilList *Revoked
	if nilList.Has("ff") || nilList.Serials() != nil {
		t.Error("a nil list revokes")
	}
}
