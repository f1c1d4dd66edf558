package pki

import (
	"crypto/ecdsa"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"sync"
	"time"
)

// secretBlock is the PEM type of one key of a cluster secret file.
const secretBlock = "DPVM CLUSTER SECRET"

// Bounds on a keyring, checked before anything is kept.
const (
	MaxSecrets   = 16 // keys in one keyring
	minSecretLen = 16
	maxSecretLen = 64
	secretLen    = 32 // a new key's length
)

// Secret is one key of the cluster secret, named by its identifier.
type Secret struct {
	ID  string `msgpack:"i"`
	Key []byte `msgpack:"k"`
}

// KeyID is the identifier of a secret key: the first 8 bytes of a SHA-256
// of it, in hex. It names the key without revealing it.
func KeyID(key []byte) string {
	h := sha256.New()
	h.Write([]byte("dpvm key id\x00"))
	h.Write(key)
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Keyring is the cluster secret: keys, the current one first. Daemons
// authenticate what they write under the current key and accept what
// verifies under any key of the ring. A Keyring does not change once
// made; Rotate returns a new one.
type Keyring struct {
	keys []Secret
	// derived memoizes Keys by label: a keyring never changes (Rotate
	// makes another), and every checkpoint written or read asks.
	derived sync.Map // label → []LabeledKey
}

// NewKeyring makes a keyring of one fresh random key.
func NewKeyring() (*Keyring, error) {
	k := make([]byte, secretLen)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	return &Keyring{keys: []Secret{{ID: KeyID(k), Key: k}}}, nil
}

// Rotate returns a keyring with a fresh current key, keeping the others
// (the oldest dropped past MaxSecrets).
func (r *Keyring) Rotate() (*Keyring, error) {
	n, err := NewKeyring()
	if err != nil {
		return nil, err
	}
	n.keys = append(n.keys, r.keys...)
	if len(n.keys) > MaxSecrets {
		n.keys = n.keys[:MaxSecrets]
	}
	return n, nil
}

// KeyringOf checks keys (as a master hands them to a joining host) and
// makes a keyring of them.
func KeyringOf(keys []Secret) (*Keyring, error) {
	if len(keys) == 0 || len(keys) > MaxSecrets {
		return nil, fmt.Errorf("%w: a cluster secret holds 1 to %d keys, not %d", ErrBadCredential, MaxSecrets, len(keys))
	}
	out := make([]Secret, 0, len(keys))
	for _, s := range keys {
		if len(s.Key) < minSecretLen || len(s.Key) > maxSecretLen {
			return nil, fmt.Errorf("%w: a secret key of %d bytes (want %d to %d)", ErrBadCredential, len(s.Key), minSecretLen, maxSecretLen)
		}
		if s.ID != KeyID(s.Key) {
			return nil, fmt.Errorf("%w: secret key %q: the identifier does not match the key", ErrBadCredential, s.ID)
		}
		out = append(out, Secret{ID: s.ID, Key: append([]byte(nil), s.Key...)})
	}
	return &Keyring{keys: out}, nil
}

// Secrets lists the keys, the current one first (copies).
func (r *Keyring) Secrets() []Secret {
	out := make([]Secret, len(r.keys))
	for i, s := range r.keys {
		out[i] = Secret{ID: s.ID, Key: append([]byte(nil), s.Key...)}
	}
	return out
}

// IDs lists the keys' identifiers, the current one first.
func (r *Keyring) IDs() []string {
	out := make([]string, len(r.keys))
	for i, s := range r.keys {
		out[i] = s.ID
	}
	return out
}

// derive is the key for label under secret s.
func derive(s []byte, label string) []byte {
	m := hmac.New(sha256.New, s)
	m.Write([]byte("dpvm secret: " + label))
	return m.Sum(nil)
}

// Key is the current key's derivation for label (e.g. "checkpoint-mac"):
// distinct labels give independent keys for distinct purposes.
func (r *Keyring) Key(label string) []byte { return derive(r.keys[0].Key, label) }

// LabeledKey is a key derived for one purpose, with the identifier of the
// secret it comes from.
type LabeledKey struct {
	ID  string
	Key []byte
}

// Keys is every key's derivation for label, the current one first: what a
// reader tries in turn. The keys are shared with every caller: read only.
func (r *Keyring) Keys(label string) []LabeledKey {
	if v, ok := r.derived.Load(label); ok {
		return v.([]LabeledKey)
	}
	out := make([]LabeledKey, len(r.keys))
	for i, s := range r.keys {
		out[i] = LabeledKey{ID: s.ID, Key: derive(s.Key, label)}
	}
	v, _ := r.derived.LoadOrStore(label, out)
	return v.([]LabeledKey)
}

// PEM encodes the keyring as a cluster secret file: one block per key, the
// current one first.
func (r *Keyring) PEM() []byte {
	var out []byte
	for _, s := range r.keys {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: secretBlock, Headers: map[string]string{"Key-Id": s.ID}, Bytes: s.Key})...)
	}
	return out
}

// ParseKeyring decodes a cluster secret file's contents.
func ParseKeyring(b []byte) (*Keyring, error) {
	var keys []Secret
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != secretBlock {
			return nil, fmt.Errorf("%w: a %s block in a cluster secret file", ErrBadCredential, blk.Type)
		}
		if len(keys) == MaxSecrets {
			return nil, fmt.Errorf("%w: more than %d keys", ErrBadCredential, MaxSecrets)
		}
		keys = append(keys, Secret{ID: blk.Headers["Key-Id"], Key: blk.Bytes})
	}
	return KeyringOf(keys)
}

// LoadKeyring reads a cluster secret file.
func LoadKeyring(path string) (*Keyring, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	r, err := ParseKeyring(b)
	if err != nil {
		return nil, fmt.Errorf("cluster secret %s: %w", path, err)
	}
	return r, nil
}

// Upgrade moves a cluster key file of an older `dpvm keygen` (the CA
// certificate and its private key, held by every daemon and client) to the
// new scheme: a fresh CA, and a keyring whose current key is fresh and
// whose second key is the old one, under which the old daemons derived
// their checkpoint and manifest keys — so existing job checkpoints still
// verify. The old CA must no longer be trusted: every credential is issued
// anew under the new one.
func Upgrade(old []byte, now time.Time) (*CA, *Keyring, error) {
	oldCA, err := ParseCA(old)
	if err != nil {
		return nil, nil, fmt.Errorf("old cluster key: %w", err)
	}
	legacy, err := legacySecret(oldCA.key)
	if err != nil {
		return nil, nil, fmt.Errorf("old cluster key: %w", err)
	}
	ca, err := NewCA(now)
	if err != nil {
		return nil, nil, err
	}
	ring, err := NewKeyring()
	if err != nil {
		return nil, nil, err
	}
	ring.keys = append(ring.keys, Secret{ID: KeyID(legacy), Key: legacy})
	return ca, ring, nil
}

// legacySecret is what older daemons keyed their derivations with: the CA
// private key's scalar, big-endian without leading zeros.
func legacySecret(k *ecdsa.PrivateKey) ([]byte, error) {
	ek, err := k.ECDH()
	if err != nil {
		return nil, err
	}
	b := ek.Bytes()
	for len(b) > 0 && b[0] == 0 {
		b = b[1:]
	}
	if len(b) < minSecretLen {
		return nil, fmt.Errorf("%w: a degenerate private key", ErrBadCredential)
	}
	return append([]byte(nil), b...), nil
}

// DerivedKey is a 32-byte key for label derived from the credential's
// private key: the same credential always gives the same key, distinct
// labels give independent keys, and a key reveals nothing of the private
// key. The transport keys its QUIC stateless resets with it, so that a
// daemon restarted with its credential resets the connections its previous
// process left, and their peers learn at once that it is gone.
func (c *Credential) DerivedKey(label string) ([32]byte, error) {
	var k [32]byte
	b, err := c.key.Bytes()
	if err != nil {
		return k, fmt.Errorf("derive a key for %s: %w", label, err)
	}
	copy(k[:], derive(b, "credential: "+label))
	return k, nil
}
