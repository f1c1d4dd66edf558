package jobset

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// LatestName is the file in a job's directory that records the job's
// newest complete set: a byte copy of that set's manifest, so authentic
// under the same key and naming the job and the sequence number. It
// outlives the sets: when the newest sets are deleted, the record still
// says a newer set existed.
const LatestName = "LATEST"

// Link is what a set's manifest says of its predecessor, or what the
// latest record says of the newest set: a sequence number and the SHA-256
// of that set's manifest file.
type Link struct {
	Seq    uint64
	SHA256 [32]byte
}

// Predecessor is the link to the newest set of jobDir older than seq whose
// manifest authenticates (its files are not verified): what the manifest
// of set seq records as PrevSeq and PrevSHA256. With no such set it is the
// zero Link.
func Predecessor(jobDir string, seq uint64, key []byte, keyFor KeyFunc) (Link, error) {
	seqs, err := Sets(jobDir)
	if err != nil {
		return Link{}, err
	}
	for _, s := range slices.Backward(seqs) {
		if s >= seq {
			continue
		}
		dir := SetDir(jobDir, s)
		m, data, err := readManifestFile(filepath.Join(dir, ManifestName), key, keyFor)
		if err != nil || checkPlace(dir, m) != nil {
			continue
		}
		return Link{Seq: s, SHA256: sha256.Sum256(data)}, nil
	}
	return Link{}, nil
}

// WriteLatestRecord records the set in setDir, whose manifest is written,
// as its job's newest complete set: its manifest is copied to LatestName
// in the job's directory (a temporary file, synced, renamed over the
// record, the directory synced).
func WriteLatestRecord(setDir string) (err error) {
	data, err := os.ReadFile(filepath.Join(setDir, ManifestName))
	if err != nil {
		return fmt.Errorf("jobset: latest record: %w", err)
	}
	jobDir := filepath.Dir(filepath.Clean(setDir))
	final := filepath.Join(jobDir, LatestName)
	f, err := os.CreateTemp(jobDir, ".tmp-"+LatestName+"-*")
	if err != nil {
		return fmt.Errorf("jobset: latest record: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
			err = fmt.Errorf("jobset: latest record %s: %w", final, err)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	return syncDir(jobDir)
}

// ReadLatestRecord reads and authenticates the latest record of jobDir: the
// link to the newest set recorded complete. It wraps fs.ErrNotExist when
// there is none (a job checkpointed by an older build), ErrTampered when
// it does not authenticate or names another job, and the errors of
// ReadManifest otherwise.
func ReadLatestRecord(jobDir string, key []byte, keyFor KeyFunc) (Link, error) {
	path := filepath.Join(jobDir, LatestName)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return Link{}, fmt.Errorf("jobset: %s: %w", path, err)
	}
	m, data, err := readManifestFile(path, key, keyFor)
	if err != nil {
		return Link{}, err
	}
	if job := strings.TrimPrefix(filepath.Base(filepath.Clean(jobDir)), jobPrefix); m.Job != job {
		return Link{}, fmt.Errorf("jobset: %s records job %q: %w", path, m.Job, ErrTampered)
	}
	return Link{Seq: m.Seq, SHA256: sha256.Sum256(data)}, nil
}
