// Command criubench measures CRIU's checkpoint and restore of a process
// holding a given amount of memory, the transparent counterpart of dpvm's
// application-level migration (`dpvm bench migrate`): on the same host, and
// between hosts, with the images copied to the other host over ssh.
//
//	criubench -criu 'CMD' [-sizes 0,16,256,1024] [-reps 3] [-dir DIR] [-seed 1]
//	          [-ssh-config FILE -peer HOST [-peer-dir DIR] [-copy tar|scp]]
//
// For each size it starts a holder (this program, `criubench hold`): a
// process in a session of its own that fills a []float64 of that many MiB
// with a seeded pattern, the same state `dpvm bench migrate` moves. Then,
// for each repetition, `CMD dump -t PID -D IMAGES` checkpoints the holder
// (CRIU stops it and writes its memory to image files; the process ends),
// and `CMD restore -D IMAGES -d` brings it back in the same place. After the
// last restore the holder checks its whole state against the pattern (on
// SIGUSR1) and the run fails if one element differs.
//
// With -ssh-config and -peer, each repetition also moves the holder
// "between hosts", as an administrator would with CRIU alone: `criu dump`
// to a directory, an encrypted copy of that directory to the other host
// (`scp -F FILE -r IMAGES HOST:DST` with -copy scp, the default, or
// `tar -C IMAGES -cf - . | ssh -F FILE HOST 'mkdir -p DST && tar -C DST
// -xf -'` with -copy tar; ssh's default cipher, no compression), then `criu restore -D DST
// -d` from the copied directory. The other host is this one: ssh goes to
// an sshd on the loopback interface (run.sh starts one), and DST is under
// -peer-dir. The two measurements alternate within each repetition (same
// host first in odd ones, between hosts first in even ones); the holder
// goes on from wherever it was restored.
//
// It prints one JSON line per size on stdout:
//
//	{"tool":"criu","version":"4.1.1","size_mib":256,"dump_s":…,"restore_s":…,
//	 "seconds":…,"image_bytes":…,"reps":3,"verified":true,"dir":"/tmp/…",
//	 "remote_dump_s":…,"copy_s":…,"remote_restore_s":…,"remote_s":…,
//	 "copy_via":"scp","cipher":"chacha20-poly1305@openssh.com",
//	 "ssh":"OpenSSH_9.2p1 …"}
//
// dump_s, restore_s and seconds (their sum per repetition) are medians of
// the repetitions' wall-clock times of the same-host criu commands.
// remote_dump_s, copy_s and remote_restore_s are the medians of the three
// phases between hosts and remote_s the median of their sum per repetition;
// copy_via says how the images were copied ("tar|ssh" or "scp"), cipher is
// the cipher ssh negotiated (client to server) and ssh the client's
// version. The remote fields are left out without -peer. `dpvm bench
// migrate --criu FILE` reads these lines. CRIU needs root; the images are
// written to DIR (a new directory under $TMPDIR by default), on the same
// file system as dpvm's shared directory, and removed between repetitions
// (not timed). integration/criu/run.sh installs CRIU, starts the sshd and
// runs this.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dpvm/dpvm/daemon/bench"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "hold" {
		if err := hold(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "criubench hold:", err)
			os.Exit(1)
		}
		return
	}
	if err := measure(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "criubench:", err)
		os.Exit(1)
	}
}

// config is what every size's measurement needs.
type config struct {
	criu    []string // the criu command
	self    string   // this program, started as the holder
	dir     string   // where images go
	reps    int
	seed    uint64
	timeout time.Duration
	peer    *peer // nil: same host only
}

// peer is "the other host": an sshd reached through an ssh configuration.
type peer struct {
	sshConfig string // ssh -F
	host      string // its Host entry
	dir       string // where it keeps the copied images
	via       string // "tar" or "scp"
	cipher    string // the cipher ssh negotiates
	version   string // ssh -V
}

func measure(args []string) error {
	fl := flag.NewFlagSet("criubench", flag.ContinueOnError)
	criu := fl.String("criu", "criu", "the criu command (split at spaces)")
	sizes := fl.String("sizes", "0,16,256,1024", "state sizes in MiB, comma-separated")
	reps := fl.Int("reps", 3, "dump+restore repetitions per size")
	dir := fl.String("dir", "", "where the images go (default: a new directory under $TMPDIR)")
	seed := fl.Uint64("seed", 1, "seed of the state's pattern")
	timeout := fl.Duration("timeout", 5*time.Minute, "bound on each criu command and each copy")
	sshConfig := fl.String("ssh-config", "", "ssh configuration file (ssh -F) with a Host entry for -peer")
	peerHost := fl.String("peer", "", "the other host's name in -ssh-config: also measure dump, copy over ssh, restore")
	peerDir := fl.String("peer-dir", "", "where the other host keeps the copied images (default: DIR/peer)")
	copyVia := fl.String("copy", "scp", "how the images are copied: scp (scp -r) or tar (tar | ssh HOST tar -x)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fl.Args())
	}
	if (*sshConfig == "") != (*peerHost == "") {
		return errors.New("-ssh-config and -peer go together")
	}
	if *copyVia != "tar" && *copyVia != "scp" {
		return fmt.Errorf("-copy %q: want tar or scp", *copyVia)
	}
	if *reps < 1 {
		return fmt.Errorf("-reps %d: need at least one", *reps)
	}
	ss, err := parseSizes(*sizes)
	if err != nil {
		return err
	}
	cmd := strings.Fields(*criu)
	if len(cmd) == 0 {
		return errors.New("-criu is empty")
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "dpvm-criu-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	// Restored holders are children of criu, which exits (-d): as a
	// subreaper this process inherits them and can reap them.
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", e)
	}
	version := criuVersion(cmd)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	c := &config{criu: cmd, self: self, dir: *dir, reps: *reps, seed: *seed, timeout: *timeout}
	if *peerHost != "" {
		p := &peer{sshConfig: *sshConfig, host: *peerHost, dir: *peerDir, via: *copyVia}
		if p.dir == "" {
			p.dir = filepath.Join(*dir, "peer")
		}
		if err := p.setup(*timeout); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "criu: between hosts: dump, %s to %s (%s, cipher %s) into %s, restore\n",
			p.viaName(), p.host, p.version, p.cipher, p.dir)
		c.peer = p
	}
	enc := json.NewEncoder(os.Stdout)
	for _, s := range ss {
		l, err := c.measureSize(s)
		if err != nil {
			return fmt.Errorf("%v MiB: %w", s, err)
		}
		l.Version = version
		if err := enc.Encode(l); err != nil {
			return err
		}
	}
	return nil
}

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

func parseSizes(s string) ([]float64, error) {
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || math.IsNaN(v) || v < 0 || v > 4096 {
			return nil, fmt.Errorf("size %q: want a number of MiB in 0..4096", f)
		}
		if slices.Contains(out, v) {
			return nil, fmt.Errorf("size %v MiB is given twice", v)
		}
		out = append(out, v)
	}
	return out, nil
}

func criuVersion(cmd []string) string {
	out, err := exec.Command(cmd[0], append(cmd[1:], "--version")...).Output()
	if err != nil {
		return ""
	}
	for l := range strings.SplitSeq(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "Version: "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func (c *config) measureSize(sizeMiB float64) (bench.CRIULine, error) {
	l := bench.CRIULine{Tool: "criu", CRIURow: bench.CRIURow{SizeMiB: sizeMiB, Reps: c.reps}, Dir: c.dir}
	work, err := os.MkdirTemp(c.dir, "holder-")
	if err != nil {
		return l, err
	}
	defer os.RemoveAll(work)
	n := int(sizeMiB * (1 << 20) / 8)
	h := exec.Command(c.self, "hold", "-n", strconv.Itoa(n), "-seed", strconv.FormatUint(c.seed, 10), "-dir", work)
	h.Dir = work
	h.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := h.Start(); err != nil {
		return l, fmt.Errorf("start the holder: %w", err)
	}
	pid := h.Process.Pid
	defer func() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
	}()
	if err := waitFile(filepath.Join(work, "ready"), time.Minute); err != nil {
		return l, fmt.Errorf("holder: %w", err)
	}
	var dumps, restores, totals, rdumps, copies, rrestores, rtotals []float64
	for r := range c.reps {
		local := func() error {
			images := filepath.Join(c.dir, fmt.Sprintf("images-%d", r))
			d, _, rs, size, err := c.cycle(pid, images, nil)
			if err != nil {
				return fmt.Errorf("same host, repetition %d: %w", r+1, err)
			}
			l.ImageBytes = size
			dumps, restores, totals = append(dumps, d), append(restores, rs), append(totals, d+rs)
			return nil
		}
		remote := func() error {
			if c.peer == nil {
				return nil
			}
			images := filepath.Join(c.dir, fmt.Sprintf("images-%d-out", r))
			dst := filepath.Join(c.peer.dir, fmt.Sprintf("images-%d", r))
			d, cp, rs, _, err := c.cycle(pid, images, func() (string, error) {
				return dst, c.peer.copy(images, dst, c.timeout)
			})
			if err != nil {
				return fmt.Errorf("between hosts, repetition %d: %w", r+1, err)
			}
			rdumps, copies, rrestores = append(rdumps, d), append(copies, cp), append(rrestores, rs)
			rtotals = append(rtotals, d+cp+rs)
			return nil
		}
		steps := []func() error{local, remote}
		if r%2 == 1 {
			steps[0], steps[1] = remote, local
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return l, err
			}
		}
	}
	bad, err := check(pid, work)
	if err != nil {
		return l, err
	}
	if bad != 0 {
		return l, fmt.Errorf("%d of %d elements differ after the restores", bad, n)
	}
	l.Verified = true
	l.DumpS, l.RestoreS, l.Seconds = bench.Median(dumps), bench.Median(restores), bench.Median(totals)
	if c.peer != nil {
		l.RemoteDumpS, l.CopyS, l.RemoteRestoreS, l.RemoteS = bench.Median(rdumps), bench.Median(copies), bench.Median(rrestores), bench.Median(rtotals)
		l.CopyVia, l.Cipher, l.SSH = c.peer.viaName(), c.peer.cipher, c.peer.version
	}
	return l, nil
}

// cycle dumps the holder pid to images, then, if move is given, runs it to
// bring the images to where the restore reads them (it returns that
// directory), and restores the holder from there. It returns the seconds
// of the dump, the move and the restore, and the bytes of the image files.
// The image directories are removed afterwards (not timed).
func (c *config) cycle(pid int, images string, move func() (string, error)) (dump, moved, restore float64, size int64, err error) {
	if err := os.Mkdir(images, 0o700); err != nil {
		return 0, 0, 0, 0, err
	}
	defer os.RemoveAll(images)
	t0 := time.Now()
	if err := runCRIU(c.criu, c.timeout, "dump", "-t", strconv.Itoa(pid), "-D", images, "-o", "dump.log"); err != nil {
		return 0, 0, 0, 0, fmt.Errorf("dump: %w (log: %s)", err, tail(filepath.Join(images, "dump.log")))
	}
	dump = time.Since(t0).Seconds()
	// The dumped holder has exited: reap it so that its PID is free.
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		return 0, 0, 0, 0, fmt.Errorf("reap the dumped holder: %w", err)
	}
	size = dirBytes(images)
	from := images
	if move != nil {
		t1 := time.Now()
		dst, err := move()
		if dst != "" {
			defer os.RemoveAll(dst)
		}
		if err != nil {
			return 0, 0, 0, 0, err
		}
		moved = time.Since(t1).Seconds()
		if got := dirBytes(dst); got != size {
			return 0, 0, 0, 0, fmt.Errorf("copy: %d bytes of images arrived, %d were sent", got, size)
		}
		from = dst
	}
	t2 := time.Now()
	if err := runCRIU(c.criu, c.timeout, "restore", "-D", from, "-d", "-o", "restore.log"); err != nil {
		return 0, 0, 0, 0, fmt.Errorf("restore: %w (log: %s)", err, tail(filepath.Join(from, "restore.log")))
	}
	restore = time.Since(t2).Seconds()
	if err := syscall.Kill(pid, 0); err != nil {
		return 0, 0, 0, 0, fmt.Errorf("restore: process %d is not there: %w", pid, err)
	}
	return dump, moved, restore, size, nil
}

// ssh runs ssh -F config host with args, bounded by timeout, and returns
// its standard error.
func (p *peer) ssh(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh", append([]string{"-F", p.sshConfig}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return stderr.String(), fmt.Errorf("ssh %s: %w: %s", strings.Join(args, " "), err, lastLine(stderr.String()))
	}
	return stderr.String(), nil
}

// setup checks that the other host answers, makes its image directory and
// finds the cipher ssh negotiates with it and the client's version.
func (p *peer) setup(timeout time.Duration) error {
	log, err := p.ssh(timeout, "-v", p.host, "mkdir -p "+shellQuote(p.dir))
	if err != nil {
		return fmt.Errorf("the other host: %w", err)
	}
	p.cipher, p.version = parseSSHLog(log)
	if p.cipher == "" {
		return errors.New("the other host: ssh -v did not say which cipher it negotiated")
	}
	return nil
}

// parseSSHLog finds, in what `ssh -v` printed, the cipher negotiated from
// client to server and the client's version ("OpenSSH_9.2p1 Debian-2").
func parseSSHLog(log string) (cipher, version string) {
	for l := range strings.SplitSeq(log, "\n") {
		l = strings.TrimSpace(l)
		if _, rest, ok := strings.Cut(l, "kex: client->server cipher: "); ok {
			cipher, _, _ = strings.Cut(rest, " ")
		}
		if strings.HasPrefix(l, "OpenSSH_") && version == "" {
			version, _, _ = strings.Cut(l, ",")
		}
	}
	return cipher, version
}

// viaName is how the JSON line names the copy.
func (p *peer) viaName() string {
	if p.via == "tar" {
		return "tar|ssh"
	}
	return "scp"
}

// copy copies the directory src to dst on the other host: a tar stream
// through ssh, or scp -r.
func (p *peer) copy(src, dst string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var errTar, errSSH bytes.Buffer
	if p.via == "scp" {
		cmd := exec.CommandContext(ctx, "scp", "-F", p.sshConfig, "-q", "-r", src, p.host+":"+dst)
		cmd.Stderr = &errSSH
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("scp: %w: %s", err, lastLine(errSSH.String()))
		}
		return nil
	}
	tar := exec.CommandContext(ctx, "tar", "-C", src, "-cf", "-", ".")
	ssh := exec.CommandContext(ctx, "ssh", "-F", p.sshConfig, p.host,
		"mkdir -p "+shellQuote(dst)+" && tar -C "+shellQuote(dst)+" -xf -")
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	tar.Stdout, ssh.Stdin, tar.Stderr, ssh.Stderr = pw, pr, &errTar, &errSSH
	errStart := tar.Start()
	if errStart == nil {
		if errStart = ssh.Start(); errStart != nil {
			cancel()
			_ = tar.Wait()
		}
	}
	// Only the children hold the pipe now: tar gets EPIPE if ssh ends
	// early, and ssh sees the end of the stream when tar is done.
	pw.Close()
	pr.Close()
	if errStart != nil {
		return fmt.Errorf("tar | ssh: %w", errStart)
	}
	errS := ssh.Wait()
	errT := tar.Wait()
	switch {
	case errT != nil:
		return fmt.Errorf("tar -c: %w: %s", errT, lastLine(errTar.String()))
	case errS != nil:
		return fmt.Errorf("ssh tar -x: %w: %s", errS, lastLine(errSSH.String()))
	}
	return nil
}

// shellQuote quotes s for the remote shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// runCRIU runs one criu command. CRIU_FAULT=130 (no hardware breakpoints)
// is passed on from the environment; see run.sh.
func runCRIU(cmd []string, timeout time.Duration, args ...string) error {
	c := exec.Command(cmd[0], append(cmd[1:], args...)...)
	c.Stdin, c.Stdout, c.Stderr = nil, nil, nil
	if err := c.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		_ = c.Process.Kill()
		<-done
		return fmt.Errorf("criu %s did not finish within %v", args[0], timeout)
	}
}

// check asks the holder to verify its state and returns how many elements
// differ.
func check(pid int, work string) (int, error) {
	res := filepath.Join(work, "checked")
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return 0, fmt.Errorf("ask the holder to check: %w", err)
	}
	if err := waitFile(res, time.Minute); err != nil {
		return 0, fmt.Errorf("holder check: %w", err)
	}
	b, err := os.ReadFile(res)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// waitFile waits until path exists (the holder writes it under another
// name and renames it, so it is complete).
func waitFile(path string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %v", path, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.HasSuffix(d.Name(), ".img") {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-3):], " | ")
}

// hold is the checkpointed process: it fills its state, says so, and
// checks the state whenever it gets SIGUSR1, writing the number of
// elements that differ.
func hold(args []string) error {
	fl := flag.NewFlagSet("hold", flag.ContinueOnError)
	n := fl.Int("n", 0, "float64 elements")
	seed := fl.Uint64("seed", 1, "pattern seed")
	dir := fl.String("dir", ".", "where to write ready and checked")
	if err := fl.Parse(args); err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	data := make([]float64, *n)
	bench.FillPattern(data, *seed)
	if err := publish(*dir, "ready", "ok"); err != nil {
		return err
	}
	for range sig {
		bad, _ := bench.CheckPattern(data, *seed)
		if err := publish(*dir, "checked", strconv.Itoa(bad)); err != nil {
			return err
		}
	}
	return nil
}

func publish(dir, name, content string) error {
	tmp := filepath.Join(dir, "."+name)
	if err := os.WriteFile(tmp, []byte(content+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}
