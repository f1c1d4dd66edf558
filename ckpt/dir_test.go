package ckpt

import (
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/dpvm/dpvm/task"
)

func saveTask(d Dir, name string, meta *Meta, state task.Task) (int64, error) {
	return d.Save(name, func(w io.Writer) error {
		_, err := Write(w, testKey, meta, state)
		return err
	})
}

func loadTask(t *testing.T, d Dir, name string) (*Meta, task.Task) {
	t.Helper()
	f, err := d.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, st, err := Read(f, testKey)
	if err != nil {
		t.Fatal(err)
	}
	return m, st
}

// onlyFiles lists the directory, failing on leftover temporary files.
func onlyFiles(t *testing.T, dir string, want ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("directory holds %q, want %q", got, want)
	}
}

func TestDirRoundTrip(t *testing.T) {
	d := Dir{Path: t.TempDir()}
	state := randNumbers(rand.New(rand.NewPCG(20, 20)), 5000)
	n, err := saveTask(d, "t1:5.ckpt", sampleMeta(), state)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(d.Path, "t1:5.ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != n {
		t.Fatalf("Save returned %d, the file has %d bytes", n, fi.Size())
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	onlyFiles(t, d.Path, "t1:5.ckpt")
	_, got := loadTask(t, d, "t1:5.ckpt")
	if !reflect.DeepEqual(got, state) {
		t.Fatal("restored state differs")
	}
	if err := d.Remove("t1:5.ckpt"); err != nil {
		t.Fatal(err)
	}
	onlyFiles(t, d.Path)
	if err := d.Remove("t1:5.ckpt"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("removing a missing file: %v", err)
	}
	if _, err := d.Open("t1:5.ckpt"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("opening a missing file: %v", err)
	}
}

// TestDirAtomicReplace: a failed save leaves the previous file whole; a
// successful one replaces it.
func TestDirAtomicReplace(t *testing.T) {
	d := Dir{Path: t.TempDir()}
	v1 := &big{Iter: 1, Data: []float64{1, 2, 3}}
	v2 := &big{Iter: 2, Data: make([]float64, 100000)}
	if _, err := saveTask(d, "c", sampleMeta(), v1); err != nil {
		t.Fatal(err)
	}
	// The disk fills up half-way through the second version.
	_, err := d.Save("c", func(w io.Writer) error {
		_, err := Write(&failWriter{w: w, left: 300000, err: syscall.ENOSPC}, testKey, sampleMeta(), v2)
		return err
	})
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "save c") {
		t.Fatalf("full disk: %v", err)
	}
	onlyFiles(t, d.Path, "c")
	if _, got := loadTask(t, d, "c"); !reflect.DeepEqual(got, v1) {
		t.Fatal("the previous version was damaged by a failed save")
	}
	// A writer that fails outright, before writing anything.
	if _, err := d.Save("c", func(io.Writer) error { return errors.New("no state") }); err == nil {
		t.Fatal("a failing writer's save succeeded")
	}
	onlyFiles(t, d.Path, "c")
	if _, err := saveTask(d, "c", sampleMeta(), v2); err != nil {
		t.Fatal(err)
	}
	onlyFiles(t, d.Path, "c")
	if _, got := loadTask(t, d, "c"); !reflect.DeepEqual(got, v2) {
		t.Fatal("the new version did not replace the old")
	}
}

func TestDirUnwritable(t *testing.T) {
	base := t.TempDir()
	// A directory under a regular file cannot hold files, root or not.
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := saveTask(Dir{Path: filepath.Join(file, "sub")}, "c", sampleMeta(), &empty{}); err == nil {
		t.Fatal("saved under a regular file")
	}
	if _, err := saveTask(Dir{Path: filepath.Join(base, "missing")}, "c", sampleMeta(), &empty{}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing directory: %v", err)
	}
	// Permissions bind only non-root users.
	if os.Geteuid() != 0 {
		ro := filepath.Join(base, "ro")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(ro, 0o700)
		if _, err := saveTask(Dir{Path: ro}, "c", sampleMeta(), &empty{}); !errors.Is(err, fs.ErrPermission) {
			t.Fatalf("read-only directory: %v", err)
		}
	}
}

func TestDirNames(t *testing.T) {
	d := Dir{Path: t.TempDir()}
	for _, name := range []string{"", ".", "..", "a/b", "../x", ".hidden", "a\x00b", `a\b`} {
		if _, err := saveTask(d, name, sampleMeta(), &empty{}); !errors.Is(err, ErrName) {
			t.Errorf("Save(%q): %v, want ErrName", name, err)
		}
		if _, err := d.Open(name); !errors.Is(err, ErrName) {
			t.Errorf("Open(%q): %v, want ErrName", name, err)
		}
		if err := d.Remove(name); !errors.Is(err, ErrName) {
			t.Errorf("Remove(%q): %v, want ErrName", name, err)
		}
	}
	if err := os.Mkdir(filepath.Join(d.Path, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Open("sub"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("opening a directory: %v", err)
	}
}

func TestDirRemoveTemps(t *testing.T) {
	d := Dir{Path: t.TempDir()}
	if _, err := saveTask(d, "keep", sampleMeta(), &empty{}); err != nil {
		t.Fatal(err)
	}
	// What a Save interrupted by a crash leaves behind.
	if err := os.WriteFile(filepath.Join(d.Path, tempPrefix+"c-123"), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := d.RemoveTemps()
	if err != nil || n != 1 {
		t.Fatalf("RemoveTemps: %d, %v", n, err)
	}
	onlyFiles(t, d.Path, "keep")
}

// TestDirTampered: a checkpoint file altered on the shared disk is refused.
func TestDirTampered(t *testing.T) {
	d := Dir{Path: t.TempDir()}
	if _, err := saveTask(d, "c", sampleMeta(), &big{Data: make([]float64, 1000)}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d.Path, "c")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-100] ^= 0x10
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := d.Open("c")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, _, err := Read(f, testKey); !errors.Is(err, ErrTampered) {
		t.Fatalf("tampered file: %v", err)
	}
}

// TestDirTransientGMAC saves a GMAC checkpoint of 20 MiB (beyond the point
// where Save starts writeback) in a Transient directory and reads it back;
// the file then flipped in its state is refused as tampered.
func TestDirTransientGMAC(t *testing.T) {
	d := Dir{Path: t.TempDir(), Transient: true}
	st := &big{Iter: 3, Data: make([]float64, 20<<20/8)}
	for i := range st.Data {
		st.Data[i] = float64(i) * 0.5
	}
	n, err := d.Save("g.ckpt", func(w io.Writer) error {
		_, err := WriteWith(w, testKey, sampleMeta(), st, WriteOptions{Auth: AuthGMAC, Rand: seededRand(21)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	onlyFiles(t, d.Path, "g.ckpt")
	_, got := loadTask(t, d, "g.ckpt")
	if !reflect.DeepEqual(got, st) {
		t.Fatal("restored state differs")
	}
	path := filepath.Join(d.Path, "g.ckpt")
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) != n {
		t.Fatalf("file of %d bytes (%v), Save said %d", len(b), err, n)
	}
	b[n/2] ^= 0x10
	must(t, os.WriteFile(path, b, 0o600))
	f, err := d.Open("g.ckpt")
	must(t, err)
	defer f.Close()
	if _, _, err := Read(f, testKey); !errors.Is(err, ErrTampered) {
		t.Fatalf("flipped file: %v", err)
	}
}

// TestDirSaveThenSync: the file is in place, complete and 0600 before it
// is synced, a reader may remove it before the sync, and sync succeeds
// either way (once); for a durable directory the sync covers the
// directory too. A failing write or an unwritable directory leaves
// nothing behind and no sync to call.
func TestDirSaveThenSync(t *testing.T) {
	for _, transient := range []bool{true, false} {
		d := Dir{Path: t.TempDir(), Transient: transient}
		st := randNumbers(rand.New(rand.NewPCG(22, 22)), 3000)
		for i, removeFirst := range []bool{false, true} {
			name := []string{"a.ckpt", "b.ckpt"}[i]
			n, sync, err := d.SaveThenSync(name, func(w io.Writer) error {
				_, err := Write(w, testKey, sampleMeta(), st)
				return err
			})
			if err != nil || sync == nil {
				t.Fatalf("transient %v: %v", transient, err)
			}
			fi, err := os.Stat(filepath.Join(d.Path, name))
			if err != nil || fi.Size() != n || fi.Mode().Perm() != 0o600 {
				t.Fatalf("before the sync: %v %v (Save said %d bytes)", fi, err, n)
			}
			if _, got := loadTask(t, d, name); !reflect.DeepEqual(got, st) {
				t.Fatal("state read before the sync differs")
			}
			if removeFirst {
				must(t, d.Remove(name))
			}
			if err := sync(); err != nil {
				t.Fatalf("transient %v, removed %v: sync: %v", transient, removeFirst, err)
			}
		}
		onlyFiles(t, d.Path, "a.ckpt")
	}

	d := Dir{Path: t.TempDir(), Transient: true}
	boom := errors.New("boom")
	if _, sync, err := d.SaveThenSync("c", func(w io.Writer) error {
		_, _ = w.Write(make([]byte, 100<<10))
		return boom
	}); !errors.Is(err, boom) || sync != nil {
		t.Fatalf("failing write: %v, sync %v", err, sync != nil)
	}
	onlyFiles(t, d.Path)
	base := t.TempDir()
	file := filepath.Join(base, "file")
	must(t, os.WriteFile(file, []byte("x"), 0o600))
	if _, sync, err := (Dir{Path: filepath.Join(file, "sub")}).SaveThenSync("c", func(io.Writer) error { return nil }); err == nil || sync != nil {
		t.Fatalf("saved under a regular file: %v", err)
	}
}
