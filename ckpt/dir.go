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
	// migration's checkpoint, deleted once restored): Save does not sync
	// the directory after the rename. The file's data is still synced
	// before the rename.
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
	if err := checkName(name); err != nil {
		return 0, fmt.Errorf("ckpt: save: %w", err)
	}
	f, err := os.CreateTemp(d.Path, tempPrefix+name+"-*")
	if err != nil {
		return 0, fmt.Errorf("ckpt: save %s: %w", name, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
			err = fmt.Errorf("ckpt: save %s in %s: %w", name, d.Path, err)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return 0, err
	}
	cw := &fileWriter{f: f}
	bw := bufio.NewWriterSize(cw, saveBuf)
	if err := write(bw); err != nil {
		return 0, err
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	if err := datasync(f); err != nil {
		return 0, fmt.Errorf("fdatasync: %w", err)
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	if err := os.Rename(tmp, filepath.Join(d.Path, name)); err != nil {
		return 0, err
	}
	if d.Transient {
		return cw.n, nil
	}
	if err := syncDir(d.Path); err != nil {
		// The file is in place and complete; only its durability is in
		// doubt, and the caller hears of it.
		return cw.n, fmt.Errorf("fsync directory: %w", err)
	}
	return cw.n, nil
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
