package pki

import (
	"bytes"
	"testing"
	"time"
)

// FuzzParseFiles feeds arbitrary bytes to the parsers of every file a
// daemon or client reads — credential, CA, cluster secret, revocation list:
// each returns a value or an error, never panics, and what it accepts
// holds together.
func FuzzParseFiles(f *testing.F) {
	cl, err := NewCluster(time.Unix(1700000000, 0), "h1", "admin")
	if err != nil {
		f.Fatal(err)
	}
	cred, _ := cl.Admin.PEM()
	ca, _ := cl.CA.PEM()
	f.Add(cred)
	f.Add(ca)
	f.Add(cl.Secret.PEM())
	f.Add([]byte("# revoked\n0a1b alice\nff\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := ParseCredential(b); err == nil {
			if !c.Role.valid() || CheckName(c.Name) != nil || len(c.Chain()) != 2 {
				t.Fatalf("accepted a credential naming %+v", c.Peer)
			}
		}
		if c, err := ParseCA(b); err == nil && !c.Certificate().IsCA {
			t.Fatal("accepted a CA file whose certificate is no CA")
		}
		if r, err := ParseKeyring(b); err == nil {
			if n := len(r.IDs()); n == 0 || n > MaxSecrets || len(r.Key("x")) != 32 {
				t.Fatalf("accepted a keyring of %d keys", n)
			}
		}
		if r, err := ParseRevoked(bytes.NewReader(b)); err == nil && r.Len() > MaxRevoked {
			t.Fatalf("accepted %d revoked serials", r.Len())
		}
	})
}
