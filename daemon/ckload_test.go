package daemon

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/ckpt/jobset"
	"github.com/dpvm/dpvm/task"
)

// TestRestoreChecksManifest: a host loading a task checkpoint of a set
// refuses a file that is not the one the manifest names — a valid
// checkpoint of another task of the set, or of the same task from an older
// set — and a restart from an older set after the newer one was deleted
// is logged.
func TestRestoreChecksManifest(t *testing.T) {
	shared := t.TempDir()
	out := &syncBuffer{}
	var logs syncBuffer
	vm := startVM(t, 2, Config{SharedDir: shared, Output: out, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := m.newJob("swap", "daemon.test.ringroot", JobOptions{Keep: 3})
	tids, err := m.startLocal(ctx, 0, js.id, task.SpawnRequest{Type: "daemon.test.ringroot", Count: 1,
		State: mustState(t, &ringRoot{N: 3, Laps: 10})})
	if err != nil {
		t.Fatal(err)
	}
	m.jobRunning(js, tids[0])
	waitRingMid(t)
	var cks []JobCheckpoint
	for range 2 {
		ck, err := m.CheckpointJob(ctx, js.id, "")
		if err != nil {
			t.Fatal(err)
		}
		cks = append(cks, ck)
	}
	poke(t, m, js.root)
	if info, err := m.Wait(ctx, js.root); err != nil || info.Status != 0 {
		t.Fatalf("ring: %+v %v\n%s", info, err, out)
	}
	older, err := jobset.ReadManifest(cks[0].Dir, m.manifestKey())
	if err != nil {
		t.Fatal(err)
	}
	newer, err := jobset.ReadManifest(cks[1].Dir, m.manifestKey())
	if err != nil {
		t.Fatal(err)
	}
	a, b := newer.Entries[0], newer.Entries[1]
	load := func(file string, want jobset.Entry) error {
		t.Helper()
		_, err := m.loadStaged(restoreArgs{Job: 9999, Dir: cks[1].Dir, Files: []string{file}, Want: []ckWant{wantOf(want)}, Epoch: 1})
		m.dropStaged(restoreArgs{Job: 9999})
		return err
	}
	if err := load(a.File, a); err != nil {
		t.Fatalf("the authentic checkpoint: %v", err)
	}
	// Another task's file of the same set, under a's name.
	copyFile(t, filepath.Join(cks[1].Dir, b.File), filepath.Join(cks[1].Dir, a.File))
	if err := load(a.File, a); !errors.Is(err, ErrCkptMismatch) {
		t.Fatalf("another task's checkpoint loaded as %s: %v", a.TID, err)
	}
	// The same task's file of the older set.
	var oldA jobset.Entry
	for _, e := range older.Entries {
		if e.TID == a.TID {
			oldA = e
		}
	}
	copyFile(t, filepath.Join(cks[0].Dir, oldA.File), filepath.Join(cks[1].Dir, a.File))
	if err := load(a.File, a); !errors.Is(err, ErrCkptMismatch) {
		t.Fatalf("the older set's checkpoint of %s loaded: %v", a.TID, err)
	}
	// A file of the right hash whose checkpoint names another task cannot
	// be made without the secret; the task check is the manifest's TID.
	if err := load(b.File, jobset.Entry{TID: a.TID, Bytes: b.Bytes, SHA256: b.SHA256}); !errors.Is(err, ErrCkptMismatch) {
		t.Fatalf("%s's checkpoint loaded for %s: %v", b.TID, a.TID, err)
	}
	// A count that disagrees is malformed.
	if _, err := m.loadStaged(restoreArgs{Job: 9999, Dir: cks[1].Dir, Files: []string{a.File}}); err == nil {
		t.Fatal("a load without the manifest's entries was accepted")
	}

	// The newer set's manifest names its key and links to the older set.
	if newer.Version != jobset.FormatVersion || newer.KeyID == ([jobset.KeyIDSize]byte{}) ||
		newer.PrevSeq != older.Seq || newer.PrevSHA256 != sha256.Sum256(readFile(t, filepath.Join(cks[0].Dir, jobset.ManifestName))) {
		t.Fatalf("set %d: version %d key %x links to set %d %x", newer.Seq, newer.Version, newer.KeyID, newer.PrevSeq, newer.PrevSHA256)
	}

	// Delete the newer set to force the older one, and forget what this
	// master remembers of the job's sets, as a restarted master would: the
	// restart goes on from the older set, and says that a newer set was
	// recorded, in the job's latest record.
	if err := os.RemoveAll(cks[1].Dir); err != nil {
		t.Fatal(err)
	}
	m.reg.mu.Lock()
	clear(m.reg.setSeqs)
	m.reg.mu.Unlock()
	jobDir, _ := jobset.JobDir(shared, "swap")
	js2, _, err := m.RestartJob(ctx, jobDir, JobOptions{}, func(uint64) io.Writer { return out })
	if err != nil {
		t.Fatal(err)
	}
	if js2.seq() != cks[0].Seq {
		t.Fatalf("restarted from set %d, want %d", js2.seq(), cks[0].Seq)
	}
	if !strings.Contains(logs.String(), "older checkpoint set than the newest recorded") ||
		!strings.Contains(logs.String(), "newest=2") || !strings.Contains(logs.String(), `recorded_in="latest record"`) {
		t.Fatalf("no warning about the deleted newer set:\n%s", logs.String())
	}
	waitRingMid(t)
	poke(t, m, js2.root)
	if info, err := m.Wait(ctx, js2.root); err != nil || info.Status != 0 {
		t.Fatalf("restarted ring: %+v %v\n%s", info, err, out)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
