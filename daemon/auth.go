package daemon

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dpvm/dpvm/ckpt"
	"github.com/dpvm/dpvm/ckpt/jobset"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/task"
)

// ErrForbidden is a control call the caller's certificate does not allow:
// a user certificate calling a daemon-to-daemon or an admin-only method, or
// a host other than the master driving a move or checkpoint step.
var ErrForbidden = errors.New("forbidden")

// audit records a control call a person made: who (certificate name and
// role), what, and the outcome.
func (d *Daemon) audit(p *peer, method string, err error) {
	if p == nil || !p.cert.Role.Client() {
		return
	}
	outcome := "ok"
	level := slog.LevelInfo
	if err != nil {
		outcome, level = err.Error(), slog.LevelWarn
		if errors.Is(err, ErrForbidden) {
			outcome = "refused: " + outcome
		}
	}
	d.cfg.AuditLogger.Log(d.ctx, level, "audit", "host", d.cfg.Name, "who", p.cert.Name, "role", string(p.cert.Role), "serial", p.cert.Serial,
		"from", p.conn.RemoteAddr(), "method", method, "outcome", outcome)
}

// ckptKey is the key checkpoints are written under: the cluster secret's
// current key (nil without a secret: a standalone daemon).
func (d *Daemon) ckptKey() []byte {
	r := d.secret.Load()
	if r == nil {
		return nil
	}
	return r.Key(labelCkpt)
}

// keyID is the current key for label with its identifier, taken together
// from one keyring (a rotation between two loads cannot pair a key with
// another's identifier).
func (d *Daemon) keyID(label string) ([]byte, [8]byte) {
	r := d.secret.Load()
	if r == nil {
		return nil, [8]byte{}
	}
	k := r.Keys(label)[0]
	return k.Key, keyIDBytes(k.ID)
}

// keyIDBytes is a pki key identifier (hex) as the 8 bytes files carry; a
// malformed one gives the zero value, which names no key.
func keyIDBytes(id string) [8]byte {
	var out [8]byte
	if b, err := hex.DecodeString(id); err == nil && len(b) == len(out) {
		copy(out[:], b)
	}
	return out
}

// ErrUnknownKey: a checkpoint or manifest names the key it was
// authenticated under, and the cluster secret no longer holds it (dropped
// by rotations, or the file comes from another cluster).
var ErrUnknownKey = errors.New("key not in this daemon's cluster secret")

// keyFor returns the lookup of label's key by identifier a reader of
// format 2 files uses, and sets *named when it was asked (the file named
// its key, so trying other keys is pointless). It is nil without a
// secret.
func (d *Daemon) keyFor(label, what string, named *bool) func([8]byte) ([]byte, error) {
	r := d.secret.Load()
	if r == nil {
		return nil
	}
	keys := r.Keys(label)
	return func(id [8]byte) ([]byte, error) {
		*named = true
		want := hex.EncodeToString(id[:])
		for _, k := range keys {
			if k.ID == want {
				return k.Key, nil
			}
		}
		return nil, fmt.Errorf("%s authenticated with key %s, which this daemon's keyring does not hold (it holds %s): %w",
			what, want, strings.Join(r.IDs(), ", "), ErrUnknownKey)
	}
}

// manifestKey is the key job checkpoint manifests are written under.
func (d *Daemon) manifestKey() []byte {
	r := d.secret.Load()
	if r == nil {
		return nil
	}
	return r.Key(labelManifest)
}

// Labels of the keys derived from the cluster secret.
const (
	labelCkpt     = "checkpoint-mac"
	labelManifest = "job-manifest"
)

// keysFor lists the keys a reader tries for label, the current one first:
// what was written under an older key of the cluster secret still
// verifies.
func (d *Daemon) keysFor(label string) []pki.LabeledKey {
	r := d.secret.Load()
	if r == nil {
		return []pki.LabeledKey{{}}
	}
	return r.Keys(label)
}

// checkCredential checks a networked daemon's credential against its
// configuration, taking its name from the certificate.
func checkCredential(cfg *Config) error {
	c := cfg.Credential
	if c == nil {
		return pki.ErrNoCredential
	}
	if c.Role != pki.RoleDaemon {
		return fmt.Errorf("%w: a %s certificate (%s) cannot run a daemon: issue a host certificate with 'dpvm cert host'", ErrForbidden, c.Role, c.Name)
	}
	if cfg.Name != "" && cfg.Name != c.Name {
		return fmt.Errorf("the name %q differs from the certificate's %q", cfg.Name, c.Name)
	}
	cfg.Name = c.Name
	if cfg.Master != c.Master {
		if cfg.Master {
			return fmt.Errorf("%w: %s's certificate is not marked as the master's (issue one with 'dpvm cert host --master')", ErrForbidden, c.Name)
		}
		return fmt.Errorf("%w: %s's certificate is the master's: a host joining a master needs a host certificate of its own", ErrForbidden, c.Name)
	}
	if cfg.Master && cfg.Secret == nil {
		return errors.New("the master needs the cluster secret (--secret FILE, from 'dpvm keygen')")
	}
	return nil
}

// refusalLog rate-limits the log lines of refused handshakes: a flood of
// bad connections costs a line per refusalBurst, not one each.
type refusalLog struct {
	mu         sync.Mutex
	start      time.Time // of the current window
	n          int       // lines logged in it
	suppressed int       // refusals not logged in it
}

const (
	refusalWindow = time.Minute
	refusalBurst  = 20
)

// allow says whether to log a refusal at now, and how many went unlogged
// in the window that just ended.
func (l *refusalLog) allow(now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.start) >= refusalWindow {
		suppressed = l.suppressed
		l.start, l.n, l.suppressed = now, 0, 0
	}
	if l.n >= refusalBurst {
		l.suppressed++
		return false, suppressed
	}
	l.n++
	return true, suppressed
}

// refused logs a refused handshake: the peer's address, whom its
// certificate names, and why.
func (d *Daemon) refused(addr string, cert pki.Peer, why string) {
	ok, suppressed := d.refusals.allow(time.Now())
	if suppressed > 0 {
		d.log.Warn("refused connections not logged", "count", suppressed, "window", refusalWindow)
	}
	switch {
	case !ok:
	case cert.Role == "": // refused before a certificate was verified
		d.log.Warn("refused a connection", "from", addr, "reason", why)
	default:
		d.log.Warn("refused a connection", "from", addr, "certificate", cert.String(), "serial", cert.Serial, "reason", why)
	}
}

// readCkptFile reads checkpoint name of dir, trying the cluster secret's
// keys in turn: one written under an older key still verifies.
func (d *Daemon) readCkptFile(dir ckpt.Dir, name string) (*ckpt.Meta, task.Task, error) {
	keys := d.keysFor(labelCkpt)
	var named bool
	lim := ckpt.Limits{KeyFor: d.keyFor(labelCkpt, "checkpoint "+name, &named)}
	for i, k := range keys {
		f, err := dir.Open(name)
		if err != nil {
			return nil, nil, err
		}
		m, t, err := ckpt.ReadLimits(f, k.Key, lim)
		f.Close()
		if named {
			// A format 2 file names its key: the answer is final.
			return m, t, err
		}
		if err != nil && errors.Is(err, ckpt.ErrTampered) && i+1 < len(keys) {
			continue
		}
		if err == nil && i > 0 {
			d.log.Info("checkpoint verified under an older key of the cluster secret", "file", name, "key", k.ID)
		}
		return m, t, err
	}
	return nil, nil, errors.New("no key") // not reached: keysFor is never empty
}

// readManifest reads the manifest of the set setDir under the key it names
// (format 2) or, for one of format 1, trying the cluster secret's keys in
// turn.
func (d *Daemon) readManifest(setDir string) (*jobset.Manifest, error) {
	keys := d.keysFor(labelManifest)
	var named bool
	keyFor := d.keyFor(labelManifest, "manifest of "+setDir, &named)
	var err error
	for _, k := range keys {
		var m *jobset.Manifest
		if m, err = jobset.ReadManifestWith(setDir, k.Key, keyFor); err == nil || named || !errors.Is(err, jobset.ErrTampered) {
			return m, err
		}
	}
	return nil, err
}

// latestSet is jobset.Latest where each manifest of format 2 is read under
// the key it names, and those of format 1 under the first key of the
// cluster secret that authenticates a set of jobDir: the current key's
// newest set, else an older key's.
func (d *Daemon) latestSet(jobDir string) (string, *jobset.Manifest, []error, error) {
	var setDir string
	var m *jobset.Manifest
	var skipped []error
	var err error
	var named bool
	keyFor := d.keyFor(labelManifest, "a manifest of "+jobDir, &named)
	for i, k := range d.keysFor(labelManifest) {
		s, mm, sk, e := jobset.LatestWith(jobDir, k.Key, keyFor)
		if e == nil {
			return s, mm, sk, nil
		}
		if i == 0 {
			setDir, m, skipped, err = s, mm, sk, e // report the current key's refusals
		}
	}
	return setDir, m, skipped, err
}

// revokedStamp is the revocation file as the master last read it.
type revokedStamp struct {
	mu      sync.Mutex
	modTime time.Time
	size    int64
	read    bool
}

// loadRevoked reads the master's revocation list at start.
func (d *Daemon) loadRevoked() error {
	if d.cfg.RevokedFile == "" {
		return nil
	}
	if !d.reloadRevoked() {
		return fmt.Errorf("revocation list %s: unreadable", d.cfg.RevokedFile)
	}
	return nil
}

// reloadRevoked re-reads the master's revocation list if the file changed
// since it was last read; a new list is handed to every host and the
// connections of revoked certificates are dropped. It reports whether the
// list in force is the file's.
func (d *Daemon) reloadRevoked() bool {
	path := d.cfg.RevokedFile
	if path == "" {
		return true
	}
	st := &d.revokedAt
	st.mu.Lock()
	defer st.mu.Unlock()
	fi, err := os.Stat(path)
	var mod time.Time
	var size int64
	if err == nil {
		mod, size = fi.ModTime(), fi.Size()
	} else if !os.IsNotExist(err) {
		d.log.Error("revocation list", "file", path, "error", err)
		return false
	}
	if st.read && mod.Equal(st.modTime) && size == st.size {
		return true
	}
	rv, err := pki.LoadRevoked(path)
	if err != nil {
		d.log.Error("revocation list not taken up; the previous one stays in force", "error", err)
		return false
	}
	st.modTime, st.size, st.read = mod, size, true
	d.revoked.Store(rv)
	d.log.Info("revocation list read", "file", path, "serials", rv.Len())
	if d.nw != nil {
		d.broadcast(&event{Kind: evRevoked, Serials: rv.Serials()}, 0)
	}
	d.dropRevoked()
	return true
}

// dropRevoked closes the connections of revoked certificates.
func (d *Daemon) dropRevoked() {
	rv := d.revoked.Load()
	n := d.nw
	if n == nil || rv.Len() == 0 {
		return
	}
	d.dropCerts(func(c pki.Peer) bool { return rv.Has(c.Serial) }, "revoked", true)
}

// dropExpired drops the connections whose certificates have expired by
// now (a handshake checks a certificate's dates, a connection made before
// it expired would otherwise live on). At the master, a host whose
// current connection's certificate expired ends its membership as a lost
// host does (expiredHost), unless it presents a renewal.
func (d *Daemon) dropExpired(now time.Time) {
	if d.nw == nil {
		return
	}
	expired := func(c pki.Peer) bool { return !c.NotAfter.IsZero() && now.After(c.NotAfter) }
	var hosts []*peer
	if d.cfg.Master {
		n := d.nw
		n.mu.Lock()
		for id, p := range n.peers {
			if id != MasterID && p.role == pki.RoleDaemon && expired(p.cert) {
				hosts = append(hosts, p)
			}
		}
		n.mu.Unlock()
		for _, p := range hosts {
			if d.certEnds.start(p.info.ID) {
				d.goFunc(func() { d.expiredHost(p) })
			}
		}
	}
	d.dropCerts(func(c pki.Peer) bool { return expired(c) }, "expired", false, hosts...)
}

// certEnds is the master's set of hosts whose current connection's
// certificate has expired and which it is asking for a renewal.
type certEnds struct {
	mu       sync.Mutex
	checking map[task.HostID]bool
}

// start reports whether host id is to be checked now (it was not under
// check), and marks it.
func (c *certEnds) start(id task.HostID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.checking[id] {
		return false
	}
	if c.checking == nil {
		c.checking = map[task.HostID]bool{}
	}
	c.checking[id] = true
	return true
}

// done ends host id's check.
func (c *certEnds) done(id task.HostID) {
	c.mu.Lock()
	delete(c.checking, id)
	c.mu.Unlock()
}

// expiredHost ends, at the master, the membership of a host whose
// connection p carries an expired certificate, as a lost host's ends
// (removeHost: its jobs roll back), unless the host holds a renewal. The
// master dials the host (within HandshakeTimeout; p stays open meanwhile,
// so a renewed host loses nothing): the handshake checks the certificate
// the host presents now, and a connection the master dialled wins the tie
// with p on both ends (attach), so a renewed host goes on over it. A host
// that answers with the expired certificate, or not at all, is deleted;
// it can never register again with that certificate.
func (d *Daemon) expiredHost(p *peer) {
	id := p.info.ID
	defer d.certEnds.done(id)
	why := fmt.Errorf("the certificate of %s has expired", p.cert)
	n := d.nw
	hi, _ := n.host(id)
	var err error
	if hi.Addr != "" {
		ctx, cancel := context.WithTimeout(d.ctx, d.cfg.HandshakeTimeout)
		_, err = d.dial(ctx, id, hi.Addr)
		cancel()
	}
	n.mu.Lock()
	cur, member := n.peers[id], n.hosts[id] != nil
	n.mu.Unlock()
	now := time.Now()
	switch {
	case cur != nil && cur != p && cur.cert.NotAfter.After(now):
		d.log.Info("a host whose certificate expired presents a renewal: it stays", "peer", id, "peer_name", p.info.Name,
			"expired", p.cert.Serial, "renewal", cur.cert.Serial, "expires", cur.cert.NotAfter.UTC().Format(time.RFC3339))
	case member && d.ctx.Err() == nil:
		if err != nil {
			why = fmt.Errorf("%w, and no renewal: %v", why, err)
		}
		d.log.Warn("deleting a host whose certificate expired", "peer", id, "peer_name", p.info.Name, "serial", p.cert.Serial, "error", err)
		d.removeHost(id, why.Error())
	}
	p.close(why)
}

// dropCerts closes the connections whose certificates doomed says must
// go, saying why (revoked, expired). With remove, at the master, a host
// whose certificate goes is deleted at once as a lost host is (its jobs
// roll back): it can never register again with it.
// Connections in spare are left to their caller.
func (d *Daemon) dropCerts(doomed func(pki.Peer) bool, why string, remove bool, spare ...*peer) {
	n := d.nw
	n.mu.Lock()
	var ps []*peer
	for _, p := range n.peers {
		if doomed(p.cert) && !slices.Contains(spare, p) {
			ps = append(ps, p)
		}
	}
	for p := range n.clients {
		if doomed(p.cert) {
			ps = append(ps, p)
		}
	}
	for _, p := range n.retiringTo(0) {
		if doomed(p.cert) {
			ps = append(ps, p)
		}
	}
	n.mu.Unlock()
	for _, p := range ps {
		d.log.Warn("dropped the connection of a certificate "+why, "certificate", p.cert.String(), "serial", p.cert.Serial, "from", p.conn.RemoteAddr())
		err := fmt.Errorf("the certificate of %s is %s", p.cert, why)
		if remove && d.cfg.Master && p.role == pki.RoleDaemon && p.info.ID != 0 {
			d.removeHost(p.info.ID, err.Error())
		}
		p.close(err)
	}
}

// ErrCertificateExpired: this daemon's certificate has expired: it does
// not start, and a host daemon that has lost its master with it stops.
var ErrCertificateExpired = errors.New("this daemon's certificate has expired")

// credentialCurrent refuses to start a daemon whose certificate has
// expired: no daemon would take a connection with it (a host would try to
// join until it gave up).
func (d *Daemon) credentialCurrent(now time.Time) error {
	c := d.credential()
	if c == nil || c.NotAfter.IsZero() || !now.After(c.NotAfter) {
		return nil
	}
	return fmt.Errorf("%w (%s, serial %s, at %s): issue a new one with 'dpvm cert host'",
		ErrCertificateExpired, c.Name, c.Serial, c.NotAfter.UTC().Format(time.RFC3339))
}

// checkExpiry warns, at most once a day, when this daemon's certificate
// expires within Config.ExpiryWarning. A host daemon whose certificate
// has expired (no renewal taken up) and which has lost its master stops
// at once: the master has deleted it or will (expiredHost), its jobs roll
// back elsewhere, and it can connect to no daemon again with it, so its
// tasks must not run on for MasterGrace.
func (d *Daemon) checkExpiry(now time.Time) {
	c := d.credential()
	if c == nil {
		return
	}
	if !d.cfg.Master && d.nw != nil && d.orphan.Load() && !c.NotAfter.IsZero() && now.After(c.NotAfter) {
		d.log.Error("this daemon's certificate has expired and it lost its master: stopping; issue a new one with 'dpvm cert host' and start the daemon with it",
			"name", c.Name, "serial", c.Serial, "expired", c.NotAfter.UTC().Format(time.RFC3339))
		d.stopAsync(fmt.Errorf("%w (%s, serial %s, at %s): %w", ErrCertificateExpired, c.Name, c.Serial, c.NotAfter.UTC().Format(time.RFC3339), ErrMasterLost))
		return
	}
	left := c.NotAfter.Sub(now)
	if left > d.cfg.ExpiryWarning {
		return
	}
	last := d.expiryWarn.Load()
	if last != 0 && now.Sub(time.Unix(0, last)) < 24*time.Hour {
		return
	}
	d.expiryWarn.Store(now.UnixNano())
	d.log.Warn("this daemon's certificate expires soon: issue a new one with 'dpvm cert host' and move it over the daemon's credential file (the daemon takes it up)",
		"name", c.Name, "serial", c.Serial, "expires", c.NotAfter.UTC().Format(time.RFC3339), "left", left.Round(time.Minute))
}
