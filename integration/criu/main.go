// Command criubench measures CRIU's same-host checkpoint and restore of a
// process holding a given amount of memory, the transparent counterpart of
// dpvm's application-level migration (`dpvm bench migrate`).
//
//	criubench -criu 'CMD' [-sizes 0,16,256,1024] [-reps 3] [-dir DIR] [-seed 1]
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
// It prints one JSON line per size on stdout:
//
//	{"tool":"criu","version":"4.1.1","size_mib":256,"dump_s":…,"restore_s":…,
//	 "seconds":…,"image_bytes":…,"reps":3,"verified":true,"dir":"/tmp/…"}
//
// dump_s, restore_s and seconds (their sum per repetition) are medians of
// the repetitions' wall-clock times of the criu commands. `dpvm bench
// migrate --criu FILE` reads these lines. CRIU needs root; the images are
// written to DIR (a new directory under $TMPDIR by default), on the same
// file system as dpvm's shared directory, and removed between repetitions
// (not timed). integration/criu/run.sh installs CRIU and runs this.
package main

import (
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

// Line is one size's result, as printed.
type Line struct {
	Tool       string  `json:"tool"`
	Version    string  `json:"version,omitempty"`
	SizeMiB    float64 `json:"size_mib"`
	DumpS      float64 `json:"dump_s"`
	RestoreS   float64 `json:"restore_s"`
	Seconds    float64 `json:"seconds"`
	ImageBytes int64   `json:"image_bytes"`
	Reps       int     `json:"reps"`
	Verified   bool    `json:"verified"`
	Dir        string  `json:"dir"`
}

func measure(args []string) error {
	fl := flag.NewFlagSet("criubench", flag.ContinueOnError)
	criu := fl.String("criu", "criu", "the criu command (split at spaces)")
	sizes := fl.String("sizes", "0,16,256,1024", "state sizes in MiB, comma-separated")
	reps := fl.Int("reps", 3, "dump+restore repetitions per size")
	dir := fl.String("dir", "", "where the images go (default: a new directory under $TMPDIR)")
	seed := fl.Uint64("seed", 1, "seed of the state's pattern")
	timeout := fl.Duration("timeout", 5*time.Minute, "bound on each criu command")
	if err := fl.Parse(args); err != nil {
		return err
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
	enc := json.NewEncoder(os.Stdout)
	for _, s := range ss {
		l, err := measureSize(cmd, self, *dir, s, *reps, *seed, *timeout)
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

func measureSize(cmd []string, self, dir string, sizeMiB float64, reps int, seed uint64, timeout time.Duration) (Line, error) {
	l := Line{Tool: "criu", SizeMiB: sizeMiB, Reps: reps, Dir: dir}
	work, err := os.MkdirTemp(dir, "holder-")
	if err != nil {
		return l, err
	}
	defer os.RemoveAll(work)
	n := int(sizeMiB * (1 << 20) / 8)
	h := exec.Command(self, "hold", "-n", strconv.Itoa(n), "-seed", strconv.FormatUint(seed, 10), "-dir", work)
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
	var dumps, restores, totals []float64
	for r := range reps {
		images := filepath.Join(dir, fmt.Sprintf("images-%d", r))
		if err := os.Mkdir(images, 0o700); err != nil {
			return l, err
		}
		t0 := time.Now()
		if err := runCRIU(cmd, timeout, "dump", "-t", strconv.Itoa(pid), "-D", images, "-o", "dump.log"); err != nil {
			return l, fmt.Errorf("dump %d: %w (log: %s)", r+1, err, tail(filepath.Join(images, "dump.log")))
		}
		t1 := time.Now()
		// The dumped holder has exited: reap it so that its PID is free.
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
			return l, fmt.Errorf("reap the dumped holder: %w", err)
		}
		l.ImageBytes = dirBytes(images)
		t2 := time.Now()
		if err := runCRIU(cmd, timeout, "restore", "-D", images, "-d", "-o", "restore.log"); err != nil {
			return l, fmt.Errorf("restore %d: %w (log: %s)", r+1, err, tail(filepath.Join(images, "restore.log")))
		}
		t3 := time.Now()
		if err := syscall.Kill(pid, 0); err != nil {
			return l, fmt.Errorf("restore %d: process %d is not there: %w", r+1, pid, err)
		}
		dumps = append(dumps, t1.Sub(t0).Seconds())
		restores = append(restores, t3.Sub(t2).Seconds())
		totals = append(totals, t1.Sub(t0).Seconds()+t3.Sub(t2).Seconds())
		if err := os.RemoveAll(images); err != nil {
			return l, err
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
	l.DumpS, l.RestoreS, l.Seconds = median(dumps), median(restores), median(totals)
	return l, nil
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

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
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
	for i := range data {
		data[i] = patternAt(*seed, i)
	}
	if err := publish(*dir, "ready", "ok"); err != nil {
		return err
	}
	for range sig {
		bad := 0
		for i, v := range data {
			if math.Float64bits(v) != math.Float64bits(patternAt(*seed, i)) {
				bad++
			}
		}
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

// patternAt is element i of the pattern of seed, as in dpvm bench migrate:
// splitmix64 of the index, as a float64 in [0, 1).
func patternAt(seed uint64, i int) float64 {
	z := seed*0x9e3779b97f4a7c15 + uint64(i)*0xbf58476d1ce4e5b9
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}
