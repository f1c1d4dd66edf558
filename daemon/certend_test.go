package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/task"
)

// masterPeer is the master's connection to host id.
func masterPeer(t *testing.T, m *Daemon, id int) *peer {
	t.Helper()
	m.nw.mu.Lock()
	defer m.nw.mu.Unlock()
	for hid, p := range m.nw.peers {
		if int(hid) == id {
			return p
		}
	}
	t.Fatalf("the master has no connection to h%d", id)
	return nil
}

// TestRevokedHostIsDeleted: a host whose certificate is revoked is
// deleted from the virtual machine at once, as a lost host is, not only
// disconnected.
func TestRevokedHostIsDeleted(t *testing.T) {
	list := filepath.Join(t.TempDir(), "revoked")
	vm := startVM(t, 3, Config{RevokedFile: list})
	m := vm.Master()
	p := masterPeer(t, m, 3)
	if err := pki.AppendRevoked(list, p.cert.Serial, "h3"); err != nil {
		t.Fatal(err)
	}
	if !m.reloadRevoked() {
		t.Fatal("the master did not take up the revocation list")
	}
	if m.hostKnown(3) {
		t.Fatal("the host of a revoked certificate is still a member")
	}
	select {
	case <-p.closed:
	default:
		t.Fatal("the connection of a revoked host is open")
	}
	if !m.hostKnown(2) {
		t.Fatal("another host was deleted")
	}
}

// TestExpiredCertificateDropsItsConnections: a connection whose
// certificate has expired is closed (a handshake checks the dates, a
// connection made before does not). At the master, a host's connection
// is first replaced by one the master dials, on which the host presents
// its certificate of now: here valid (a renewal, in effect), so the hosts
// stay members, none deleted or registering again.
func TestExpiredCertificateDropsItsConnections(t *testing.T) {
	vm := startVM(t, 3, Config{MasterGrace: time.Minute})
	m := vm.Master()
	p2, p3 := masterPeer(t, m, 2), masterPeer(t, m, 3)
	if p2.cert.NotAfter.IsZero() {
		t.Fatal("the connection does not know when its certificate expires")
	}
	m.dropExpired(time.Now())
	select {
	case <-p2.closed:
		t.Fatal("a valid certificate's connection was dropped")
	default:
	}
	m.dropExpired(p2.cert.NotAfter.Add(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, p := range []*peer{p2, p3} {
		select {
		case <-p.closed:
		case <-ctx.Done():
			t.Fatalf("the connection of %s outlived its certificate", p.name())
		}
		if !m.hostKnown(p.info.ID) {
			t.Fatalf("%s, whose certificate is valid, was deleted", p.name())
		}
		if q := masterPeer(t, m, int(p.info.ID)); q == p || !q.dialr {
			t.Fatalf("%s goes on over %p (dialled by the master: %v), want a connection the master dialled", p.name(), q, q.dialr)
		}
	}
	if len(m.Hosts()) != 3 {
		t.Fatalf("hosts %+v", m.Hosts())
	}
	for _, h := range vm.Daemons[1:] {
		if h.orphan.Load() {
			t.Fatalf("%s lost its master", h.Name())
		}
	}
}

func init() {
	task.Register("daemon.test.certroot", &certRoot{})
	task.Register("daemon.test.certworker", &certWorker{})
}

// certRoot is the job of TestHostCertificateEndRollsBack: it spawns a
// worker on the host named On and prints the worker's sum.
type certRoot struct {
	N, Every int // the worker's steps, and milliseconds of computing each
	On       string
	W        task.TID
}

func (r *certRoot) Run(c *task.Ctx) error {
	if r.W == 0 {
		tids, err := c.Spawn(&certWorker{N: r.N, Every: r.Every}, 1, task.OnHost(r.On))
		if err != nil {
			return err
		}
		r.W = tids[0]
	}
	var sum int64
	if _, err := c.Recv(r.W, 1, &sum, task.Safe()); err != nil {
		return err
	}
	c.Printf("cert sum %d\n", sum)
	return nil
}

// certWorker computes for N steps of Every milliseconds (virtual time),
// each ending at a safe point, and sends its parent a sum of its steps.
type certWorker struct {
	N, Every, I int
	Sum         int64
}

func (w *certWorker) Run(c *task.Ctx) error {
	for w.I < w.N {
		time.Sleep(time.Duration(w.Every) * time.Millisecond)
		w.Sum += int64(w.I*w.I%97 + 1)
		w.I++
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	return c.Send(c.Parent(), 1, w.Sum)
}

// TestHostCertificateEndRollsBack: a host whose certificate expires (or
// is revoked) while it runs a worker of a checkpointed job is deleted by
// the master as a lost host is; the job rolls back to its checkpoint on
// the other hosts and prints the sum an uninterrupted run prints; and the
// host cannot connect again with its certificate (an expired one: the
// host stops at once, and a daemon does not start with it). A host that took up a
// renewal before its certificate expired (renewed) stays, and its job
// does not roll back. Four daemons on transport.Mem in a synctest bubble:
// the worker computes for 6 s of virtual time, h4's certificate lasts 2 s.
func TestHostCertificateEndRollsBack(t *testing.T) {
	const steps, every = 300, 20
	var want int64
	for i := range steps {
		want += int64(i*i%97 + 1)
	}
	for _, how := range []string{"expired", "revoked", "renewed"} {
		t.Run(how, func(t *testing.T) {
			dir := simDir(t)
			synctest.Test(t, func(t *testing.T) {
				out := &syncBuffer{}
				cfg := simCfg(dir, out)
				cfg.RevokedFile = filepath.Join(dir, "revoked")
				logs := &syncBuffer{}
				cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
				vm := startMemVM(t, 3, &faults{}, cfg)
				m := vm.Master()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				life := 2 * time.Second
				if how == "revoked" {
					life = 0 // a year
				}
				cred, err := vm.Cluster.CA.IssueHost("h4", false, time.Now(), life)
				if err != nil {
					t.Fatal(err)
				}
				hc := simCfg(dir, out)
				hc.Logger = m.cfg.Logger
				hc.Network, hc.Heartbeat, hc.RTO = m.cfg.Network, m.cfg.Heartbeat, m.cfg.RTO
				hc.Listen, hc.Join, hc.Secret, hc.Credential = "mem:0", m.Addr(), vm.Cluster.Secret, cred
				hc.CredentialFile = filepath.Join(t.TempDir(), "h4.pem")
				if err := pki.WriteCredential(hc.CredentialFile, cred); err != nil {
					t.Fatal(err)
				}
				h4, err := Start(ctx, hc)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { h4.Halt(context.Background()) })
				job, _, err := m.StartJob(ctx, &certRoot{N: steps, Every: every, On: "h4"}, JobOptions{CheckpointEvery: 100 * time.Millisecond, Keep: 2})
				if err != nil {
					t.Fatal(err)
				}
				js, err := m.job(job)
				if err != nil {
					t.Fatal(err)
				}
				waitFor(t, ctx, "a complete checkpoint", func() bool { return js.seq() > 0 })
				if simEnded(js) {
					t.Fatal("the job ended before its host's certificate did")
				}
				if !m.hostKnown(h4.cfg.HostID) {
					t.Fatal("h4 is not a member")
				}
				switch how {
				case "revoked":
					if err := pki.AppendRevoked(cfg.RevokedFile, cred.Serial, "h4"); err != nil {
						t.Fatal(err)
					}
				case "renewed":
					renewed, err := vm.Cluster.CA.IssueHost("h4", false, time.Now(), 0)
					if err != nil {
						t.Fatal(err)
					}
					if err := pki.WriteCredential(hc.CredentialFile+".new", renewed); err != nil {
						t.Fatal(err)
					}
					if err := os.Rename(hc.CredentialFile+".new", hc.CredentialFile); err != nil {
						t.Fatal(err)
					}
					if err := h4.ReloadCredential(); err != nil {
						t.Fatal(err)
					}
				}
				info, err := m.waitJob(ctx, js)
				if err != nil || info.Status != 0 {
					t.Fatalf("the job: %+v %v\n%s", info, err, out)
				}
				// Until the master has heard every task's exit the job is
				// not over: a host halted by the test's cleanup before then
				// would roll it back, and the restored tasks would outlive
				// the halted daemons.
				select {
				case <-js.done:
				case <-ctx.Done():
					t.Fatal("the job's root returned, and its worker's end was never heard")
				}
				if got := fmt.Sprintf("cert sum %d\n", want); !strings.Contains(out.String(), got) {
					t.Fatalf("the job printed %q, want %q", out.String(), got)
				}
				if how == "renewed" {
					// Past the old certificate's end: h4 goes on over a
					// connection under its renewal, nothing lost.
					if time.Now().Before(cred.NotAfter) {
						t.Fatal("the job ended before the old certificate")
					}
					if m.Rollbacks() != 0 || !m.hostKnown(h4.cfg.HostID) || h4.orphan.Load() {
						t.Fatalf("a renewed host: %d rollbacks, member %v, lost its master %v", m.Rollbacks(), m.hostKnown(h4.cfg.HostID), h4.orphan.Load())
					}
					if s := masterPeer(t, m, int(h4.cfg.HostID)).cert.Serial; s == cred.Serial {
						t.Fatalf("h4's connection to the master carries its old certificate %s", s)
					}
					if strings.Contains(logs.String(), "lost the master daemon") {
						t.Fatalf("h4 lost its master as its old certificate expired:\n%s", logs)
					}
					return
				}
				// Deleted for its certificate, at once, not for the silence
				// that followed (the failure detector's reason).
				deleted := regexp.MustCompile(`msg="host deleted" host=h1 peer=h4 peer_name=h4 reason="([^"]*)"`).FindStringSubmatch(logs.String())
				if deleted == nil || !strings.HasPrefix(deleted[1], "the certificate of daemon h4 ") || !strings.Contains(deleted[1], how) {
					t.Fatalf("the master deleted h4 for %q, want its certificate %s", deleted, how)
				}
				if m.Rollbacks() == 0 {
					t.Fatal("the job did not roll back")
				}
				if m.hostKnown(h4.cfg.HostID) {
					t.Fatalf("the host whose certificate is %s is still a member", how)
				}
				// It cannot come back with its certificate: it stops (at
				// once with an expired one, after MasterGrace with a
				// revoked one), and a handshake with it is refused.
				select {
				case <-h4.Done():
				case <-ctx.Done():
					t.Fatal("h4 runs on, out of the machine")
				}
				if err := h4.Err(); !errors.Is(err, ErrMasterLost) || (how == "expired") != errors.Is(err, ErrCertificateExpired) {
					t.Fatalf("h4 stopped with %v, want ErrMasterLost (and ErrCertificateExpired if expired)", err)
				}
				if stopped := time.Since(cred.NotAfter); how == "expired" && stopped >= hc.MasterGrace {
					t.Fatalf("h4 stopped %v after its certificate expired, not at once", stopped)
				}
				if m.hostKnown(h4.cfg.HostID) || len(m.Hosts()) != 3 {
					t.Fatalf("hosts %+v", m.Hosts())
				}
				ep, err := m.cfg.Network.Dialer(m.Addr(), cred, transport.Config{})
				if err != nil {
					t.Fatal(err)
				}
				defer ep.Close()
				// A join with it, as a new host, is refused too.
				g, err := greet(ctx, ep, m.Addr(), &hello{Name: "h4", Addr: "mem:0", Join: true, Info: h4.selfInfo(), Detector: m.helloDetector()}, m.cfg.MaxFrame)
				if err == nil && g.reply.Assigned != 0 {
					g.conn.Close("done")
					t.Fatalf("the master admitted h4 again, as host %v, with a certificate %s", g.reply.Assigned, how)
				}
				if err == nil {
					g.conn.Close("done")
				}
				t.Logf("a join with h4's %s certificate: %v", how, err)
				if how == "expired" {
					// A daemon does not start with it.
					if d, err := Start(ctx, hc); !errors.Is(err, ErrCertificateExpired) {
						if err == nil {
							d.Halt(ctx)
						}
						t.Fatalf("a daemon started with an expired certificate: %v, want ErrCertificateExpired", err)
					}
				}
				if m.hostKnown(h4.cfg.HostID) || len(m.Hosts()) != 3 {
					t.Fatalf("hosts %+v", m.Hosts())
				}
			})
		})
	}
}
