package jobset

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Latest returns the newest set of jobDir (by sequence number) whose
// manifest authenticates under key and whose task checkpoints verify,
// with its manifest. skipped holds one error for each newer set passed
// over, newest first, naming its bad file (a set still being written shows
// as ErrIncomplete). With no such set the error wraps ErrNoCheckpoint.
func Latest(jobDir string, key []byte) (setDir string, m *Manifest, skipped []error, err error) {
	return LatestWith(jobDir, key, nil)
}

// LatestWith is Latest where keyFor, if not nil, picks the key of each
// manifest that names one (see DecodeManifestWith).
func LatestWith(jobDir string, key []byte, keyFor KeyFunc) (setDir string, m *Manifest, skipped []error, err error) {
	if err := checkKey(key); err != nil && keyFor == nil {
		return "", nil, nil, fmt.Errorf("jobset: latest in %s: %w", jobDir, err)
	}
	seqs, err := Sets(jobDir)
	if err != nil {
		return "", nil, nil, err
	}
	for _, seq := range slices.Backward(seqs) {
		dir := SetDir(jobDir, seq)
		m, err := load(dir, key, keyFor)
		if err != nil {
			skipped = append(skipped, err)
			continue
		}
		return dir, m, skipped, nil
	}
	if len(skipped) == 0 {
		return "", nil, nil, fmt.Errorf("jobset: %s has no sets: %w", jobDir, ErrNoCheckpoint)
	}
	return "", nil, skipped, fmt.Errorf("jobset: %s: all %d sets refused, the newest because %v: %w", jobDir, len(skipped), skipped[0], ErrNoCheckpoint)
}

// load reads and verifies one set.
func load(dir string, key []byte, keyFor KeyFunc) (*Manifest, error) {
	m, err := ReadManifestWith(dir, key, keyFor)
	if err != nil {
		return nil, err
	}
	if err := Verify(dir, m); err != nil {
		return nil, err
	}
	return m, nil
}

// Prune applies the retention policy to jobDir: it keeps the newest keep
// (at least 1) sets that authenticate under key and verify, and removes
// every older set, complete or not. Sets newer than the newest verified
// one are never removed (one may be being written), and with no verified
// set nothing is removed. It returns the sequence numbers removed, in
// increasing order. A set is removed manifest first, so one whose removal
// is interrupted reads as incomplete, never as complete with files
// missing. Only the sets kept and any refused sets between them are
// verified (their files hashed); older ones are removed unread.
func Prune(jobDir string, keep int, key []byte) (removed []uint64, err error) {
	return PruneWith(jobDir, keep, key, nil)
}

// PruneWith is Prune where keyFor, if not nil, picks the key of each
// manifest that names one (see DecodeManifestWith).
func PruneWith(jobDir string, keep int, key []byte, keyFor KeyFunc) (removed []uint64, err error) {
	if keep < 1 {
		return nil, fmt.Errorf("jobset: prune %s: keep %d, want at least 1", jobDir, keep)
	}
	if err := checkKey(key); err != nil && keyFor == nil {
		return nil, fmt.Errorf("jobset: prune %s: %w", jobDir, err)
	}
	seqs, err := Sets(jobDir)
	if err != nil {
		return nil, err
	}
	kept := 0
	var doomed []uint64
	for i := len(seqs) - 1; i >= 0; i-- {
		if kept == keep {
			doomed = append(doomed, seqs[i])
			continue
		}
		if _, err := load(SetDir(jobDir, seqs[i]), key, keyFor); err == nil {
			kept++
			continue
		}
		if kept > 0 {
			// A refused set older than the newest verified one.
			doomed = append(doomed, seqs[i])
		}
	}
	slices.Sort(doomed)
	var errs []error
	for _, seq := range doomed {
		if err := removeSet(SetDir(jobDir, seq)); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, seq)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("jobset: prune %s: %w", jobDir, err)
	}
	return removed, nil
}

// removeSet removes a set directory, its manifest first.
func removeSet(dir string) error {
	if err := os.Remove(filepath.Join(dir, ManifestName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.RemoveAll(dir)
}
