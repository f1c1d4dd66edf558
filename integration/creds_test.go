package integration

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
)

// creds is a test virtual machine's credentials in files: a CA, the
// cluster secret, the master's credential (named h1), an admin's, and a
// host credential per host name. Daemons and clients take them as flags:
//
//	master: daemon --master c.master()...   (--credential M --secret S)
//	host:   daemon --join A c.host("h2")... (--credential FILE)
//	client: ps c.client()...                (--credential ADMIN), or env c.env()
type creds struct {
	t   testing.TB
	dir string
	cl  *pki.Cluster
}

// newCreds makes a CA and a secret, and issues the master's and an
// admin's credentials and one for each of hosts (more are issued on
// demand by host).
func newCreds(t testing.TB, hosts ...string) *creds {
	t.Helper()
	cl, err := pki.NewCluster(time.Now(), "h1", "admin")
	if err != nil {
		t.Fatal(err)
	}
	c := &creds{t: t, dir: t.TempDir(), cl: cl}
	if err := cl.WriteDir(c.dir); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		c.hostFile(h)
	}
	return c
}

// hostFile is the file of host name's credential, issued if need be.
func (c *creds) hostFile(name string) string {
	c.t.Helper()
	f := filepath.Join(c.dir, "host-"+name+".pem")
	if _, err := os.Stat(f); err == nil {
		return f
	}
	cred, err := c.cl.Host(name)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := pki.WriteCredential(f, cred); err != nil {
		c.t.Fatal(err)
	}
	return f
}

// userFile is the file of a person's credential in role, issued if need
// be.
func (c *creds) userFile(name string, role pki.Role) string {
	c.t.Helper()
	f := filepath.Join(c.dir, "user-"+name+".pem")
	if _, err := os.Stat(f); err == nil {
		return f
	}
	cred, err := c.cl.User(name, role)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := pki.WriteCredential(f, cred); err != nil {
		c.t.Fatal(err)
	}
	return f
}

// master is the master daemon's flags.
func (c *creds) master() []string {
	return []string{"--credential", filepath.Join(c.dir, pki.MasterFile), "--secret", filepath.Join(c.dir, pki.SecretFile)}
}

// host is the flags of the host daemon named name.
func (c *creds) host(name string) []string { return []string{"--credential", c.hostFile(name)} }

// client is an admin client's flags.
func (c *creds) client() []string {
	return []string{"--credential", filepath.Join(c.dir, pki.AdminFile)}
}

// env names the admin's credential in a client's environment.
func (c *creds) env() string { return "DPVM_CREDENTIAL=" + filepath.Join(c.dir, pki.AdminFile) }
