package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Role is what a certificate's holder may do.
type Role string

// Roles, carried as the certificate's first organizational unit.
const (
	// RoleDaemon: a host certificate, held by one daemon of the virtual
	// machine; its common name is the daemon's name.
	RoleDaemon Role = "daemon"
	// RoleAdmin: a person who may do anything to the virtual machine.
	RoleAdmin Role = "admin"
	// RoleUser: a person who may run and control their own jobs and list
	// everything.
	RoleUser Role = "user"
)

// Client reports whether the role is a person's (a user certificate), as
// opposed to a daemon's.
func (r Role) Client() bool { return r == RoleAdmin || r == RoleUser }

func (r Role) valid() bool { return r == RoleDaemon || r.Client() }

// ouMaster is the second organizational unit of the master's host
// certificate: only its holder drives move, checkpoint and rollback steps.
const ouMaster = "master"

// ServerName is the name every leaf certificate carries and every client
// verifies: identity comes from the cluster CA, not from DNS.
const ServerName = "dpvm"

// ALPN is the protocol name negotiated on every connection.
const ALPN = "github.com/dpvm/dpvm/1"

// Default lifetimes of issued certificates.
const (
	DefaultHostLife = 365 * 24 * time.Hour
	DefaultUserLife = 90 * 24 * time.Hour
	caLife          = 10 * 365 * 24 * time.Hour
)

// MaxName is the longest name a certificate may carry.
const MaxName = 64

// Errors.
var (
	// ErrNoCredential: no credential was given.
	ErrNoCredential = errors.New("no credential")
	// ErrBadCredential: a credential, CA or secret file is malformed.
	ErrBadCredential = errors.New("bad credential")
	// ErrLegacyKey: the file is a cluster CA with its private key — the
	// only file an older `dpvm keygen` wrote, or the operator's ca.pem —
	// given where a credential belongs.
	ErrLegacyKey = errors.New("a cluster CA key is not a credential")
	// ErrNoKey is ErrNoCredential under its older name.
	ErrNoKey = ErrNoCredential
)

// LegacyHint says what to do with a CA key file given as a credential.
const LegacyHint = "daemons and clients now take a credential issued under the CA " +
	"(a file from 'dpvm keygen --out DIR' or 'dpvm cert host|user'); " +
	"to move a cluster key made by an older 'dpvm keygen' to the new scheme, run " +
	"'dpvm cert upgrade OLDKEY --out DIR' (it keeps the old checkpoint key so existing job checkpoints still verify)"

// CA is a virtual machine's certificate authority. The operator keeps it;
// no daemon or client needs it at run time.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

// NewCA creates a certificate authority valid for ten years from now.
func NewCA(now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate cluster CA: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "dpvm cluster CA", Organization: []string{"dpvm"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLife),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("generate cluster CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return newCA(cert, key), nil
}

func newCA(cert *x509.Certificate, key *ecdsa.PrivateKey) *CA {
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{cert: cert, key: key, pool: pool}
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return s, nil
}

// PEM encodes the CA as a CA file: its certificate and its private key.
func (ca *CA) PEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return nil, err
	}
	out := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
	return append(out, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})...), nil
}

// blocks splits PEM input into certificates and EC private keys.
func blocks(b []byte) (certs []*x509.Certificate, keys []*ecdsa.PrivateKey, err error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return certs, keys, nil
		}
		switch blk.Type {
		case "CERTIFICATE":
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: certificate: %v", ErrBadCredential, err)
			}
			certs = append(certs, c)
		case "EC PRIVATE KEY":
			k, err := x509.ParseECPrivateKey(blk.Bytes)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: private key: %v", ErrBadCredential, err)
			}
			keys = append(keys, k)
		}
	}
}

func matches(c *x509.Certificate, k *ecdsa.PrivateKey) bool {
	pub, ok := c.PublicKey.(*ecdsa.PublicKey)
	return ok && pub.Equal(&k.PublicKey)
}

// ParseCA decodes a CA file's contents.
func ParseCA(b []byte) (*CA, error) {
	certs, keys, err := blocks(b)
	if err != nil {
		return nil, err
	}
	if len(certs) != 1 || len(keys) != 1 {
		return nil, fmt.Errorf("%w: a CA file holds one CERTIFICATE and one EC PRIVATE KEY block", ErrBadCredential)
	}
	if !certs[0].IsCA {
		return nil, fmt.Errorf("%w: the certificate is not a CA (a credential, not the CA file?)", ErrBadCredential)
	}
	if !matches(certs[0], keys[0]) {
		return nil, fmt.Errorf("%w: the private key does not match the certificate", ErrBadCredential)
	}
	return newCA(certs[0], keys[0]), nil
}

// LoadCA reads a CA file.
func LoadCA(path string) (*CA, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster CA: %w", err)
	}
	ca, err := ParseCA(b)
	if err != nil {
		return nil, fmt.Errorf("cluster CA %s: %w", path, err)
	}
	return ca, nil
}

// Certificate is the CA's certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// IssueHost issues the credential of the daemon named name, valid for life
// (DefaultHostLife if 0) from now; master marks the master's certificate.
func (ca *CA) IssueHost(name string, master bool, now time.Time, life time.Duration) (*Credential, error) {
	if life <= 0 {
		life = DefaultHostLife
	}
	return ca.issue(RoleDaemon, name, master, now, life)
}

// IssueUser issues the credential of the person named name in role
// (RoleAdmin or RoleUser), valid for life (DefaultUserLife if 0) from now.
func (ca *CA) IssueUser(name string, role Role, now time.Time, life time.Duration) (*Credential, error) {
	if !role.Client() {
		return nil, fmt.Errorf("issue user certificate: role %q: want %s or %s", role, RoleAdmin, RoleUser)
	}
	if life <= 0 {
		life = DefaultUserLife
	}
	return ca.issue(role, name, false, now, life)
}

// CheckName says whether name may name a certificate's holder.
func CheckName(name string) error {
	if name == "" || len(name) > MaxName {
		return fmt.Errorf("name %q: want 1 to %d characters", name, MaxName)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.@", r)) {
			return fmt.Errorf("name %q: only letters, digits and - _ . @", name)
		}
	}
	return nil
}

func (ca *CA) issue(role Role, name string, master bool, now time.Time, life time.Duration) (*Credential, error) {
	if err := CheckName(name); err != nil {
		return nil, fmt.Errorf("issue %s certificate: %w", role, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	ou := []string{string(role)}
	if master {
		ou = append(ou, ouMaster)
	}
	notAfter := now.Add(life)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, OrganizationalUnit: ou, Organization: []string{"dpvm"}},
		DNSNames:     []string{ServerName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("issue %s certificate: %w", role, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return newCredential(leaf, ca.cert, key)
}

// Credential is what a daemon or a person presents: a leaf certificate
// issued under the cluster CA, the CA's certificate, and the leaf's
// private key. It never holds the CA's key.
type Credential struct {
	Peer               // who the certificate names
	NotAfter time.Time // when the certificate expires

	leaf *x509.Certificate
	ca   *x509.Certificate
	key  *ecdsa.PrivateKey
	cert tls.Certificate
	pool *x509.CertPool
	// live is the credential in use: this one until Renew puts a newer
	// one in its place. Renewals share it.
	live *atomic.Pointer[Credential]
}

func newCredential(leaf, ca *x509.Certificate, key *ecdsa.PrivateKey) (*Credential, error) {
	p, err := peerOf(leaf)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	c := &Credential{Peer: p, NotAfter: leaf.NotAfter, leaf: leaf, ca: ca, key: key, pool: pool,
		cert: tls.Certificate{Certificate: [][]byte{leaf.Raw, ca.Raw}, PrivateKey: key, Leaf: leaf},
		live: new(atomic.Pointer[Credential])}
	c.live.Store(c)
	return c, nil
}

// PEM encodes the credential as a credential file: the leaf certificate,
// the CA certificate, and the leaf's private key.
func (c *Credential) PEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(c.key)
	if err != nil {
		return nil, err
	}
	out := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.leaf.Raw})
	out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.ca.Raw})...)
	return append(out, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})...), nil
}

// ParseCredential decodes a credential file's contents. A CA file (what an
// older `dpvm keygen` wrote) is ErrLegacyKey, with the command that moves
// it to the new scheme.
func ParseCredential(b []byte) (*Credential, error) {
	certs, keys, err := blocks(b)
	if err != nil {
		return nil, err
	}
	var leaf, ca *x509.Certificate
	for _, c := range certs {
		if c.IsCA {
			ca = c
		} else {
			leaf = c
		}
	}
	if leaf == nil && ca != nil && len(keys) == 1 && matches(ca, keys[0]) {
		return nil, fmt.Errorf("%w: %s", ErrLegacyKey, LegacyHint)
	}
	if len(certs) != 2 || leaf == nil || ca == nil || len(keys) != 1 {
		return nil, fmt.Errorf("%w: a credential holds the leaf CERTIFICATE, the CA CERTIFICATE and the leaf's EC PRIVATE KEY", ErrBadCredential)
	}
	if !matches(leaf, keys[0]) {
		return nil, fmt.Errorf("%w: the private key does not match the certificate", ErrBadCredential)
	}
	if err := leaf.CheckSignatureFrom(ca); err != nil {
		return nil, fmt.Errorf("%w: the certificate is not signed by the CA in the file: %v", ErrBadCredential, err)
	}
	return newCredential(leaf, ca, keys[0])
}

// LoadCredential reads a credential file. An empty path is ErrNoCredential.
func LoadCredential(path string) (*Credential, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: give --credential FILE or set DPVM_CREDENTIAL (create one with 'dpvm keygen' or 'dpvm cert')", ErrNoCredential)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("credential: %w", err)
	}
	c, err := ParseCredential(b)
	if err != nil {
		return nil, fmt.Errorf("credential %s: %w", path, err)
	}
	return c, nil
}

// WriteFile writes data to path with mode 0600, refusing to overwrite an
// existing file.
func WriteFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// ServerConfig is the TLS configuration for accepting connections: the
// peer must present a certificate signed by the cluster CA.
// It presents the credential in use at each handshake (see Renew).
func (c *Credential) ServerConfig() *tls.Config {
	return &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &c.Current().cert, nil },
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      c.pool,
		NextProtos:     []string{ALPN},
		MinVersion:     tls.VersionTLS13,
	}
}

// ClientConfig is the TLS configuration for dialing: the server must
// present a certificate signed by the cluster CA, and so do we: the
// credential in use at each handshake (see Renew).
func (c *Credential) ClientConfig() *tls.Config {
	return &tls.Config{
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c.Current().cert, nil },
		RootCAs:              c.pool,
		ServerName:           ServerName,
		NextProtos:           []string{ALPN},
		MinVersion:           tls.VersionTLS13,
	}
}

// Peer describes the holder of a verified certificate.
type Peer struct {
	Role   Role
	Name   string
	Master bool   // the master's host certificate
	Serial string // the certificate's serial number, in hex
	// NotAfter is when the certificate expires (zero: unknown). A daemon
	// whose certificate expires while connected loses its membership.
	NotAfter time.Time
}

func (p Peer) String() string {
	s := string(p.Role) + " " + p.Name
	if p.Master {
		s += " (master)"
	}
	return s
}

// PeerOf reads whom a verified TLS connection's peer certificate names.
func PeerOf(cs tls.ConnectionState) (Peer, error) {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return Peer{}, errors.New("peer presented no verified certificate")
	}
	return peerOf(cs.VerifiedChains[0][0])
}

func peerOf(c *x509.Certificate) (Peer, error) {
	ou := c.Subject.OrganizationalUnit
	if len(ou) == 0 || len(ou) > 2 {
		return Peer{}, errors.New("peer certificate names no role")
	}
	r := Role(ou[0])
	if !r.valid() {
		return Peer{}, fmt.Errorf("peer certificate has unknown role %q", r)
	}
	master := len(ou) == 2
	if master && (r != RoleDaemon || ou[1] != ouMaster) {
		return Peer{}, fmt.Errorf("peer certificate has unknown roles %q", ou)
	}
	if err := CheckName(c.Subject.CommonName); err != nil {
		return Peer{}, fmt.Errorf("peer certificate: %w", err)
	}
	return Peer{Role: r, Name: c.Subject.CommonName, Master: master, Serial: hex.EncodeToString(c.SerialNumber.Bytes()), NotAfter: c.NotAfter}, nil
}

// Chain is the credential's certificate chain, leaf first, as it presents
// it in a TLS handshake: the credential in use's (see Renew).
func (c *Credential) Chain() [][]byte { return c.Current().cert.Certificate }

// VerifyChain checks a certificate chain a peer presented against the
// credential's CA, as the TLS handshake does, and says whom it names.
// Transports without TLS (the in-memory one of deterministic tests)
// authenticate with it.
func (c *Credential) VerifyChain(chain [][]byte, now time.Time) (Peer, error) {
	if len(chain) == 0 || len(chain) > 4 {
		return Peer{}, fmt.Errorf("peer presented %d certificates", len(chain))
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return Peer{}, fmt.Errorf("peer certificate: %w", err)
	}
	inter := x509.NewCertPool()
	for _, der := range chain[1:] {
		ic, err := x509.ParseCertificate(der)
		if err != nil {
			return Peer{}, fmt.Errorf("peer certificate chain: %w", err)
		}
		inter.AddCert(ic)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: c.pool, Intermediates: inter,
		CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		return Peer{}, fmt.Errorf("peer certificate: %w", err)
	}
	return PeerOf(tls.ConnectionState{VerifiedChains: chains})
}

// SameCA reports whether other was issued under the same CA as c.
func (c *Credential) SameCA(other *Credential) bool {
	return other != nil && slices.Equal(c.ca.Raw, other.ca.Raw)
}
