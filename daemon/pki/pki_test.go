package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestKeyFileRoundTrip(t *testing.T) {
	k, err := Generate(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cluster.key")
	if err := k.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v", fi.Mode(), err)
	}
	if err := k.WriteFile(path); err == nil {
		t.Fatal("overwrote an existing key file")
	}
	k2, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !k2.cert.Equal(k.cert) {
		t.Fatal("loaded a different certificate")
	}
	if _, err := Load(""); !errors.Is(err, ErrNoKey) {
		t.Errorf("Load(\"\") = %v", err)
	}
}

func TestParseRejects(t *testing.T) {
	k1, _ := Generate(time.Now())
	k2, _ := Generate(time.Now())
	p1, _ := k1.PEM()
	p2, _ := k2.PEM()
	// Certificate of one key with the private key of another.
	mixed := append(append([]byte{}, p1[:len(p1)/2]...), p2[len(p2)/2:]...)
	for name, b := range map[string][]byte{
		"empty":     nil,
		"garbage":   []byte("not a key"),
		"mixed":     mixed,
		"truncated": p1[:len(p1)-40],
	} {
		if _, err := Parse(b); !errors.Is(err, ErrBadKey) {
			t.Errorf("%s: %v, want ErrBadKey", name, err)
		}
	}
	id, err := k1.Issue(RoleDaemon, "h3", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	leaf := id.cert.Certificate[0]
	_ = leaf
}

func TestSecret(t *testing.T) {
	k1, _ := Generate(time.Now())
	k2, _ := Generate(time.Now())
	p1, _ := k1.PEM()
	k1b, err := Parse(p1)
	if err != nil {
		t.Fatal(err)
	}
	a, b := k1.Secret("checkpoint-mac"), k1b.Secret("checkpoint-mac")
	if len(a) != 32 || string(a) != string(b) {
		t.Fatal("the same key derived different secrets")
	}
	if string(a) == string(k1.Secret("other")) || string(a) == string(k2.Secret("checkpoint-mac")) {
		t.Fatal("secrets do not depend on the label and the key")
	}
}

// TestSecretLeadingZero checks the HMAC key of a scalar whose first byte is
// zero: the scalar without its leading zeros, so that secrets stay the same
// for every key.
func TestSecretLeadingZero(t *testing.T) {
	raw := make([]byte, 32)
	for i := 1; i < len(raw); i++ {
		raw[i] = byte(i)
	}
	key, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), raw)
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, raw[1:])
	m.Write([]byte("dpvm secret: checkpoint-mac"))
	want := m.Sum(nil)
	if got := (&ClusterKey{key: key}).Secret("checkpoint-mac"); !hmac.Equal(got, want) {
		t.Fatalf("Secret = %x, want %x", got, want)
	}
}
