package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/urfave/cli/v2"
)

// upCreds is the credentials directory dpvm up and add take (from
// 'dpvm keygen --out DIR'): each daemon's credential is DIR/host-NAME.pem,
// the master's DIR/master.pem when it names the master's host (else
// DIR/master-NAME.pem), and one missing is issued under DIR/ca.pem and
// written there. The master is also given DIR/secret.pem; clients use
// DIR/admin.pem.
type upCreds struct{ dir string }

// credentialsFlag is up's and add's credentials directory.
func credentialsFlag() cli.Flag {
	return &cli.StringFlag{Name: "credentials", Usage: "directory of 'dpvm keygen --out DIR': each host's credential DIR/host-NAME.pem (issued under DIR/ca.pem if missing), the master's, the secret, admin.pem for clients"}
}

// remoteCredsFlag names credentials already on the hosts.
func remoteCredsFlag() cli.Flag {
	return &cli.StringFlag{Name: "remote-credentials", Usage: "directory on every host already holding its credential NAME.pem (and the master's secret.pem): referenced instead of copying from --credentials"}
}

// admin is the file of the admin credential clients use.
func (u upCreds) admin() string { return filepath.Join(u.dir, pki.AdminFile) }

// secret is the cluster secret's file.
func (u upCreds) secret() ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(u.dir, pki.SecretFile))
	if err != nil {
		return nil, fmt.Errorf("the cluster secret: %w", err)
	}
	return b, nil
}

// credential is the PEM of the credential of the daemon named name (the
// master's if master), issued under the CA and written into the
// directory when missing.
func (u upCreds) credential(name string, master bool) ([]byte, error) {
	file := filepath.Join(u.dir, "host-"+name+".pem")
	if master {
		if c, err := pki.LoadCredential(filepath.Join(u.dir, pki.MasterFile)); err == nil && c.Name == name && c.Master {
			file = filepath.Join(u.dir, pki.MasterFile)
		} else {
			file = filepath.Join(u.dir, "master-"+name+".pem")
		}
	}
	if c, err := pki.LoadCredential(file); err == nil {
		if c.Name != name || c.Master != master {
			return nil, fmt.Errorf("%s names %s, not the daemon %s", file, c.Peer, name)
		}
		return c.PEM()
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	caFile := filepath.Join(u.dir, pki.CAFile)
	ca, err := pki.LoadCA(caFile)
	if err != nil {
		return nil, fmt.Errorf("no credential %s, and cannot issue it (%w): 'dpvm cert host --ca CA --name %s --out %s'", file, err, name, file)
	}
	c, err := ca.IssueHost(name, master, time.Now(), pki.DefaultHostLife)
	if err != nil {
		return nil, fmt.Errorf("issue %s: %w", file, err)
	}
	if err := pki.WriteCredential(file, c); err != nil {
		return nil, err
	}
	return c.PEM()
}

// masterNote says, when DIR/master.pem (from 'dpvm keygen') names another
// host than the hostfile's master, that up will give the master
// DIR/master-NAME.pem instead; "" when there is nothing to say.
func (u upCreds) masterNote(name string) string {
	file := filepath.Join(u.dir, pki.MasterFile)
	c, err := pki.LoadCredential(file)
	if err != nil || (c.Name == name && c.Master) {
		return ""
	}
	return fmt.Sprintf("%s names the master %q, not the hostfile's %q: the master is given %s (for %s to be used, 'dpvm keygen --master-name %s')",
		file, c.Name, name, filepath.Join(u.dir, "master-"+name+".pem"), pki.MasterFile, name)
}
