package jobset

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestRoundTrip(t *testing.T) {
	jobDir := newJobDir(t)
	setDir, want := makeSet(t, jobDir, 1, 5, true)
	got, err := ReadManifest(setDir, testKey)
	must(t, err)
	want.Version = FormatVersion
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back\n%+v\nwant\n%+v", got, want)
	}
	must(t, Verify(setDir, got))

	// Encoding is deterministic and decoding inverts it.
	a, err := EncodeManifest(want, testKey)
	must(t, err)
	b, err := EncodeManifest(got, testKey)
	must(t, err)
	if !bytes.Equal(a, b) {
		t.Error("re-encoding a manifest read back gives other bytes")
	}
	onDisk, err := os.ReadFile(filepath.Join(setDir, ManifestName))
	must(t, err)
	if !bytes.Equal(a, onDisk) {
		t.Error("MANIFEST differs from EncodeManifest's bytes")
	}
	// Created is kept to the nanosecond whatever its location.
	want.Created = want.Created.In(fixedZone)
	c, err := EncodeManifest(want, testKey)
	must(t, err)
	if !bytes.Equal(a, c) {
		t.Error("the creation time's location changes the bytes")
	}
	// No temporary file is left behind.
	ents, err := os.ReadDir(setDir)
	must(t, err)
	if len(ents) != len(want.Entries)+1 {
		t.Errorf("set holds %d files, want %d", len(ents), len(want.Entries)+1)
	}
}

func TestTamperedManifest(t *testing.T) {
	jobDir := newJobDir(t)
	setDir, _ := makeSet(t, jobDir, 1, 3, true)
	path := filepath.Join(setDir, ManifestName)
	data, err := os.ReadFile(path)
	must(t, err)

	otherKey := bytes.Repeat([]byte{1}, KeySize)
	_, err = ReadManifest(setDir, otherKey)
	wantErr(t, err, []error{ErrTampered}, path, "MAC")

	for _, at := range []int{headerLen, headerLen + 20, len(data) - 1} {
		must(t, os.WriteFile(path, data, 0o600))
		flip(t, path, at)
		_, err = ReadManifest(setDir, testKey)
		wantErr(t, err, []error{ErrTampered}, path)
	}
	for name, b := range map[string][]byte{
		"truncated":      data[:len(data)-5],
		"trailing bytes": append(bytes.Clone(data), 0),
		"bad magic":      append([]byte("DPVMCKPT"), data[8:]...),
		"version 0":      append(append([]byte(magic), 0, 0), data[10:]...),
		"unknown flags":  append(append([]byte(magic), 1, 0, 1, 0), data[12:]...),
		"empty":          {},
	} {
		must(t, os.WriteFile(path, b, 0o600))
		_, err = ReadManifest(setDir, testKey)
		wantErr(t, err, []error{ErrCorrupt}, path, strings.Fields(name)[0])
	}

	// An authentic manifest in another set's or another job's directory.
	must(t, os.WriteFile(path, data, 0o600))
	other, err := NewSet(jobDir, 2)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(other, ManifestName), data, 0o600))
	_, err = ReadManifest(other, testKey)
	wantErr(t, err, []error{ErrTampered}, filepath.Join(other, ManifestName), "set 1")
	otherJob, err := JobDir(filepath.Dir(jobDir), "other")
	must(t, err)
	moved, err := NewSet(otherJob, 1)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(moved, ManifestName), data, 0o600))
	_, err = ReadManifest(moved, testKey)
	wantErr(t, err, []error{ErrTampered}, filepath.Join(moved, ManifestName), `job "pi"`)

	// A manifest readable by others, or not a file.
	must(t, os.Chmod(path, 0o644))
	_, err = ReadManifest(setDir, testKey)
	wantErr(t, err, []error{ErrMode}, path, "0644")
	must(t, os.Remove(path))
	must(t, os.Mkdir(path, 0o700))
	_, err = ReadManifest(setDir, testKey)
	wantErr(t, err, []error{ErrCorrupt}, path, "not a regular file")
	must(t, os.Remove(path))

	// Bounded: an absurd size is refused before reading.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	must(t, err)
	must(t, f.Truncate(MaxManifestSize+1))
	must(t, f.Close())
	_, err = ReadManifest(setDir, testKey)
	wantErr(t, err, []error{ErrCorrupt}, path, "exceed")

	// No manifest.
	must(t, os.Remove(path))
	_, err = ReadManifest(setDir, testKey)
	wantErr(t, err, []error{ErrIncomplete}, path)

	_, err = ReadManifest(setDir, testKey[:16])
	wantErr(t, err, []error{ErrKey}, "16 bytes")
}

func TestNewerVersion(t *testing.T) {
	jobDir := newJobDir(t)
	setDir, m := makeSet(t, jobDir, 1, 2, false)
	data, err := EncodeManifest(m, testKey)
	must(t, err)
	newer := seal(FormatVersion+1, [KeyIDSize]byte{}, data[headerLen+KeyIDSize:len(data)-macLen], testKey)
	path := filepath.Join(setDir, ManifestName)
	must(t, os.WriteFile(path, newer, 0o600))
	_, err = ReadManifest(setDir, testKey)
	wantErr(t, err, []error{ErrVersion}, path, fmt.Sprintf("version %d", FormatVersion+1), fmt.Sprintf("reads (%d)", FormatVersion))
	// Refused whatever follows the version: its framing may differ.
	must(t, os.WriteFile(path, newer[:headerLen], 0o600))
	_, err = ReadManifest(setDir, testKey)
	wantErr(t, err, []error{ErrVersion}, path)

	m.Version = FormatVersion + 1
	_, err = EncodeManifest(m, testKey)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("version %d", FormatVersion+1)) {
		t.Errorf("encoding version %d: %v", FormatVersion+1, err)
	}
}

// A body with a valid MAC that does not decode or names bad entries is
// refused as corrupt (only a writer's bug could produce one).
func TestCorruptBody(t *testing.T) {
	good := wireManifest{Job: "pi", Seq: 1, Created: created, Entries: []wireEntry{
		{TID: "t1:1", Type: "w", File: "a", SHA256: make([]byte, 32)},
		{TID: "t1:2", Type: "w", File: "b", SHA256: make([]byte, 32)},
	}}
	edit := func(f func(w *wireManifest)) []byte {
		w := good
		w.Entries = append([]wireEntry(nil), good.Entries...)
		f(&w)
		b, err := msgpack.Marshal(&w)
		must(t, err)
		return b
	}
	goodBody := edit(func(*wireManifest) {})
	if _, err := DecodeManifest(seal(1, [KeyIDSize]byte{}, goodBody, testKey), testKey); err != nil {
		t.Fatalf("the unedited body: %v", err)
	}
	for name, body := range map[string][]byte{
		"not msgpack":    {0xc1},
		"not a map":      {0x93, 1, 2, 3},
		"trailing":       append(bytes.Clone(goodBody), 0xc0),
		"unknown field":  []byte{0x81, 0xa1, 'x', 1},
		"bad job":        edit(func(w *wireManifest) { w.Job = "../x" }),
		"no entries":     edit(func(w *wireManifest) { w.Entries = nil }),
		"duplicate TID":  edit(func(w *wireManifest) { w.Entries[1].TID = "t1:1" }),
		"duplicate file": edit(func(w *wireManifest) { w.Entries[1].File = "a" }),
		"path in file":   edit(func(w *wireManifest) { w.Entries[1].File = "../../etc/passwd" }),
		"manifest file":  edit(func(w *wireManifest) { w.Entries[1].File = ManifestName }),
		"no TID":         edit(func(w *wireManifest) { w.Entries[1].TID = "" }),
		"no type":        edit(func(w *wireManifest) { w.Entries[1].Type = "" }),
		"negative size":  edit(func(w *wireManifest) { w.Entries[1].Bytes = -1 }),
		"short SHA-256":  edit(func(w *wireManifest) { w.Entries[1].SHA256 = []byte{1} }),
	} {
		_, err := DecodeManifest(seal(1, [KeyIDSize]byte{}, body, testKey), testKey)
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

func TestWriteManifestRefusals(t *testing.T) {
	jobDir := newJobDir(t)
	setDir, m := makeSet(t, jobDir, 1, 3, false)

	bad := *m
	bad.Entries = append([]Entry(nil), m.Entries...)
	bad.Entries[1].File = "../escape"
	wantErr(t, WriteManifest(setDir, &bad, testKey), []error{ErrName}, "../escape")
	bad.Entries[1] = m.Entries[0]
	wantErr(t, WriteManifest(setDir, &bad, testKey), nil, "listed twice")
	bad.Entries = nil
	wantErr(t, WriteManifest(setDir, &bad, testKey), nil, "no task checkpoints")
	wantErr(t, WriteManifest(setDir, m, nil), []error{ErrKey})

	// A manifest of another set or job does not go in this one.
	wrong := *m
	wrong.Seq = 2
	wantErr(t, WriteManifest(setDir, &wrong, testKey), []error{ErrTampered}, "set 2")
	wrong = *m
	wrong.Job = "other"
	wantErr(t, WriteManifest(setDir, &wrong, testKey), []error{ErrTampered}, `job "other"`)

	// Every task checkpoint must be present, with its size, first.
	missing := filepath.Join(setDir, m.Entries[2].File)
	data, err := os.ReadFile(missing)
	must(t, err)
	must(t, os.Remove(missing))
	wantErr(t, WriteManifest(setDir, m, testKey), []error{ErrIncomplete}, missing)
	must(t, os.WriteFile(missing, data[1:], 0o600))
	wantErr(t, WriteManifest(setDir, m, testKey), []error{ErrIncomplete}, missing, "bytes")
	must(t, os.WriteFile(missing, data, 0o600))

	if _, err := os.Stat(filepath.Join(setDir, ManifestName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused manifest was written: %v", err)
	}
	must(t, WriteManifest(setDir, m, testKey))
	// A set is completed once.
	wantErr(t, WriteManifest(setDir, m, testKey), []error{fs.ErrExist}, filepath.Join(setDir, ManifestName))
}

// The shared directory becoming unusable while a set is written: the
// manifest fails cleanly, the set stays incomplete, and the previous set
// is still the latest.
func TestWriteManifestFails(t *testing.T) {
	jobDir := newJobDir(t)
	prevDir, _ := makeSet(t, jobDir, 1, 2, true)
	setDir, m := makeSet(t, jobDir, 2, 2, false)
	// The set directory replaced by a regular file (lost, or another
	// file system mounted badly): creating the temporary file fails.
	must(t, os.RemoveAll(setDir))
	must(t, os.WriteFile(setDir, nil, 0o600))
	err := WriteManifest(setDir, m, testKey)
	if err == nil {
		t.Fatal("WriteManifest into a file succeeded")
	}
	must(t, os.Remove(setDir))
	_, err = NewSet(jobDir, 2)
	must(t, err)
	err = WriteManifest(setDir, m, testKey)
	wantErr(t, err, []error{ErrIncomplete}, m.Entries[0].File)

	dir, got, skipped, err := Latest(jobDir, testKey)
	must(t, err)
	if dir != prevDir || got.Seq != 1 || len(skipped) != 1 || !errors.Is(skipped[0], ErrIncomplete) {
		t.Errorf("Latest = %s, %d, %v", dir, got.Seq, skipped)
	}
}

// TestManifestEpoch: version 2 keeps the machine's epoch clock; a version
// 1 manifest (no epoch) is still read, with Epoch 0, and one that names an
// epoch is refused as corrupt.
func TestManifestEpoch(t *testing.T) {
	jobDir := newJobDir(t)
	_, m := makeSet(t, jobDir, 1, 2, false)
	m.Epoch = 1<<40 + 3
	data, err := EncodeManifest(m, testKey)
	must(t, err)
	got, err := DecodeManifest(data, testKey)
	must(t, err)
	if got.Epoch != m.Epoch || got.Version != FormatVersion {
		t.Fatalf("read back epoch %d (version %d), want %d (version %d)", got.Epoch, got.Version, m.Epoch, FormatVersion)
	}
	body := data[headerLen+KeyIDSize : len(data)-macLen]
	if _, err := DecodeManifest(seal(1, [KeyIDSize]byte{}, body, testKey), testKey); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "epoch") {
		t.Fatalf("a version 1 manifest with an epoch: %v, want ErrCorrupt", err)
	}
	m.Epoch = 0
	data, err = EncodeManifest(m, testKey)
	must(t, err)
	old, err := DecodeManifest(seal(1, [KeyIDSize]byte{}, data[headerLen+KeyIDSize:len(data)-macLen], testKey), testKey)
	must(t, err)
	if old.Version != 1 || old.Epoch != 0 || old.Job != m.Job || len(old.Entries) != len(m.Entries) {
		t.Fatalf("version 1 manifest read as %+v", old)
	}
}

// TestKeyIDAndLink: a manifest of format 2 names its key, which a reader
// with several keys picks by that name (an unknown one refused with the
// reader's error), and carries its link to the previous set; a manifest
// of format 1 (no key id, no link) is still read under the key given.
func TestKeyIDAndLink(t *testing.T) {
	jobDir := newJobDir(t)
	setDir, m := makeSet(t, jobDir, 3, 2, false)
	other := bytes.Repeat([]byte{0x33}, KeySize)
	m.KeyID = [KeyIDSize]byte{9, 8, 7, 6, 5, 4, 3, 2}
	m.PrevSeq, m.PrevSHA256 = 2, sum([]byte("set 2's manifest"))
	errUnknown := errors.New("unknown key")
	keyFor := func(id [KeyIDSize]byte) ([]byte, error) {
		if id == m.KeyID {
			return testKey, nil
		}
		return nil, errUnknown
	}
	must(t, WriteManifest(setDir, m, testKey))
	got, err := ReadManifestWith(setDir, other, keyFor)
	must(t, err)
	if got.Version != FormatVersion || got.KeyID != m.KeyID || got.PrevSeq != 2 || got.PrevSHA256 != m.PrevSHA256 {
		t.Fatalf("read back version %d key %x prev %d %x", got.Version, got.KeyID, got.PrevSeq, got.PrevSHA256)
	}
	path := filepath.Join(setDir, ManifestName)
	data, err := os.ReadFile(path)
	must(t, err)
	bad := bytes.Clone(data)
	bad[headerLen] ^= 0xff
	_, err = DecodeManifestWith(bad, testKey, keyFor)
	wantErr(t, err, []error{errUnknown}, "f608070605040302")
	_, err = DecodeManifest(bad, testKey)
	wantErr(t, err, []error{ErrTampered})

	// A link to a set that is not older is refused.
	w := wireManifest{Job: m.Job, Seq: 3, Root: m.Root, PrevSeq: 3, PrevSHA256: make([]byte, 32)}
	for _, e := range m.Entries {
		w.Entries = append(w.Entries, wireEntry{TID: e.TID, Type: e.Type, File: e.File, Bytes: e.Bytes, SHA256: e.SHA256[:]})
	}
	body, err := msgpack.Marshal(&w)
	must(t, err)
	_, err = DecodeManifest(seal(FormatVersion, m.KeyID, body, testKey), testKey)
	wantErr(t, err, []error{ErrCorrupt}, "follows set 3")
	// Format 1 carries neither.
	_, err = DecodeManifest(seal(1, [KeyIDSize]byte{}, body, testKey), testKey)
	wantErr(t, err, []error{ErrCorrupt}, "format 2 fields")

	// Format 1, as older builds wrote it: read under the key given, with
	// or without keyFor.
	w.PrevSeq, w.PrevSHA256 = 0, nil
	body, err = msgpack.Marshal(&w)
	must(t, err)
	must(t, os.WriteFile(path, seal(1, [KeyIDSize]byte{}, body, testKey), 0o600))
	got, err = ReadManifestWith(setDir, testKey, keyFor)
	must(t, err)
	if got.Version != 1 || got.KeyID != ([KeyIDSize]byte{}) || got.PrevSeq != 0 {
		t.Fatalf("format 1 read back as version %d key %x prev %d", got.Version, got.KeyID, got.PrevSeq)
	}
	_, err = ReadManifestWith(setDir, other, keyFor)
	wantErr(t, err, []error{ErrTampered})
}

// TestManifestOwner: version 3 keeps the job's owner; a version 2
// manifest (no owner) is still read, with Owner empty, and one that names
// an owner is refused as corrupt, as is an owner name past MaxOwnerLen.
func TestManifestOwner(t *testing.T) {
	jobDir := newJobDir(t)
	_, m := makeSet(t, jobDir, 1, 2, false)
	m.Owner = "bob"
	data, err := EncodeManifest(m, testKey)
	must(t, err)
	got, err := DecodeManifest(data, testKey)
	must(t, err)
	if got.Owner != "bob" || got.Version != 3 {
		t.Fatalf("read back owner %q (version %d), want bob (version 3)", got.Owner, got.Version)
	}
	body := data[headerLen+KeyIDSize : len(data)-macLen]
	if _, err := DecodeManifest(seal(2, m.KeyID, body, testKey), testKey); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "owner") {
		t.Fatalf("a version 2 manifest with an owner: %v, want ErrCorrupt", err)
	}
	m.Owner = ""
	data, err = EncodeManifest(m, testKey)
	must(t, err)
	body = data[headerLen+KeyIDSize : len(data)-macLen]
	got, err = DecodeManifest(seal(2, m.KeyID, body, testKey), testKey)
	must(t, err)
	if got.Owner != "" || got.Version != 2 {
		t.Fatalf("a version 2 manifest: owner %q, version %d", got.Owner, got.Version)
	}
	m.Owner = strings.Repeat("x", MaxOwnerLen+1)
	if _, err := EncodeManifest(m, testKey); err == nil {
		t.Fatal("an owner name past MaxOwnerLen was written")
	}
}
