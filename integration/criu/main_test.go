package main

import (
	"os/exec"
	"strings"
	"testing"
)

// sshLog is the start of what `ssh -v` printed against the loopback sshd.
const sshLog = `OpenSSH_9.2p1 Debian-2+deb12u10, OpenSSL 3.0.19 27 Jan 2026
debug1: Reading configuration data /run/dpvm-criu-ssh.x/ssh_config
debug1: Local version string SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u10
debug1: kex: algorithm: sntrup761x25519-sha512
debug1: kex: host key algorithm: ssh-ed25519
debug1: kex: server->client cipher: aes256-gcm@openssh.com MAC: <implicit> compression: none
debug1: kex: client->server cipher: chacha20-poly1305@openssh.com MAC: <implicit> compression: none
`

func TestParseSSHLog(t *testing.T) {
	cipher, version := parseSSHLog(sshLog)
	if cipher != "chacha20-poly1305@openssh.com" || version != "OpenSSH_9.2p1 Debian-2+deb12u10" {
		t.Errorf("cipher %q, version %q", cipher, version)
	}
	if c, v := parseSSHLog("ssh: connect to host 127.0.0.1 port 2222: Connection refused\n"); c != "" || v != "" {
		t.Errorf("from a failed connection: cipher %q, version %q", c, v)
	}
}

// TestShellQuote runs the quoted words through sh: they come back as they
// were, spaces, quotes and all.
func TestShellQuote(t *testing.T) {
	words := []string{"/tmp/dpvm-criu-1/peer/images-0", "a b", "it's", `"$HOME"; rm -rf x`, ""}
	var quoted []string
	for _, w := range words {
		quoted = append(quoted, shellQuote(w))
	}
	out, err := exec.Command("sh", "-c", `for w in `+strings.Join(quoted, " ")+`; do printf '%s\n' "$w"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), strings.Join(words, "\n")+"\n"; got != want {
		t.Errorf("sh gave %q, want %q", got, want)
	}
}

func TestParseSizes(t *testing.T) {
	got, err := parseSizes("0, 16,256,1024")
	if err != nil || len(got) != 4 || got[1] != 16 || got[3] != 1024 {
		t.Errorf("parseSizes: %v, %v", got, err)
	}
	for _, bad := range []string{"", "x", "-1", "5000", "NaN", "16,16"} {
		if _, err := parseSizes(bad); err == nil {
			t.Errorf("parseSizes(%q) accepted", bad)
		}
	}
}
