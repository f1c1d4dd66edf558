package jobset

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestLatestRecord: the latest record names the newest complete set and
// outlives it; it is refused altered or lying in another job's directory;
// Predecessor links a set to the newest authentic set before it.
func TestLatestRecord(t *testing.T) {
	jobDir := newJobDir(t)
	if _, err := ReadLatestRecord(jobDir, testKey, nil); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no record: %v", err)
	}
	set1, _ := makeSet(t, jobDir, 1, 2, true)
	set2, _ := makeSet(t, jobDir, 2, 2, true)
	makeSet(t, jobDir, 3, 2, false) // incomplete: no link to it
	for _, c := range []struct{ seq, want uint64 }{{1, 0}, {2, 1}, {3, 2}, {4, 2}} {
		l, err := Predecessor(jobDir, c.seq, testKey, nil)
		must(t, err)
		want := Link{}
		if c.want != 0 {
			b, err := os.ReadFile(filepath.Join(SetDir(jobDir, c.want), ManifestName))
			must(t, err)
			want = Link{Seq: c.want, SHA256: sum(b)}
		}
		if l != want {
			t.Fatalf("predecessor of %d: %d %x, want %d", c.seq, l.Seq, l.SHA256, c.want)
		}
	}
	must(t, WriteLatestRecord(set1))
	must(t, WriteLatestRecord(set2))
	manifest2, err := os.ReadFile(filepath.Join(set2, ManifestName))
	must(t, err)
	must(t, os.RemoveAll(set2))
	rec, err := ReadLatestRecord(jobDir, testKey, nil)
	must(t, err)
	if rec != (Link{Seq: 2, SHA256: sum(manifest2)}) {
		t.Fatalf("record after set 2 was deleted: %d %x", rec.Seq, rec.SHA256)
	}
	path := filepath.Join(jobDir, LatestName)
	fi, err := os.Stat(path)
	must(t, err)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("record mode %#o", fi.Mode().Perm())
	}
	// In another job's directory.
	otherDir := filepath.Join(filepath.Dir(jobDir), jobPrefix+"other")
	must(t, os.Mkdir(otherDir, 0o700))
	must(t, os.WriteFile(filepath.Join(otherDir, LatestName), manifest2, 0o600))
	_, err = ReadLatestRecord(otherDir, testKey, nil)
	wantErr(t, err, []error{ErrTampered}, `records job "pi"`)
	// Altered.
	flip(t, path, headerLen+KeyIDSize+3)
	_, err = ReadLatestRecord(jobDir, testKey, nil)
	wantErr(t, err, []error{ErrTampered})
}
