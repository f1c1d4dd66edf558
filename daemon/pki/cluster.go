package pki

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Names of the files `dpvm keygen --out DIR` writes.
const (
	CAFile     = "ca.pem"     // the CA certificate and key: the operator's
	SecretFile = "secret.pem" // the cluster secret: the master's (hosts get it at join)
	MasterFile = "master.pem" // the master daemon's credential
	AdminFile  = "admin.pem"  // an admin's credential
)

// Cluster is what a virtual machine's credentials start from: a CA, the
// cluster secret, the master's credential and an admin's. An embedded
// virtual machine makes one in memory; `dpvm keygen` writes one to files.
type Cluster struct {
	CA     *CA
	Secret *Keyring
	Master *Credential
	Admin  *Credential
}

// NewCluster makes a fresh CA and secret, and issues the credentials of the
// master daemon named master and of the admin named admin.
func NewCluster(now time.Time, master, admin string) (*Cluster, error) {
	ca, err := NewCA(now)
	if err != nil {
		return nil, err
	}
	ring, err := NewKeyring()
	if err != nil {
		return nil, err
	}
	return clusterOf(ca, ring, now, master, admin)
}

func clusterOf(ca *CA, ring *Keyring, now time.Time, master, admin string) (*Cluster, error) {
	m, err := ca.IssueHost(master, true, now, 0)
	if err != nil {
		return nil, err
	}
	a, err := ca.IssueUser(admin, RoleAdmin, now, 0)
	if err != nil {
		return nil, err
	}
	return &Cluster{CA: ca, Secret: ring, Master: m, Admin: a}, nil
}

// UpgradeCluster is Upgrade followed by the starter credentials.
func UpgradeCluster(old []byte, now time.Time, master, admin string) (*Cluster, error) {
	ca, ring, err := Upgrade(old, now)
	if err != nil {
		return nil, err
	}
	return clusterOf(ca, ring, now, master, admin)
}

// Host issues the host credential of the daemon named name.
func (c *Cluster) Host(name string) (*Credential, error) {
	return c.CA.IssueHost(name, false, time.Now(), 0)
}

// User issues the credential of the person named name in role.
func (c *Cluster) User(name string, role Role) (*Credential, error) {
	return c.CA.IssueUser(name, role, time.Now(), 0)
}

// WriteDir writes the cluster's files into dir (made if need be, mode
// 0700): CAFile, SecretFile, MasterFile and AdminFile, each mode 0600. It
// refuses to overwrite any.
func (c *Cluster) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	for _, f := range []string{CAFile, SecretFile, MasterFile, AdminFile} {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			return fmt.Errorf("keygen: %s already exists: not overwriting credentials", filepath.Join(dir, f))
		}
	}
	caPEM, err := c.CA.PEM()
	if err != nil {
		return err
	}
	files := map[string][]byte{CAFile: caPEM, SecretFile: c.Secret.PEM()}
	for f, cred := range map[string]*Credential{MasterFile: c.Master, AdminFile: c.Admin} {
		b, err := cred.PEM()
		if err != nil {
			return err
		}
		files[f] = b
	}
	for _, f := range []string{CAFile, SecretFile, MasterFile, AdminFile} {
		if err := WriteFile(filepath.Join(dir, f), files[f]); err != nil {
			return err
		}
	}
	return nil
}

// WriteCredential writes cred to path (mode 0600), refusing to overwrite.
func WriteCredential(path string, cred *Credential) error {
	b, err := cred.PEM()
	if err != nil {
		return err
	}
	return WriteFile(path, b)
}
