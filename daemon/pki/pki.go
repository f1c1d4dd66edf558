// Package pki holds a virtual machine's cluster key — a certificate
// authority — and derives from it the mutual-TLS configurations that
// daemons and clients use: every connection between them presents a
// certificate signed by the cluster key, and nothing else is accepted.
//
// A cluster key file (written by `dpvm keygen`) holds the CA certificate
// and its private key in PEM. At start, each daemon or client issues itself
// a short-lived leaf certificate under the CA naming its role (daemon or
// client) and name, so peers know who they talk to.
package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"time"
)

// Role is what a certificate's holder may do.
type Role string

// Roles.
const (
	RoleDaemon Role = "daemon" // a daemon of the virtual machine
	RoleClient Role = "client" // the CLI or the console: control only
)

// ServerName is the name every leaf certificate carries and every client
// verifies: identity comes from the cluster CA, not from DNS.
const ServerName = "dpvm"

// ALPN is the protocol name negotiated on every connection.
const ALPN = "github.com/dpvm/dpvm/1"

// Errors.
var (
	ErrNoKey  = errors.New("no cluster key")
	ErrBadKey = errors.New("bad cluster key")
)

// ClusterKey is a virtual machine's certificate authority.
type ClusterKey struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

// Generate creates a new cluster key, valid for ten years from now.
func Generate(now time.Time) (*ClusterKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate cluster key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "dpvm cluster CA", Organization: []string{"dpvm"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("generate cluster key: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return newClusterKey(cert, key), nil
}

func newClusterKey(cert *x509.Certificate, key *ecdsa.PrivateKey) *ClusterKey {
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &ClusterKey{cert: cert, key: key, pool: pool}
}

// PEM encodes the key as a cluster key file.
func (k *ClusterKey) PEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k.key)
	if err != nil {
		return nil, err
	}
	out := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: k.cert.Raw})
	return append(out, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})...), nil
}

// WriteFile writes the key to path with mode 0600, refusing to overwrite an
// existing file.
func (k *ClusterKey) WriteFile(path string) error {
	b, err := k.PEM()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write cluster key: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write cluster key %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write cluster key %s: %w", path, err)
	}
	return f.Close()
}

// Parse decodes a cluster key file's contents.
func Parse(b []byte) (*ClusterKey, error) {
	var cert *x509.Certificate
	var key *ecdsa.PrivateKey
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		var err error
		switch blk.Type {
		case "CERTIFICATE":
			cert, err = x509.ParseCertificate(blk.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(blk.Bytes)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadKey, blk.Type, err)
		}
	}
	if cert == nil || key == nil {
		return nil, fmt.Errorf("%w: need a CERTIFICATE and an EC PRIVATE KEY block", ErrBadKey)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%w: the certificate is not a CA", ErrBadKey)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, fmt.Errorf("%w: the private key does not match the certificate", ErrBadKey)
	}
	return newClusterKey(cert, key), nil
}

// Load reads a cluster key file. An empty path is ErrNoKey.
func Load(path string) (*ClusterKey, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: give --cluster-key FILE or set DPVM_CLUSTER_KEY (create one with 'dpvm keygen')", ErrNoKey)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster key: %w", err)
	}
	k, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("cluster key %s: %w", path, err)
	}
	return k, nil
}

// Identity is a leaf certificate issued under the cluster key.
type Identity struct {
	Role Role
	Name string
	cert tls.Certificate
	ca   *ClusterKey
}

// Issue creates a leaf certificate for a holder of role and name, valid for
// a year from now.
func (k *ClusterKey) Issue(role Role, name string, now time.Time) (*Identity, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, OrganizationalUnit: []string{string(role)}, Organization: []string{"dpvm"}},
		DNSNames:     []string{ServerName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, k.cert, &key.PublicKey, k.key)
	if err != nil {
		return nil, fmt.Errorf("issue %s certificate: %w", role, err)
	}
	return &Identity{Role: role, Name: name, ca: k,
		cert: tls.Certificate{Certificate: [][]byte{der, k.cert.Raw}, PrivateKey: key}}, nil
}

// ServerConfig is the TLS configuration for accepting connections: the
// peer must present a certificate signed by the cluster key.
func (id *Identity) ServerConfig() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{id.cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    id.ca.pool,
		NextProtos:   []string{ALPN},
		MinVersion:   tls.VersionTLS13,
	}
}

// ClientConfig is the TLS configuration for dialing: the server must
// present a certificate signed by the cluster key, and so do we.
func (id *Identity) ClientConfig() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{id.cert},
		RootCAs:      id.ca.pool,
		ServerName:   ServerName,
		NextProtos:   []string{ALPN},
		MinVersion:   tls.VersionTLS13,
	}
}

// Peer describes the holder of a verified peer certificate.
type Peer struct {
	Role Role
	Name string
}

// PeerOf reads the role and name from a verified TLS connection state.
func PeerOf(cs tls.ConnectionState) (Peer, error) {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return Peer{}, errors.New("peer presented no verified certificate")
	}
	c := cs.VerifiedChains[0][0]
	if len(c.Subject.OrganizationalUnit) != 1 {
		return Peer{}, errors.New("peer certificate names no role")
	}
	r := Role(c.Subject.OrganizationalUnit[0])
	if r != RoleDaemon && r != RoleClient {
		return Peer{}, fmt.Errorf("peer certificate has unknown role %q", r)
	}
	return Peer{Role: r, Name: c.Subject.CommonName}, nil
}

// Secret derives a 32-byte secret for label from the cluster key's private
// key: every holder of the key derives the same one, nobody else can. Use
// distinct labels for distinct purposes (e.g. "checkpoint-mac"). The HMAC
// key is the private scalar, big-endian, without leading zero bytes.
func (k *ClusterKey) Secret(label string) []byte {
	scalar, err := k.key.Bytes()
	if err != nil {
		// A key of a curve crypto/ecdsa cannot encode: Parse and
		// Generate make P-256 keys only.
		panic(fmt.Sprintf("pki: cluster key: %v", err))
	}
	m := hmac.New(sha256.New, bytes.TrimLeft(scalar, "\x00"))
	m.Write([]byte("dpvm secret: " + label))
	return m.Sum(nil)
}

// Chain is the identity's certificate chain, leaf first, as the identity
// presents it in a TLS handshake.
func (id *Identity) Chain() [][]byte { return id.cert.Certificate }

// VerifyChain checks a certificate chain a peer presented against the
// identity's cluster key, as the TLS handshake does, and says whom it
// names. Transports without TLS (the in-memory one of deterministic tests)
// authenticate with it.
func (id *Identity) VerifyChain(chain [][]byte, now time.Time) (Peer, error) {
	if len(chain) == 0 {
		return Peer{}, errors.New("peer presented no certificate")
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return Peer{}, fmt.Errorf("peer certificate: %w", err)
	}
	inter := x509.NewCertPool()
	for _, der := range chain[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return Peer{}, fmt.Errorf("peer certificate chain: %w", err)
		}
		inter.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: id.ca.pool, Intermediates: inter,
		CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		return Peer{}, fmt.Errorf("peer certificate: %w", err)
	}
	return PeerOf(tls.ConnectionState{VerifiedChains: chains})
}
