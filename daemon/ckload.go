package daemon

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"

	"github.com/dpvm/dpvm/ckpt"
	"github.com/dpvm/dpvm/ckpt/jobset"
	"github.com/dpvm/dpvm/task"
)

// ErrCkptMismatch: a task checkpoint of a job set is not the file its
// manifest names — another task's, another set's, or altered — found when
// the daemon that restores it reads it.
var ErrCkptMismatch = errors.New("checkpoint does not match the set's manifest")

// ckWant is what a set's manifest says of one task checkpoint: the
// daemon restoring it checks the file against it as it reads it, so a
// file swapped after the master verified the set is refused too.
type ckWant struct {
	TID    string   `msgpack:"t"`
	Bytes  int64    `msgpack:"b"`
	SHA256 [32]byte `msgpack:"h"`
}

// wantOf is what entry e of a manifest says of its file.
func wantOf(e jobset.Entry) ckWant { return ckWant{TID: e.TID, Bytes: e.Bytes, SHA256: e.SHA256} }

// readSetFile reads task checkpoint name of a job set in dir under the key
// it names (format 2) or, for a file of format 1, trying the cluster
// secret's keys in turn, and refuses it with ErrCkptMismatch
// unless its size and SHA-256 are the manifest's and it holds the task
// the manifest names. It reads at most one byte more than the manifest
// records.
func (d *Daemon) readSetFile(dir ckpt.Dir, name string, want ckWant) (*ckpt.Meta, task.Task, error) {
	keys := d.keysFor(labelCkpt)
	var named bool
	lim := ckpt.Limits{KeyFor: d.keyFor(labelCkpt, "checkpoint "+name, &named)}
	for i, k := range keys {
		f, err := dir.Open(name)
		if err != nil {
			return nil, nil, err
		}
		body := io.LimitReader(f, max(want.Bytes, 0)+1)
		sum := jobset.NewSummer(io.Discard)
		m, t, err := ckpt.ReadLimits(io.TeeReader(body, sum), k.Key, lim)
		_, cerr := io.Copy(sum, body) // the rest, for the whole file's hash
		f.Close()
		if cerr != nil {
			return nil, nil, fmt.Errorf("read %s: %w", name, cerr)
		}
		if sum.Bytes() != want.Bytes || sum.Sum() != want.SHA256 {
			return nil, nil, fmt.Errorf("%s is not the checkpoint of %s the manifest names (its size or SHA-256 differs: a swapped or altered file): %w",
				name, want.TID, ErrCkptMismatch)
		}
		if err != nil && !named && errors.Is(err, ckpt.ErrTampered) && i+1 < len(keys) {
			continue // format 1 names no key: try the next
		}
		if err != nil {
			return nil, nil, err
		}
		if m.TID.String() != want.TID {
			return nil, nil, fmt.Errorf("%s holds task %v, the manifest names %s: %w", name, m.TID, want.TID, ErrCkptMismatch)
		}
		if i > 0 && !named {
			d.log.Info("checkpoint verified under an older key of the cluster secret", "file", name, "key", k.ID)
		}
		return m, t, nil
	}
	return nil, nil, errors.New("no key") // not reached: keysFor is never empty
}

// noteSetSeq records that set seq of job name is complete (master): a
// later restart or rollback from an older set is then noticed.
func (d *Daemon) noteSetSeq(name string, seq uint64) {
	d.reg.noteSetSeq(name, seq)
}

// checkSetSeq logs a warning when job name restarts from set seq while a
// newer set was recorded complete — in this master's memory, or in the
// job's latest record in the shared directory (jobset.LatestName), which
// survives a restart of the master: the newer sets were deleted or became
// unreadable, so the job goes back further than it should. It returns the
// newest sequence recorded.
func (d *Daemon) checkSetSeq(name string, seq uint64, setDir string) uint64 {
	newest := d.reg.setSeq(name)
	from := "memory"
	jobDir := filepath.Dir(filepath.Clean(setDir))
	if key, _ := d.keyID(labelManifest); key != nil {
		var named bool
		rec, err := jobset.ReadLatestRecord(jobDir, key, d.keyFor(labelManifest, "the latest record of "+jobDir, &named))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			d.log.Warn("job restarts without its latest record: it does not authenticate", "job", name, "error", err)
		case rec.Seq > newest:
			newest, from = rec.Seq, "latest record"
		}
	}
	if newest > seq {
		d.log.Warn("job restarts from an older checkpoint set than the newest recorded: newer sets were deleted or are unreadable",
			"job", name, "seq", seq, "newest", newest, "recorded_in", from, "set", setDir)
	}
	return newest
}
