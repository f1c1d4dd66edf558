package daemon

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
)

// credStamp is the credential file as the daemon last read it.
type credStamp struct {
	mu      sync.Mutex
	modTime time.Time
	size    int64
	missing bool // the file could not be read at the last check
}

// credential is the credential this daemon presents now: Config.Credential
// or the newest renewal of it.
func (d *Daemon) credential() *pki.Credential {
	if d.cfg.Credential == nil {
		return nil
	}
	return d.cfg.Credential.Current()
}

// ReloadCredential re-reads Config.CredentialFile and, if it holds a
// renewal of the credential in use (same name, role and CA, another
// serial), presents it on every connection made from now on; connections
// already made keep working. The daemon calls it every heartbeat when the
// file has changed; `dpvm daemon` calls it on SIGHUP too. A file that does
// not hold a renewal changes nothing and is reported.
func (d *Daemon) ReloadCredential() error {
	return d.reloadCredential(true)
}

// reloadCredential re-reads the credential file, only if its size or
// modification time changed unless force.
func (d *Daemon) reloadCredential(force bool) error {
	path := d.cfg.CredentialFile
	if path == "" || d.cfg.Credential == nil {
		return nil
	}
	st := &d.credAt
	st.mu.Lock()
	defer st.mu.Unlock()
	fi, err := os.Stat(path)
	if err != nil {
		if st.missing && !force {
			return nil // reported at the first check that failed
		}
		st.missing = true
		return fmt.Errorf("credential file: %w", err)
	}
	st.missing = false
	if !force && fi.ModTime().Equal(st.modTime) && fi.Size() == st.size {
		return nil
	}
	st.modTime, st.size = fi.ModTime(), fi.Size()
	next, err := pki.LoadCredential(path)
	if err != nil {
		return fmt.Errorf("renewed credential not taken up; the one in use stays: %w", err)
	}
	cur := d.credential()
	if next.Serial == cur.Serial {
		return nil
	}
	if err := d.cfg.Credential.Renew(next); err != nil {
		return fmt.Errorf("renewed credential not taken up; the one in use stays: %w", err)
	}
	d.expiryWarn.Store(0) // warn afresh about the new certificate
	d.log.Info("renewed certificate taken up: new connections present it",
		"name", next.Name, "serial", next.Serial, "previous", cur.Serial, "expires", next.NotAfter.UTC().Format(time.RFC3339))
	return nil
}

// watchCredential notes the credential file as it is at start, so that
// the first heartbeat re-reads it only if it changes.
func (d *Daemon) watchCredential() {
	if d.cfg.CredentialFile == "" {
		return
	}
	if fi, err := os.Stat(d.cfg.CredentialFile); err == nil {
		d.credAt.mu.Lock()
		d.credAt.modTime, d.credAt.size = fi.ModTime(), fi.Size()
		d.credAt.mu.Unlock()
	}
}
