package jobset

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Summer passes what is written through to an underlying writer, counting
// the bytes and computing their SHA-256, so that the daemon writing a task
// checkpoint learns its Entry's Bytes and SHA256 without reading the file
// again. Only the bytes the underlying writer accepted are counted.
type Summer struct {
	w io.Writer
	h hash.Hash
	n int64
}

// NewSummer returns a Summer writing to w.
func NewSummer(w io.Writer) *Summer {
	return &Summer{w: w, h: sha256.New()}
}

// Write writes p to the underlying writer and accounts for the bytes it
// accepted.
func (s *Summer) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	s.h.Write(p[:n])
	s.n += int64(n)
	return n, err
}

// Bytes returns how many bytes have been written.
func (s *Summer) Bytes() int64 { return s.n }

// Sum returns the SHA-256 of the bytes written so far.
func (s *Summer) Sum() [32]byte {
	var sum [32]byte
	s.h.Sum(sum[:0])
	return sum
}

// Fill sets e's Bytes and SHA256 to those of the bytes written.
func (s *Summer) Fill(e *Entry) {
	e.Bytes = s.n
	e.SHA256 = s.Sum()
}

// Verify checks the task checkpoints m names in setDir: each must be a
// regular file of mode 0600 or stricter (ErrMode) with the recorded size
// and SHA-256 (ErrTampered); a missing one wraps ErrIncomplete and
// fs.ErrNotExist. It reports every bad file, each error naming its path.
// Files the manifest does not name are ignored.
func Verify(setDir string, m *Manifest) error {
	var errs []error
	for _, e := range m.Entries {
		if err := verifyEntry(setDir, e); err != nil {
			errs = append(errs, fmt.Errorf("jobset: task %s: %w", e.TID, err))
		}
	}
	return errors.Join(errs...)
}

func verifyEntry(setDir string, e Entry) error {
	if err := CheckFileName(e.File); err != nil {
		return err
	}
	path := filepath.Join(setDir, e.File)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s is missing: %w (%w)", path, ErrIncomplete, fs.ErrNotExist)
	}
	if err != nil {
		return err
	}
	if err := checkFile(path, fi); err != nil {
		return err
	}
	if fi.Size() != e.Bytes {
		return fmt.Errorf("%s has %d bytes, the manifest says %d: %w", path, fi.Size(), e.Bytes, ErrTampered)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// Read at most one byte more than recorded: a file growing under us
	// shows as a size mismatch, not as unbounded reading.
	s := NewSummer(io.Discard)
	if _, err := io.Copy(s, io.LimitReader(f, e.Bytes+1)); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if s.Bytes() != e.Bytes {
		return fmt.Errorf("%s has %d bytes, the manifest says %d: %w", path, s.Bytes(), e.Bytes, ErrTampered)
	}
	if s.Sum() != e.SHA256 {
		return fmt.Errorf("%s: SHA-256 differs from the manifest's: %w", path, ErrTampered)
	}
	return nil
}
