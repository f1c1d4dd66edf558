package ckpt

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Dir is the indirect store: a directory all hosts mount (a local
// directory on one machine, NFS or the like across machines). Its files
// are written atomically and readable by their owner only (0600).
type Dir struct {
	Path string
	// Transient says the files live only until they are read (a
	// migration's checkpoint, deleted once restored): Save and
	// SaveThenSync do not sync the directory after the rename. The file's
	// data is still synced.
	Transient bool
}

// tempPrefix starts the names of files being written; checkpoint names
// may not start with a dot, so they never collide.
const tempPrefix = ".tmp-"

// checkName refuses names that are not a plain file name of the
// directory.
func checkName(name string) error {
	switch {
	case name == "", name == ".", name == "..":
		return fmt.Errorf("%q: %w", name, ErrName)
	case strings.ContainsAny(name, "/\\\x00"):
		return fmt.Errorf("%q contains a path separator or NUL: %w", name, ErrName)
	case strings.HasPrefix(name, "."):
		return fmt.Errorf("%q starts with a dot (reserved for temporary files): %w", name, ErrName)
	}
	return nil
}

// writebackEvery is how many bytes Save writes before it asks the kernel
// to start writing them to the disk.
const writebackEvery = 8 << 20

// saveBuf is the buffer of Save's small writes; larger ones (the pieces of
// numeric blocks) go to the file without a copy.
const saveBuf = 64 << 10

// fileWriter writes to a new file, counting the bytes and starting their
// writeback every writebackEvery bytes so that the final sync overlaps the
// encoding.
type fileWriter struct {
	f      *os.File
	n      int64
	synced int64 // writeback started up to here
}

func (c *fileWriter) Write(p []byte) (int, error) {
	n, err := c.f.Write(p)
	c.n += int64(n)
	if c.n-c.synced >= writebackEvery {
		startWriteback(c.f, c.synced, c.n-c.synced)
		c.synced = c.n
	}
	return n, err
}

// Save writes name atomically: write (typically a call of Write) fills a
// temporary file (mode 0600) in the directory, which is synced (its
// writeback started as it is written, then fdatasync), renamed to name, and
// the directory synced (unless Transient). It returns the file's size. On any error
// (a full disk, an unwritable directory, write failing) the temporary file
// is removed and the error returned; an existing file of that name is
// untouched until the rename replaces it.
func (d Dir) Save(name string, write func(w io.Writer) error) (n int64, err error) {
	f, n, err := d.writeTemp(name, write)
	if err != nil {
		return 0, err
	}
	if err := datasync(f); err != nil {
		return 0, d.discard(name, f, fmt.Errorf("fdatasync: %w", err))
	}
	if err := f.Close(); err != nil {
		return 0, d.discard(name, f, err)
	}
	if err := d.rename(name, f); err != nil {
		return 0, err
	}
	if d.Transient {
		return n, nil
	}
	if err := syncDir(d.Path); err != nil {
		// The file is in place and complete; only its durability is in
		// doubt, and the caller hears of it.
		return n, fmt.Errorf("ckpt: save %s in %s: fsync directory: %w", name, d.Path, err)
	}
	return n, nil
}

// SaveThenSync is Save with the sync left to the caller: the file is
// written, closed (which, on a network file system, sends its bytes to
// the server) and renamed to name, so that a reader can start on it at
// once, from the page cache, while sync flushes it to the disk (fdatasync,
// then the directory unless Transient) — the disk's time overlaps the
// reader's instead of preceding it. The caller must call sync exactly once
// (it closes the descriptor it syncs by, opened before SaveThenSync
// returns, so the reader may remove the file meanwhile). On an error the
// temporary file is removed and sync is nil.
func (d Dir) SaveThenSync(name string, write func(w io.Writer) error) (n int64, sync func() error, err error) {
	f, n, err := d.writeTemp(name, write)
	if err != nil {
		return 0, nil, err
	}
	if err := f.Close(); err != nil {
		return 0, nil, d.discard(name, f, err)
	}
	if err := d.rename(name, f); err != nil {
		return 0, nil, err
	}
	final := filepath.Join(d.Path, name)
	g, err := os.Open(final)
	if err != nil {
		_ = os.Remove(final)
		return 0, nil, fmt.Errorf("ckpt: save %s in %s: open to sync: %w", name, d.Path, err)
	}
	sync = func() error {
		err := datasync(g)
		if cerr := g.Close(); err == nil {
			err = cerr
		}
		if err == nil && !d.Transient {
			err = syncDir(d.Path)
		}
		if err != nil {
			return fmt.Errorf("ckpt: sync %s in %s: %w", name, d.Path, err)
		}
		return nil
	}
	return n, sync, nil
}

// writeTemp creates a temporary file for name (mode 0600) and fills it
// with write, starting its writeback as it goes. It returns the open file
// and its size; on an error the file is gone.
func (d Dir) writeTemp(name string, write func(w io.Writer) error) (*os.File, int64, error) {
	if err := checkName(name); err != nil {
		return nil, 0, fmt.Errorf("ckpt: save: %w", err)
	}
	f, err := os.CreateTemp(d.Path, tempPrefix+name+"-*")
	if err != nil {
		return nil, 0, fmt.Errorf("ckpt: save %s: %w", name, err)
	}
	if err := f.Chmod(0o600); err != nil {
		return nil, 0, d.discard(name, f, err)
	}
	cw := &fileWriter{f: f}
	bw := bufio.NewWriterSize(cw, saveBuf)
	if err := write(bw); err != nil {
		return nil, 0, d.discard(name, f, err)
	}
	if err := bw.Flush(); err != nil {
		return nil, 0, d.discard(name, f, err)
	}
	return f, cw.n, nil
}

// discard closes (if it is not yet) and removes the temporary file f of
// name, and returns err with context.
func (d Dir) discard(name string, f *os.File, err error) error {
	_ = f.Close() // a second Close only reports os.ErrClosed
	_ = os.Remove(f.Name())
	return fmt.Errorf("ckpt: save %s in %s: %w", name, d.Path, err)
}

// rename moves the closed temporary file f to name, or removes it.
func (d Dir) rename(name string, f *os.File) error {
	if err := os.Rename(f.Name(), filepath.Join(d.Path, name)); err != nil {
		return d.discard(name, f, err)
	}
	return nil
}

func syncDir(path string) error {
	df, err := os.Open(path)
	if err != nil {
		return err
	}
	err = df.Sync()
	if cerr := df.Close(); err == nil {
		err = cerr
	}
	return err
}

// Open opens name for reading (pass it to Read). The caller closes it.
func (d Dir) Open(name string) (io.ReadCloser, error) {
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("ckpt: open: %w", err)
	}
	f, err := os.Open(filepath.Join(d.Path, name))
	if err != nil {
		return nil, fmt.Errorf("ckpt: open: %w", err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", f.Name())
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("ckpt: open: %w", err)
	}
	return f, nil
}

// Remove deletes name (after the migration that used it committed). A
// missing file is an error wrapping fs.ErrNotExist.
func (d Dir) Remove(name string) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("ckpt: remove: %w", err)
	}
	if err := os.Remove(filepath.Join(d.Path, name)); err != nil {
		return fmt.Errorf("ckpt: remove: %w", err)
	}
	return nil
}

// RemoveTemps deletes the temporary files a crashed Save left behind and
// returns how many it removed. Run it only when no Save is in progress on
// the directory (at daemon start, when no migration is under way).
func (d Dir) RemoveTemps() (int, error) {
	ents, err := os.ReadDir(d.Path)
	if err != nil {
		return 0, fmt.Errorf("ckpt: remove temporary files: %w", err)
	}
	n := 0
	var errs []error
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		if err := os.Remove(filepath.Join(d.Path, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		n++
	}
	if err := errors.Join(errs...); err != nil {
		return n, fmt.Errorf("ckpt: remove temporary files: %w", err)
	}
	return n, nil
}
