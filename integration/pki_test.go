package integration

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/daemon/transport"
)

// TestLeastPrivilegeOfProcesses runs a master and a host as processes and
// tries, with the credentials of the wrong role, what those roles may not
// do: a user halts the machine or deletes a host; a user certificate, the
// master's certificate and a second copy of a live host's certificate join
// as hosts. Each is refused, the refusals and a user's calls are audited
// by the master, a revoked certificate is refused, and the machine goes
// on.
func TestLeastPrivilegeOfProcesses(t *testing.T) {
	list := filepath.Join(t.TempDir(), "revoked")
	v := startVM(t, 1, "--revoked", list)
	c := v.creds
	alice := c.userFile("alice", pki.RoleUser)
	userEnv := []string{"DPVM_MASTER=" + v.addr, "DPVM_CREDENTIAL=" + alice}

	// A user lists everything...
	if code, out, errOut := dpvm(t, userEnv, "conf"); code != 0 || !strings.Contains(out, "h2") {
		t.Fatalf("conf as a user: %d\n%s\n%s", code, out, errOut)
	}
	// ...but may not act on the whole machine.
	for _, args := range [][]string{{"halt"}, {"delete", "h2"}} {
		code, _, errOut := dpvm(t, userEnv, args...)
		if code == 0 || !strings.Contains(errOut, "needs an admin certificate") {
			t.Fatalf("%v as a user: %d %s", args, code, errOut)
		}
	}
	v.master.waitFor(regexp.MustCompile(`msg=audit .*who=alice role=user .*method=halt outcome="refused: `), true)
	v.master.waitFor(regexp.MustCompile(`msg=audit .*who=alice role=user .*method=conf outcome=ok`), true)

	// Credentials of the wrong kind do not make a host.
	join := func(name, cred string) *proc {
		return start(t, name, nil, "daemon", "--join", v.addr, "--listen", "127.0.0.1:0", "--credential", cred)
	}
	if p := join("user as host", alice); p.wait() == 0 || !strings.Contains(p.err.String(), "cannot run a daemon") {
		t.Fatalf("a user certificate ran a daemon: %s", p.err.String())
	}
	if p := join("master as host", c.master()[1]); p.wait() == 0 || !strings.Contains(p.err.String(), "is the master's") {
		t.Fatalf("the master's certificate joined as a host: %s", p.err.String())
	}
	if p := join("second h2", c.hostFile("h2")); p.wait() == 0 || !strings.Contains(p.err.String(), `a host named "h2" is already in the virtual machine`) {
		t.Fatalf("a copy of h2's certificate joined: %s", p.err.String())
	}
	v.master.waitFor(regexp.MustCompile(`refused a connection.*certificate="daemon h2"`), true)

	// Revoked, alice is refused once the master has re-read its list.
	if code, _, errOut := dpvm(t, nil, "cert", "revoke", "--list", list, alice); code != 0 {
		t.Fatalf("cert revoke: %s", errOut)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _, errOut := dpvm(t, userEnv, "conf", "--timeout", "5s")
		if code != 0 && strings.Contains(errOut, "revoked") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a revoked certificate still lists the hosts: %d %s", code, errOut)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The machine goes on, and an admin halts it.
	if code, out, errOut := dpvm(t, v.env, "run", "hello", "-n", "2"); code != 0 || !strings.Contains(out, "2 children said hello") {
		t.Fatalf("run after the refusals: %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := dpvm(t, v.env, "halt"); code != 0 {
		t.Fatalf("halt as the admin: %s", errOut)
	}
	if code := v.master.wait(); code != 0 {
		t.Fatalf("master exited with %d", code)
	}
}

// TestRenewCertificateOfProcesses: a host daemon's credential file is
// replaced by a renewed certificate and the daemon is sent SIGHUP: it
// takes the certificate up without a restart (on the signal or at its
// heartbeat's check of the file, whichever comes first), new connections to it see
// the new serial, and programs run across the machine as before.
func TestRenewCertificateOfProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	v := startVM(t, 0)
	h2 := start(t, "host 2", []string{"DPVM_LOG=info"}, append([]string{"daemon", "--join", v.addr, "--listen", "127.0.0.1:0", "--heartbeat", "100ms"},
		v.creds.host("h2")...)...)
	h2Addr := h2.waitFor(listening, true)[1]
	file := v.creds.hostFile("h2")
	renewed, err := v.creds.cl.Host("h2")
	if err != nil {
		t.Fatal(err)
	}
	tmp := file + ".new"
	if err := pki.WriteCredential(tmp, renewed); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	if err := h2.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	h2.waitFor(regexp.MustCompile(`renewed certificate taken up.* serial=`+renewed.Serial), true)

	admin, err := transport.Dialer(transport.LocalFor(h2Addr), v.creds.cl.Admin, transport.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	c, err := admin.Dial(ctx, h2Addr)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Peer().Serial; got != renewed.Serial {
		t.Fatalf("h2 presents serial %s after renewal, want %s", got, renewed.Serial)
	}
	c.Close("done")
	if code, out, errOut := dpvm(t, v.env, "run", "hello", "-n", "4"); code != 0 || !strings.Contains(out, "4 children said hello") {
		t.Fatalf("run after the renewal: %d\n%s\n%s", code, out, errOut)
	}
}
