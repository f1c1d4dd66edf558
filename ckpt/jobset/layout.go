package jobset

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const (
	// jobPrefix starts the name of a job's directory under the root.
	jobPrefix = "job-"
	// setPrefix starts the name of a set's directory under its job's.
	setPrefix = "ckpt-"
	// seqDigits is the least number of digits of a set's sequence number
	// in its directory name (zero-padded, so that names sort by number up
	// to 99,999,999).
	seqDigits = 8
	// MaxNameLen bounds job names and task checkpoint file names.
	MaxNameLen = 128
	// ManifestName is the manifest's file name inside a set directory.
	ManifestName = "MANIFEST"
)

// CheckJobName returns an error wrapping ErrName unless job is an
// acceptable job name: 1 to MaxNameLen characters of [A-Za-z0-9._-], not
// starting with a dot.
func CheckJobName(job string) error {
	if job == "" || len(job) > MaxNameLen {
		return fmt.Errorf("job name %q: length must be 1 to %d: %w", job, MaxNameLen, ErrName)
	}
	if job[0] == '.' {
		return fmt.Errorf("job name %q starts with a dot: %w", job, ErrName)
	}
	for _, c := range []byte(job) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("job name %q: only letters, digits, '.', '_' and '-' are allowed: %w", job, ErrName)
		}
	}
	return nil
}

// CheckFileName returns an error wrapping ErrName unless name can name a
// task checkpoint inside a set directory: a plain file name of at most
// MaxNameLen bytes, not starting with a dot (reserved for temporary
// files), without a path separator or NUL, and not ManifestName.
func CheckFileName(name string) error {
	switch {
	case name == "" || len(name) > MaxNameLen:
		return fmt.Errorf("file name %q: length must be 1 to %d: %w", name, MaxNameLen, ErrName)
	case strings.HasPrefix(name, "."):
		return fmt.Errorf("file name %q starts with a dot: %w", name, ErrName)
	case strings.ContainsAny(name, "/\\\x00"):
		return fmt.Errorf("file name %q contains a path separator or NUL: %w", name, ErrName)
	case name == ManifestName:
		return fmt.Errorf("file name %q is reserved for the manifest: %w", name, ErrName)
	}
	return nil
}

// JobDir returns the directory of job's checkpoints under root (the
// shared directory): root/job-<job>. It refuses a bad job name.
func JobDir(root, job string) (string, error) {
	if err := CheckJobName(job); err != nil {
		return "", fmt.Errorf("jobset: %w", err)
	}
	return filepath.Join(root, jobPrefix+job), nil
}

// SetDir returns the directory of the set of sequence number seq in
// jobDir: jobDir/ckpt-<seq>, seq zero-padded to 8 digits.
func SetDir(jobDir string, seq uint64) string {
	return filepath.Join(jobDir, setName(seq))
}

func setName(seq uint64) string {
	return fmt.Sprintf("%s%0*d", setPrefix, seqDigits, seq)
}

// parseSetName returns the sequence number a set directory's name
// carries; only the canonical form SetDir produces is accepted.
func parseSetName(name string) (uint64, bool) {
	digits, ok := strings.CutPrefix(name, setPrefix)
	if !ok || len(digits) < seqDigits {
		return 0, false
	}
	seq, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || setName(seq) != name {
		return 0, false
	}
	return seq, true
}

// NewSet creates the directory of set seq in jobDir (and jobDir if it is
// missing), mode 0700, and returns its path. A set that already exists is
// an error wrapping fs.ErrExist; an unwritable or full file system gives
// the operating system's error wrapped (errors.Is(err, fs.ErrPermission)
// and syscall.ENOSPC still hold).
func NewSet(jobDir string, seq uint64) (string, error) {
	if err := os.MkdirAll(jobDir, 0o700); err != nil {
		return "", fmt.Errorf("jobset: new set %d: job directory: %w", seq, err)
	}
	dir := SetDir(jobDir, seq)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("jobset: new set %d: %w", seq, err)
	}
	// The umask may only have removed bits; make the mode exact anyway.
	if err := os.Chmod(dir, 0o700); err != nil {
		_ = os.Remove(dir)
		return "", fmt.Errorf("jobset: new set %d: %w", seq, err)
	}
	if err := syncDir(jobDir); err != nil {
		_ = os.Remove(dir)
		return "", fmt.Errorf("jobset: new set %d: fsync %s: %w", seq, jobDir, err)
	}
	return dir, nil
}

// Sets returns the sequence numbers of the set directories in jobDir, in
// increasing order, complete or not. A missing jobDir has no sets.
// Entries that are not set directories are ignored.
func Sets(jobDir string) ([]uint64, error) {
	ents, err := os.ReadDir(jobDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("jobset: list sets: %w", err)
	}
	var seqs []uint64
	for _, e := range ents {
		if seq, ok := parseSetName(e.Name()); ok && e.IsDir() {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	return seqs, nil
}

// NextSeq returns the sequence number a new set of jobDir should take:
// one more than the largest present, 1 when there is none.
func NextSeq(jobDir string) (uint64, error) {
	seqs, err := Sets(jobDir)
	if err != nil {
		return 0, err
	}
	if len(seqs) == 0 {
		return 1, nil
	}
	last := seqs[len(seqs)-1]
	if last == ^uint64(0) {
		return 0, fmt.Errorf("jobset: %s: sequence numbers exhausted", jobDir)
	}
	return last + 1, nil
}

// Jobs returns the names of the jobs that have a directory under root,
// sorted. A missing root has no jobs. Entries that are not job directories
// (or whose names are not valid job names) are ignored.
func Jobs(root string) ([]string, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("jobset: list jobs: %w", err)
	}
	var jobs []string
	for _, e := range ents {
		job, ok := strings.CutPrefix(e.Name(), jobPrefix)
		if ok && e.IsDir() && CheckJobName(job) == nil {
			jobs = append(jobs, job)
		}
	}
	slices.Sort(jobs)
	return jobs, nil
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
