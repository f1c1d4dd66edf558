package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
)

// sshdBin is OpenSSH's server, or "" where it is not installed.
func sshdBin() string {
	for _, p := range []string{"/usr/sbin/sshd", "/usr/local/sbin/sshd"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, _ := exec.LookPath("sshd")
	return p
}

// startSSHD starts an sshd in host namespace i, listening on its address,
// that lets in the key whose public half is in authorized and runs every
// command in a login directory of that host's own, dir/homeI, as on a
// machine of its own; it is killed when the test ends.
func startSSHD(t *testing.T, ns *netns, i int, dir, sshd, authorized string) {
	t.Helper()
	home := filepath.Join(dir, fmt.Sprintf("home%d", i))
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	hostKey := filepath.Join(dir, fmt.Sprintf("host%d_key", i))
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", hostKey).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	conf := filepath.Join(dir, fmt.Sprintf("sshd%d.conf", i))
	cfg := fmt.Sprintf(`ListenAddress 10.213.0.%d
Port 22
HostKey %s
AuthorizedKeysFile %s
PidFile none
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
LogLevel ERROR
ForceCommand cd %s && eval "$SSH_ORIGINAL_COMMAND"
`, i, hostKey, authorized, home)
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	startCmd(t, fmt.Sprintf("sshd %d", i), exec.Command("ip", "netns", "exec", ns.names[i-1], sshd, "-D", "-e", "-f", conf))
}

// sshHosts starts n network namespaces each with an sshd that lets in the
// key id (in dir), and waits until each does; it skips the test where
// namespaces, sshd or the OpenSSH client are missing.
func sshHosts(t *testing.T, n int) (ns *netns, dir, id string) {
	t.Helper()
	ns = newNetns(t, n)
	sshd := sshdBin()
	if sshd == "" {
		t.Skip("no sshd (Debian: apt-get install openssh-server; .ci/run installs it): skipping the ssh launcher test")
	}
	for _, tool := range []string{"ssh", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s (OpenSSH client): skipping the ssh launcher test", tool)
		}
	}
	// sshd wants its privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	id = filepath.Join(dir, "id")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", id).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	pub, err := os.ReadFile(id + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	authorized := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(authorized, pub, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		startSSHD(t, ns, i, dir, sshd, authorized)
	}
	ssh := "ssh -F /dev/null -i " + id + " -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=5"
	// Real sockets: poll each sshd until it lets the key in.
	for i := 1; i <= n; i++ {
		deadline := time.Now().Add(30 * time.Second)
		for {
			args := append([]string{"netns", "exec", ns.names[0]}, strings.Fields(ssh)...)
			out, err := exec.Command("ip", append(args, fmt.Sprintf("10.213.0.%d", i), "true")...).CombinedOutput()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sshd in namespace %d does not let the key in: %v: %s", i, err, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return ns, dir, id
}

// TestUpDownOverSSH starts a virtual machine with 'dpvm up' over ssh (an
// sshd with key authentication in each of three network namespaces, the
// binary copied to each) on two hosts, adds the third from the console,
// runs a program across them, and stops it with 'dpvm down', checking that
// no daemon is left.
func TestUpDownOverSSH(t *testing.T) {
	ns, dir, id := sshHosts(t, 3)
	ssh := "ssh -F /dev/null -i " + id + " -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=5"

	// The credentials directory holds the CA: dpvm up issues each daemon's
	// credential under it, named as the hostfile names the host.
	creds := filepath.Join(dir, "creds")
	if code, _, errOut := dpvm(t, nil, "keygen", "--out", creds); code != 0 {
		t.Fatal(errOut)
	}
	admin := filepath.Join(creds, pki.AdminFile)
	// Every daemon listens on 0.0.0.0:7070, dpvm up's default, and is
	// reached at the address its master sees it come from.
	hostfile := filepath.Join(dir, "hosts")
	var hf strings.Builder
	hf.WriteString("# two hosts, the first the master; the console adds the third\n")
	line := func(i int) string {
		return fmt.Sprintf("10.213.0.%d name=n%d cores=2 flags=\"--heartbeat 200ms\"", i, i)
	}
	for i := 1; i <= 2; i++ {
		fmt.Fprintln(&hf, line(i))
	}
	if err := os.WriteFile(hostfile, []byte(hf.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	remote := filepath.Join(dir, "remote")
	env := []string{"XDG_STATE_HOME=" + filepath.Join(dir, "state")}
	dpvmIn := func(name string, args ...string) *proc {
		cmd := exec.Command("ip", ns.in(1, args...)...)
		cmd.Env = append(os.Environ(), env...)
		return startCmd(t, name, cmd)
	}
	up := dpvmIn("dpvm up", "up", hostfile, "--credentials", creds, "--ssh", ssh, "--copy", "--bin", dpvmBin,
		"--remote-dir", remote, "--wait", "60s", "--json")
	if code := up.wait(); code != 0 {
		t.Fatalf("dpvm up: %d\n%s\n%s", code, up.out.String(), up.err.String())
	}
	// Whatever happens next, the daemons are stopped.
	downDone := false
	t.Cleanup(func() {
		if !downDone {
			p := dpvmIn("dpvm down (cleanup)", "down", hostfile, "--ssh", ssh, "--stop-grace", "1s")
			p.wait()
		}
	})
	var table struct {
		Master string `json:"master"`
		State  string `json:"state"`
		Hosts  []struct {
			Name   string `json:"name"`
			Addr   string `json:"addr"`
			Cores  int    `json:"cores"`
			Master bool   `json:"master"`
		} `json:"hosts"`
	}
	if err := json.Unmarshal([]byte(up.out.String()), &table); err != nil {
		t.Fatalf("dpvm up --json: %v\n%s", err, up.out.String())
	}
	if table.Master != "10.213.0.1:7070" || len(table.Hosts) != 2 {
		t.Fatalf("dpvm up's table: %+v", table)
	}
	for i, h := range table.Hosts {
		if h.Name != fmt.Sprintf("n%d", i+1) || h.Addr != fmt.Sprintf("10.213.0.%d:7070", i+1) || h.Cores != 2 || h.Master != (i == 0) {
			t.Errorf("host %d: %+v", i, h)
		}
	}

	// The console adds the third host the same way; dpvm up's record
	// gets it, so that dpvm down stops it too.
	con := exec.Command("ip", ns.in(1, "console", "--master", table.Master, "--credential", admin)...)
	con.Env = append(os.Environ(), env...)
	con.Stdin = strings.NewReader(fmt.Sprintf("add %s --ssh '%s' --copy --bin %s --remote-dir %s --credentials %s --wait 60s --json\n", line(3), ssh, dpvmBin, remote, creds))
	cp := startCmd(t, "console add", con)
	if code := cp.wait(); code != 0 {
		t.Fatalf("console add: %d\n%s\n%s", code, cp.out.String(), cp.err.String())
	}
	var added []struct {
		Name string `json:"name"`
		Addr string `json:"addr"`
	}
	if err := json.Unmarshal([]byte(cp.out.String()), &added); err != nil || len(added) != 3 || added[2].Name != "n3" || added[2].Addr != "10.213.0.3:7070" {
		t.Fatalf("hosts after add: %v %+v\n%s", err, added, cp.out.String())
	}

	// The recorded daemons, to check they are gone after down.
	var state struct {
		Hosts []struct {
			Name    string `json:"name"`
			PID     int    `json:"pid"`
			PIDFile string `json:"pid_file"`
			Bin     string `json:"bin"`
		} `json:"hosts"`
	}
	b, err := os.ReadFile(table.State)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &state); err != nil || len(state.Hosts) != 3 {
		t.Fatalf("state file %s: %v\n%s", table.State, err, b)
	}
	for _, n := range []string{"master-n1", "host-n2", "host-n3"} {
		if c, err := pki.LoadCredential(filepath.Join(creds, n+".pem")); err != nil || c.Name != n[strings.Index(n, "-")+1:] || c.Master != (n == "master-n1") {
			t.Errorf("credential %s issued by up and add: %v %v", n, c, err)
		}
	}
	if state.Hosts[0].Bin != remote+"/dpvm" {
		t.Errorf("remote binary %s, want the copy in %s", state.Hosts[0].Bin, remote)
	}

	p := dpvmIn("run hello", "run", "--master", table.Master, "--credential", admin, "hello", "-n", "6")
	if code := p.wait(); code != 0 || !strings.Contains(p.out.String(), "on n1") ||
		!strings.Contains(p.out.String(), "on n2") || !strings.Contains(p.out.String(), "on n3") {
		t.Fatalf("hello on the hosts dpvm up started: %d\n%s\n%s", code, p.out.String(), p.err.String())
	}

	down := dpvmIn("dpvm down", "down", hostfile, "--ssh", ssh, "--json")
	code := down.wait()
	downDone = true
	if code != 0 {
		t.Fatalf("dpvm down: %d\n%s\n%s", code, down.out.String(), down.err.String())
	}
	var res []struct{ Name, Result, Error string }
	if err := json.Unmarshal([]byte(down.out.String()), &res); err != nil || len(res) != 3 {
		t.Fatalf("dpvm down --json: %v\n%s", err, down.out.String())
	}
	for _, r := range res {
		if r.Error != "" || (r.Result != "stopped" && r.Result != "terminated" && r.Result != "killed") {
			t.Errorf("down %s: %+v", r.Name, r)
		}
	}
	for _, h := range state.Hosts {
		if !processGone(h.PID) {
			t.Errorf("daemon %s (pid %d) still running after dpvm down", h.Name, h.PID)
		}
		if _, err := os.Stat(h.PIDFile); !os.IsNotExist(err) {
			t.Errorf("PID file %s left: %v", h.PIDFile, err)
		}
	}
	if _, err := os.Stat(table.State); !os.IsNotExist(err) {
		t.Errorf("state file %s left after down: %v", table.State, err)
	}
	// The credentials up and add copied to the hosts are gone with them.
	for _, f := range []string{"n1.pem", "n2.pem", "n3.pem", pki.SecretFile} {
		if _, err := os.Stat(filepath.Join(remote, f)); !os.IsNotExist(err) {
			t.Errorf("credential %s left on the host after down: %v", f, err)
		}
	}
}

// processGone reports whether process pid has exited: absent, or a zombie
// no one has reaped.
func processGone(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && (f[2] == "Z" || f[2] == "X")
}

// TestUpFirstContact is 'dpvm up' as on fresh machines: their ssh host
// keys are not known yet, the hostfile names them by ssh aliases, and
// dpvm is not installed on them. Without --accept-new-host-keys up stops
// at once and names the flag; with it, a daemon that cannot start (its
// binary missing) fails up at once with the end of its log, not after
// --wait; with --copy the virtual machine comes up, dialled at the
// aliases' addresses.
func TestUpFirstContact(t *testing.T) {
	ns, dir, id := sshHosts(t, 2)
	knownHosts := filepath.Join(dir, "known_hosts")
	config := filepath.Join(dir, "ssh_config")
	cfg := fmt.Sprintf("Host alpha\n  HostName 10.213.0.1\nHost beta\n  HostName 10.213.0.2\nHost *\n  IdentityFile %s\n  UserKnownHostsFile %s\n  LogLevel ERROR\n  ConnectTimeout 5\n", id, knownHosts)
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// ssh's defaults but the configuration file: host keys are checked.
	ssh := "ssh -F " + config + " -o BatchMode=yes"
	creds := filepath.Join(dir, "creds")
	if code, _, errOut := dpvm(t, nil, "keygen", "--out", creds); code != 0 {
		t.Fatal(errOut)
	}
	hostfile := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hostfile, []byte("alpha name=n1 cores=2\nbeta name=n2 cores=2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	remote := filepath.Join(dir, "remote")
	env := []string{"XDG_STATE_HOME=" + filepath.Join(dir, "state")}
	var stdout string
	up := func(name string, args ...string) (int, string) {
		cmd := exec.Command("ip", ns.in(1, append([]string{"up", hostfile, "--credentials", creds, "--ssh", ssh, "--remote-dir", remote, "--wait", "90s"}, args...)...)...)
		cmd.Env = append(os.Environ(), env...)
		p := startCmd(t, name, cmd)
		code := p.wait()
		stdout = p.out.String()
		return code, p.out.String() + p.err.String()
	}

	// Unknown host keys: refused, with what to do.
	code, out := up("dpvm up (unknown keys)")
	if code == 0 || !strings.Contains(out, "host key verification failed") || !strings.Contains(out, "--accept-new-host-keys") {
		t.Fatalf("dpvm up with unknown host keys: %d\n%s", code, out)
	}

	// Keys accepted, but no dpvm there: the master's daemon exits at
	// start, and up says so with its log rather than waiting out --wait.
	code, out = up("dpvm up (no binary)", "--accept-new-host-keys", "--remote-bin", "/nonexistent/dpvm")
	if code == 0 || !strings.Contains(out, "the daemon exited") || !strings.Contains(out, "/nonexistent/dpvm") || strings.Contains(out, "deadline exceeded") {
		t.Fatalf("dpvm up with no binary on the hosts: %d\n%s", code, out)
	}
	if b, err := os.ReadFile(knownHosts); err != nil || !strings.Contains(string(b), "10.213.0.1") {
		t.Fatalf("known_hosts after --accept-new-host-keys: %v\n%s", err, b)
	}

	// With the binary copied: up, with the master dialled and joined at
	// alpha's address.
	code, out = up("dpvm up (copy)", "--accept-new-host-keys", "--copy", "--bin", dpvmBin, "--json")
	if code != 0 {
		t.Fatalf("dpvm up --copy: %d\n%s", code, out)
	}
	t.Cleanup(func() {
		cmd := exec.Command("ip", ns.in(1, "down", hostfile, "--stop-grace", "1s")...)
		cmd.Env = append(os.Environ(), env...)
		startCmd(t, "dpvm down", cmd).wait()
	})
	var table struct {
		Master string `json:"master"`
		Hosts  []struct {
			Name string `json:"name"`
			Addr string `json:"addr"`
		} `json:"hosts"`
	}
	if err := json.Unmarshal([]byte(stdout), &table); err != nil {
		t.Fatalf("dpvm up --json: %v\n%s", err, out)
	}
	if table.Master != "10.213.0.1:7070" || len(table.Hosts) != 2 || table.Hosts[1].Addr != "10.213.0.2:7070" {
		t.Fatalf("dpvm up through aliases: %+v", table)
	}
}

// TestReadmeManyHosts runs the front README's "With a hostfile" commands
// as written on three fresh hosts (network namespaces, each with an sshd,
// a login directory of its own and no dpvm): ssh knows none of their keys
// and reaches them by the aliases node1..node3 of an ssh configuration (an
// ssh on the PATH that reads it stands in for ~/.ssh/config), and the one
// dpvm on the PATH is the binary under test. The export line is the one
// 'dpvm up' prints, as the README says. The NPB run verifies, and after
// 'dpvm down' no daemon and no credential is left on the hosts.
func TestReadmeManyHosts(t *testing.T) {
	ns, dir, id := sshHosts(t, 3)
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "**With a hostfile.**")
	if ok {
		_, block, ok = strings.Cut(block, "```sh\n")
	}
	if !ok {
		t.Fatal("the README's \"With a hostfile\" has no sh block")
	}
	block, _, _ = strings.Cut(block, "```")

	// The user's ssh configuration and PATH.
	work := filepath.Join(dir, "work")
	bin := filepath.Join(dir, "bin")
	for _, d := range []string{work, bin} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	config := filepath.Join(dir, "ssh_config")
	var cfg strings.Builder
	for i := 1; i <= 3; i++ {
		fmt.Fprintf(&cfg, "Host node%d\n  HostName 10.213.0.%d\n", i, i)
	}
	fmt.Fprintf(&cfg, "Host *\n  IdentityFile %s\n  UserKnownHostsFile %s\n  LogLevel ERROR\n  ConnectTimeout 5\n", id, filepath.Join(dir, "known_hosts"))
	if err := os.WriteFile(config, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	sshPath, err := exec.LookPath("ssh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "ssh"), []byte("#!/bin/sh\nexec "+sshPath+" -F "+config+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dpvmBin, filepath.Join(bin, "dpvm")); err != nil {
		t.Fatal(err)
	}

	// The block as a script: each command as written (its comment
	// dropped), 'dpvm up' keeping what it prints, and the export line
	// replaced by the one up printed.
	script := []string{"set -eu"}
	comment := regexp.MustCompile(`\s+#\s.*$`)
	exported := false
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		line = comment.ReplaceAllString(line, "")
		switch {
		case strings.HasPrefix(line, "dpvm up "):
			script = append(script, line+" 2>up.err || { cat up.err >&2; exit 1; }", "cat up.err >&2")
		case strings.HasPrefix(line, "export DPVM_MASTER="):
			script = append(script, `line=$(grep -E '^ +export DPVM_MASTER=[^ ]+ DPVM_CREDENTIAL=' up.err)`, `eval "$line"`, `echo "$line" >&2`)
			exported = true
		case strings.HasPrefix(line, "dpvm down "):
			// What 'dpvm up' started, to check it is gone after down.
			script = append(script, `cat "$XDG_STATE_HOME"/dpvm/up-*.json > up.state`, line)
		default:
			script = append(script, line)
		}
	}
	if !exported {
		t.Fatalf("the README's block exports no DPVM_MASTER:\n%s", block)
	}
	cmd := exec.Command("ip", "netns", "exec", ns.names[0], "sh", "-c", strings.Join(script, "\n"))
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "XDG_STATE_HOME="+filepath.Join(dir, "state"))
	p := startCmd(t, "the README's commands", cmd)
	t.Cleanup(func() { // stops what is left should the script fail
		c := exec.Command("ip", "netns", "exec", ns.names[0], dpvmBin, "down", filepath.Join(work, "hosts.txt"), "--stop-grace", "1s")
		c.Env = cmd.Env
		c.Dir = work
		_ = c.Run()
	})
	if code := p.wait(); code != 0 {
		t.Fatalf("the README's commands exited %d\n%s\n%s", code, p.out.String(), p.err.String())
	}
	if out := p.out.String(); !strings.Contains(out, "SUCCESSFUL") || strings.Contains(out, "UNSUCCESSFUL") {
		t.Fatalf("the NPB run did not verify:\n%s", out)
	}
	if !strings.Contains(p.err.String(), "export DPVM_MASTER=10.213.0.1:7070 ") {
		t.Errorf("dpvm up printed no export of the master's address:\n%s", p.err.String())
	}
	// up's host table: the host IDs follow the hostfile.
	for i := 1; i <= 3; i++ {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^h%d +node%d( \(master\))? +10\.213\.0\.%d:7070 `, i, i, i)).MatchString(p.out.String()) {
			t.Errorf("dpvm up's table has no h%d node%d at 10.213.0.%d:\n%s", i, i, i, p.out.String())
		}
	}

	// Three daemons ran, one a host, and none is left; nor is a
	// credential.
	var st struct {
		Hosts []struct {
			Name string `json:"name"`
			PID  int    `json:"pid"`
		} `json:"hosts"`
	}
	sb, err := os.ReadFile(filepath.Join(work, "up.state"))
	if err == nil {
		err = json.Unmarshal(sb, &st)
	}
	if err != nil || len(st.Hosts) != 3 {
		t.Fatalf("dpvm up's state: %v %+v\n%s", err, st, sb)
	}
	for i, h := range st.Hosts {
		if h.Name != fmt.Sprintf("node%d", i+1) || h.PID <= 0 || !processGone(h.PID) {
			t.Errorf("host %d after down: %+v (gone: %v)", i+1, h, h.PID > 0 && processGone(h.PID))
		}
	}
	for i := 1; i <= 3; i++ {
		pems, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("home%d", i), ".dpvm", "*.pem"))
		if len(pems) != 0 {
			t.Errorf("credentials left on node%d: %v", i, pems)
		}
	}
}
