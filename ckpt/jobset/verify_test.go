package jobset

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// shortWriter accepts at most max bytes in all, then fails.
type shortWriter struct {
	buf bytes.Buffer
	max int
}

func (w *shortWriter) Write(p []byte) (int, error) {
	room := w.max - w.buf.Len()
	if len(p) <= room {
		return w.buf.Write(p)
	}
	w.buf.Write(p[:room])
	return room, io.ErrShortWrite
}

func TestSummer(t *testing.T) {
	var buf bytes.Buffer
	s := NewSummer(&buf)
	parts := [][]byte{[]byte("hello, "), nil, bytes.Repeat([]byte{7}, 100000), []byte("end")}
	for _, p := range parts {
		n, err := s.Write(p)
		if err != nil || n != len(p) {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	var e Entry
	s.Fill(&e)
	if e.Bytes != int64(buf.Len()) || e.SHA256 != sum(buf.Bytes()) || s.Bytes() != e.Bytes || s.Sum() != e.SHA256 {
		t.Errorf("Fill gives %d bytes %x, the writer got %d bytes %x", e.Bytes, e.SHA256, buf.Len(), sum(buf.Bytes()))
	}

	// Only what the writer accepted is accounted for.
	w := &shortWriter{max: 10}
	s = NewSummer(w)
	n, err := s.Write([]byte("0123456789abcdef"))
	if n != 10 || !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if s.Bytes() != 10 || s.Sum() != sum([]byte("0123456789")) {
		t.Errorf("after a short write: %d bytes %x", s.Bytes(), s.Sum())
	}
}

func TestVerify(t *testing.T) {
	for _, tc := range []struct {
		name      string
		damage    func(t *testing.T, path string)
		sentinels []error
		says      string
	}{
		{"altered", func(t *testing.T, path string) { flip(t, path, 3) }, []error{ErrTampered}, "SHA-256"},
		{"truncated", func(t *testing.T, path string) {
			must(t, os.Truncate(path, 5))
		}, []error{ErrTampered}, "has 5 bytes"},
		{"extended", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			must(t, err)
			_, err = f.Write([]byte("more"))
			must(t, err)
			must(t, f.Close())
		}, []error{ErrTampered}, "bytes, the manifest says"},
		{"missing", func(t *testing.T, path string) { must(t, os.Remove(path)) }, []error{ErrIncomplete, fs.ErrNotExist}, "missing"},
		{"readable by others", func(t *testing.T, path string) { must(t, os.Chmod(path, 0o640)) }, []error{ErrMode}, "0640"},
		{"symlink", func(t *testing.T, path string) {
			other := path + "-real"
			must(t, os.Rename(path, other))
			must(t, os.Symlink(filepath.Base(other), path))
		}, []error{ErrCorrupt}, "not a regular file"},
		{"directory", func(t *testing.T, path string) {
			must(t, os.Remove(path))
			must(t, os.Mkdir(path, 0o700))
		}, []error{ErrCorrupt}, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobDir := newJobDir(t)
			setDir, m := makeSet(t, jobDir, 1, 3, true)
			bad := filepath.Join(setDir, m.Entries[1].File)
			tc.damage(t, bad)
			m, err := ReadManifest(setDir, testKey)
			must(t, err)
			err = Verify(setDir, m)
			wantErr(t, err, tc.sentinels, bad, tc.says, "task "+m.Entries[1].TID)
			for _, e := range []Entry{m.Entries[0], m.Entries[2]} {
				if strings.Contains(err.Error(), e.File) {
					t.Errorf("error %q names a good file %s", err, e.File)
				}
			}
			// Latest falls back on nothing: the only set is refused.
			_, _, skipped, err := Latest(jobDir, testKey)
			wantErr(t, err, []error{ErrNoCheckpoint}, bad)
			if len(skipped) != 1 || !strings.Contains(skipped[0].Error(), bad) {
				t.Errorf("skipped = %v", skipped)
			}
		})
	}
}

func TestVerifyReportsEveryBadFile(t *testing.T) {
	jobDir := newJobDir(t)
	setDir, m := makeSet(t, jobDir, 1, 4, true)
	a, b := filepath.Join(setDir, m.Entries[0].File), filepath.Join(setDir, m.Entries[3].File)
	flip(t, a, 0)
	must(t, os.Remove(b))
	// Files the manifest does not name are ignored.
	must(t, os.WriteFile(filepath.Join(setDir, "extra"), []byte("x"), 0o644))
	must(t, os.WriteFile(filepath.Join(setDir, ".tmp-task-1"), []byte("x"), 0o600))
	err := Verify(setDir, m)
	wantErr(t, err, []error{ErrTampered, ErrIncomplete}, a, b)
	if strings.Contains(err.Error(), "extra") {
		t.Errorf("error %q names the extra file", err)
	}
}

func TestVerifyIgnoresExtraFiles(t *testing.T) {
	jobDir := newJobDir(t)
	setDir, m := makeSet(t, jobDir, 1, 2, true)
	must(t, os.WriteFile(filepath.Join(setDir, "notes.txt"), []byte("x"), 0o666))
	must(t, os.Mkdir(filepath.Join(setDir, "sub"), 0o755))
	must(t, Verify(setDir, m))
	// A manifest built by hand with a file name that escapes is refused.
	m.Entries[0].File = "../" + filepath.Base(setDir) + "/" + m.Entries[0].File
	wantErr(t, Verify(setDir, m), []error{ErrName})
}
