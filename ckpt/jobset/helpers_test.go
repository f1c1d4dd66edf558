package jobset

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testKey is the key the tests authenticate under.
var testKey = bytes.Repeat([]byte{0x5a}, KeySize)

// created is the time the tests' manifests carry.
var created = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// writeTask writes a task checkpoint as the daemons do (temporary file of
// mode 0600, rename) through a Summer and returns its entry.
func writeTask(t testing.TB, setDir, tid string, content []byte) Entry {
	t.Helper()
	e := Entry{TID: tid, Type: "test.worker", Host: "h1", File: "task-" + strings.ReplaceAll(tid, ":", "-") + ".ckpt"}
	f, err := os.CreateTemp(setDir, ".tmp-task-*")
	must(t, err)
	must(t, f.Chmod(0o600))
	s := NewSummer(f)
	_, err = s.Write(content)
	must(t, err)
	must(t, f.Close())
	must(t, os.Rename(f.Name(), filepath.Join(setDir, e.File)))
	s.Fill(&e)
	return e
}

// makeSet writes set seq of jobDir with n tasks and, when complete, its
// manifest. The tasks' contents depend on seq and the task's index.
func makeSet(t testing.TB, jobDir string, seq uint64, n int, complete bool) (string, *Manifest) {
	t.Helper()
	dir, err := NewSet(jobDir, seq)
	must(t, err)
	m := &Manifest{
		Job:     strings.TrimPrefix(filepath.Base(jobDir), jobPrefix),
		Seq:     seq,
		Created: created.Add(time.Duration(seq) * time.Minute),
		Root:    "t1:1",
		Program: "pi",
		Args:    []string{"-n", "1000"},
	}
	for i := range n {
		content := bytes.Repeat(fmt.Appendf(nil, "set %d task %d;", seq, i), 10+i)
		m.Entries = append(m.Entries, writeTask(t, dir, fmt.Sprintf("t%d:%d", i%3+1, i+1), content))
	}
	if complete {
		must(t, WriteManifest(dir, m, testKey))
	}
	return dir, m
}

// newJobDir returns the directory of job "pi" under a fresh root.
func newJobDir(t testing.TB) string {
	t.Helper()
	dir, err := JobDir(t.TempDir(), "pi")
	must(t, err)
	return dir
}

// wantErr fails unless err wraps every sentinel and mentions every
// fragment.
func wantErr(t testing.TB, err error, sentinels []error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", sentinels)
	}
	for _, s := range sentinels {
		if !errors.Is(err, s) {
			t.Errorf("error %q does not wrap %q", err, s)
		}
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not mention %q", err, f)
		}
	}
}

// flip inverts one byte of the file at path.
func flip(t testing.TB, path string, at int) {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	b[at] ^= 0xff
	must(t, os.WriteFile(path, b, 0o600))
}

func sum(b []byte) [32]byte { return sha256.Sum256(b) }

// fixedZone is a location other than UTC.
var fixedZone = time.FixedZone("UTC+5:30", 5*3600+1800)
