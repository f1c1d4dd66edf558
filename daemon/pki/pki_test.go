package pki

import (
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
