package jobset

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLatest(t *testing.T) {
	jobDir := newJobDir(t)
	_, _, skipped, err := Latest(jobDir, testKey)
	wantErr(t, err, []error{ErrNoCheckpoint}, "no sets")
	if skipped != nil {
		t.Errorf("skipped = %v", skipped)
	}

	makeSet(t, jobDir, 1, 3, true)
	want, wantM := makeSet(t, jobDir, 2, 3, true)
	tampered, tm := makeSet(t, jobDir, 3, 3, true)
	badFile := filepath.Join(tampered, tm.Entries[2].File)
	flip(t, badFile, 0)
	incomplete, _ := makeSet(t, jobDir, 4, 3, false)

	dir, m, skipped, err := Latest(jobDir, testKey)
	must(t, err)
	wantM.Version = FormatVersion
	if dir != want || !reflect.DeepEqual(m, wantM) {
		t.Errorf("Latest = %s, seq %d; want %s", dir, m.Seq, want)
	}
	if len(skipped) != 2 {
		t.Fatalf("skipped = %v, want two", skipped)
	}
	wantErr(t, skipped[0], []error{ErrIncomplete}, filepath.Join(incomplete, ManifestName))
	wantErr(t, skipped[1], []error{ErrTampered}, badFile)

	// Once set 4 completes it is the latest.
	m4, err := EncodeManifest(&Manifest{Job: "pi", Seq: 4, Created: created, Entries: []Entry{writeTask(t, incomplete, "t9:9", []byte("late"))}}, testKey)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(incomplete, ManifestName), m4, 0o600))
	dir, m, skipped, err = Latest(jobDir, testKey)
	if err != nil || dir != incomplete || m.Seq != 4 || len(skipped) != 0 {
		t.Errorf("Latest = %s, %v, %v, %v", dir, m, skipped, err)
	}

	// Under another key nothing authenticates.
	other := []byte(strings.Repeat("k", KeySize))
	_, _, skipped, err = Latest(jobDir, other)
	wantErr(t, err, []error{ErrNoCheckpoint}, "all 4 sets", filepath.Join(incomplete, ManifestName))
	if len(skipped) != 4 {
		t.Errorf("skipped %d sets, want 4", len(skipped))
	}
	for _, e := range skipped {
		if !errors.Is(e, ErrTampered) {
			t.Errorf("skipped: %v", e)
		}
	}
	_, _, _, err = Latest(jobDir, nil)
	wantErr(t, err, []error{ErrKey})
}

// A set of a newer format is refused with a clear error and the previous
// one is used.
func TestLatestVersionSkew(t *testing.T) {
	jobDir := newJobDir(t)
	prev, _ := makeSet(t, jobDir, 1, 2, true)
	newer, m := makeSet(t, jobDir, 2, 2, false)
	data, err := EncodeManifest(m, testKey)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(newer, ManifestName), seal(7, [KeyIDSize]byte{}, data[headerLen+KeyIDSize:len(data)-macLen], testKey), 0o600))
	dir, got, skipped, err := Latest(jobDir, testKey)
	must(t, err)
	if dir != prev || got.Seq != 1 || len(skipped) != 1 {
		t.Fatalf("Latest = %s, %d, %v", dir, got.Seq, skipped)
	}
	wantErr(t, skipped[0], []error{ErrVersion}, filepath.Join(newer, ManifestName), "version 7")
}

func TestPrune(t *testing.T) {
	jobDir := newJobDir(t)
	var m5 *Manifest
	for seq := uint64(1); seq <= 6; seq++ {
		_, m := makeSet(t, jobDir, seq, 2, seq != 2)
		if seq == 5 {
			m5 = m
		}
	}
	// 2 and 7 are incomplete, 5 is tampered, 8 is being written.
	makeSet(t, jobDir, 7, 2, false)
	makeSet(t, jobDir, 8, 1, false)
	flip(t, filepath.Join(SetDir(jobDir, 5), m5.Entries[0].File), 0)

	_, err := Prune(jobDir, 0, testKey)
	wantErr(t, err, nil, "keep 0")
	_, err = Prune(jobDir, 1, nil)
	wantErr(t, err, []error{ErrKey})

	removed, err := Prune(jobDir, 2, testKey)
	must(t, err)
	if !reflect.DeepEqual(removed, []uint64{1, 2, 3, 5}) {
		t.Errorf("removed %v, want [1 2 3 5]", removed)
	}
	seqs, err := Sets(jobDir)
	must(t, err)
	if !reflect.DeepEqual(seqs, []uint64{4, 6, 7, 8}) {
		t.Errorf("left %v, want [4 6 7 8]", seqs)
	}
	dir, _, _, err := Latest(jobDir, testKey)
	if err != nil || dir != SetDir(jobDir, 6) {
		t.Errorf("Latest after pruning = %s, %v", dir, err)
	}
	// Pruning again changes nothing; keep 1 removes set 4.
	removed, err = Prune(jobDir, 2, testKey)
	if err != nil || len(removed) != 0 {
		t.Errorf("second prune removed %v, %v", removed, err)
	}
	removed, err = Prune(jobDir, 1, testKey)
	if err != nil || !reflect.DeepEqual(removed, []uint64{4}) {
		t.Errorf("prune to 1 removed %v, %v", removed, err)
	}
	// Keeping more sets than there are removes none.
	removed, err = Prune(jobDir, 10, testKey)
	if err != nil || len(removed) != 0 {
		t.Errorf("prune to 10 removed %v, %v", removed, err)
	}
}

// With no verified set, nothing is removed: every set may be the one a
// restart needs, or one being written.
func TestPruneNothingComplete(t *testing.T) {
	jobDir := newJobDir(t)
	makeSet(t, jobDir, 1, 1, false)
	makeSet(t, jobDir, 2, 1, false)
	removed, err := Prune(jobDir, 1, testKey)
	if err != nil || len(removed) != 0 {
		t.Errorf("removed %v, %v", removed, err)
	}
	removed, err = Prune(filepath.Join(jobDir, "missing"), 1, testKey)
	if err != nil || len(removed) != 0 {
		t.Errorf("missing job: removed %v, %v", removed, err)
	}
}

// A removal interrupted after the manifest went leaves an incomplete set,
// which the next prune removes.
func TestRemoveSetManifestFirst(t *testing.T) {
	jobDir := newJobDir(t)
	old, _ := makeSet(t, jobDir, 1, 2, true)
	makeSet(t, jobDir, 2, 2, true)
	must(t, os.Remove(filepath.Join(old, ManifestName)))
	_, _, skipped, err := Latest(jobDir, testKey)
	must(t, err)
	if len(skipped) != 0 {
		t.Errorf("skipped %v", skipped)
	}
	removed, err := Prune(jobDir, 5, testKey)
	if err != nil || !reflect.DeepEqual(removed, []uint64{1}) {
		t.Errorf("removed %v, %v", removed, err)
	}
}
