package jobset

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

const (
	// FormatVersion is the manifest format this build writes and the
	// newest it reads. Version 2 adds the key id, the epoch and the link to
	// the previous set; version 3 the job's owner. Version 1 manifests are
	// read with none of them, version 2 without an owner.
	FormatVersion = 3
	// KeySize is the length of the key that authenticates manifests.
	KeySize = 32
	// MaxManifestSize bounds a manifest file; a larger one is refused
	// before it is read.
	MaxManifestSize = 16 << 20

	magic     = "DPVMJOBM"
	headerLen = len(magic) + 2 + 2 + 4 // magic, version, flags, body length
	macLen    = sha256.Size
	// KeyIDSize is the length of the key identifier that follows the
	// header from format 2 on.
	KeyIDSize = 8
)

// KeyFunc picks the key a manifest of format 2 names by its identifier
// (not called for a zero identifier, which names no key); its error (an
// unknown key) is returned wrapped.
type KeyFunc func(id [KeyIDSize]byte) ([]byte, error)

// Entry describes one task checkpoint of a set.
type Entry struct {
	// TID names the task (its printed form, "t1:2").
	TID string
	// Type is the task's type name.
	Type string
	// Host is the host whose daemon wrote the checkpoint.
	Host string
	// File is the checkpoint's file name inside the set directory (see
	// CheckFileName).
	File string
	// Bytes is the file's size.
	Bytes int64
	// SHA256 is the SHA-256 of the file's contents.
	SHA256 [32]byte
}

// Manifest names every task checkpoint of a set. It is written last: a
// set without one is incomplete.
type Manifest struct {
	// Version is the format version the manifest was read in; WriteManifest
	// accepts 0 (meaning FormatVersion) or FormatVersion.
	Version int
	// Job is the job's name (see CheckJobName).
	Job string
	// Seq is the set's sequence number.
	Seq uint64
	// Created is when the checkpoint was taken (kept to the nanosecond, read
	// back in UTC).
	Created time.Time
	// Root is the TID of the job's root task.
	Root string
	// Program and Args are the program the job runs and its arguments.
	Program string
	Args    []string
	// Entries lists the task checkpoints, at least one; TIDs and file
	// names are unique.
	Entries []Entry
	// Epoch is the virtual machine's route epoch clock when the set was
	// taken: a machine restoring the set gives its tasks epochs above it,
	// so that no route of theirs goes back, even where the master that
	// restores them has not seen the epochs of the one that checkpointed
	// them (a recovered master, another machine on the same hosts).
	Epoch uint64
	// KeyID names the key the manifest is authenticated under (format 2;
	// zero in a manifest of format 1).
	KeyID [KeyIDSize]byte
	// PrevSeq and PrevSHA256 link the set to the job's previous complete
	// set: its sequence number and its manifest file's SHA-256 (zero for
	// a job's first set and in format 1). A reader that meets an older set
	// whose successor it has seen can tell that newer sets existed.
	PrevSeq    uint64
	PrevSHA256 [32]byte
	// Owner is the name on the user certificate of the person whose job
	// the set is (format 3; empty in older formats and for a job no
	// person started): a daemon restarts the set as that person's job,
	// and only for them or an admin.
	Owner string
}

// MaxOwnerLen bounds a manifest's owner name, in bytes.
const MaxOwnerLen = 256

// wireManifest and wireEntry are the msgpack body of format version 2
// (version 1: without epoch). Field names are part of the format: never
// rename one, only add fields with a new version.
type wireManifest struct {
	Job     string      `msgpack:"job"`
	Seq     uint64      `msgpack:"seq"`
	Created time.Time   `msgpack:"created"`
	Root    string      `msgpack:"root"`
	Program string      `msgpack:"program"`
	Args    []string    `msgpack:"args"`
	Entries []wireEntry `msgpack:"entries"`
	Epoch   uint64      `msgpack:"epoch,omitempty"`
	// Format 2.
	PrevSeq    uint64 `msgpack:"prev_seq,omitempty"`
	PrevSHA256 []byte `msgpack:"prev_sha256,omitempty"`
	// Format 3.
	Owner string `msgpack:"owner,omitempty"`
}

type wireEntry struct {
	TID    string `msgpack:"tid"`
	Type   string `msgpack:"type"`
	Host   string `msgpack:"host"`
	File   string `msgpack:"file"`
	Bytes  int64  `msgpack:"bytes"`
	SHA256 []byte `msgpack:"sha256"`
}

func checkKey(key []byte) error {
	if len(key) != KeySize {
		return fmt.Errorf("key of %d bytes, want %d: %w", len(key), KeySize, ErrKey)
	}
	return nil
}

// validate checks what a manifest says, independently of where it lies.
func (m *Manifest) validate() error {
	if err := CheckJobName(m.Job); err != nil {
		return err
	}
	if len(m.Entries) == 0 {
		return errors.New("no task checkpoints")
	}
	if len(m.Owner) > MaxOwnerLen {
		return fmt.Errorf("owner name of %d bytes, at most %d", len(m.Owner), MaxOwnerLen)
	}
	tids := make(map[string]bool, len(m.Entries))
	files := make(map[string]bool, len(m.Entries))
	for i, e := range m.Entries {
		if err := CheckFileName(e.File); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		switch {
		case e.TID == "":
			return fmt.Errorf("entry %d (%s): no TID", i, e.File)
		case e.Type == "":
			return fmt.Errorf("entry %d (%s): no task type", i, e.File)
		case e.Bytes < 0:
			return fmt.Errorf("entry %d (%s): negative size %d", i, e.File, e.Bytes)
		case tids[e.TID]:
			return fmt.Errorf("entry %d (%s): TID %s listed twice", i, e.File, e.TID)
		case files[e.File]:
			return fmt.Errorf("entry %d: file %s listed twice", i, e.File)
		}
		tids[e.TID] = true
		files[e.File] = true
	}
	return nil
}

// checkPlace refuses a manifest that does not belong in setDir: the set
// directory's name must carry m.Seq and its parent's must be m.Job's.
// This keeps an authentic manifest from being replayed in another set or
// another job's directory.
func checkPlace(setDir string, m *Manifest) error {
	abs := filepath.Clean(setDir)
	seq, ok := parseSetName(filepath.Base(abs))
	if !ok {
		return fmt.Errorf("%s is not a set directory (want %s<seq>)", setDir, setPrefix)
	}
	if seq != m.Seq {
		return fmt.Errorf("manifest of set %d lies in %s: %w", m.Seq, setDir, ErrTampered)
	}
	if parent := filepath.Base(filepath.Dir(abs)); parent != jobPrefix+m.Job {
		return fmt.Errorf("manifest of job %q lies in %s: %w", m.Job, filepath.Dir(abs), ErrTampered)
	}
	return nil
}

// EncodeManifest returns m's bytes in the current format, authenticated
// under key.
//
// The format (integers little endian):
//
//	magic    8 bytes  "DPVMJOBM"
//	version  uint16   FormatVersion (3)
//	flags    uint16   0
//	length   uint32   the body's length
//	key id   8 bytes  m.KeyID, the key's identifier (from format 2 on)
//	body     msgpack map: job, seq, created, root, program, args, entries
//	         (each entry a map: tid, type, host, file, bytes, sha256),
//	         and from format 2 on epoch (left out when 0), prev_seq and
//	         prev_sha256 when the set has a predecessor, and from format
//	         3 on owner (left out when empty)
//	mac      32 bytes HMAC-SHA256 under key of every byte before it
//
// Format 2 has no owner, format 1 no key id and no prev fields; both are
// still read.
func EncodeManifest(m *Manifest, key []byte) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("jobset: encode manifest: %w", err)
	}
	if m.Version != 0 && m.Version != FormatVersion {
		return nil, fmt.Errorf("jobset: encode manifest: version %d, this build writes %d", m.Version, FormatVersion)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("jobset: encode manifest: %w", err)
	}
	w := wireManifest{Job: m.Job, Seq: m.Seq, Created: m.Created.UTC(), Root: m.Root, Program: m.Program, Args: m.Args, Epoch: m.Epoch, PrevSeq: m.PrevSeq, Owner: m.Owner}
	if m.PrevSeq != 0 {
		w.PrevSHA256 = m.PrevSHA256[:]
	}
	for _, e := range m.Entries {
		w.Entries = append(w.Entries, wireEntry{TID: e.TID, Type: e.Type, Host: e.Host, File: e.File, Bytes: e.Bytes, SHA256: e.SHA256[:]})
	}
	body, err := msgpack.Marshal(&w)
	if err != nil {
		return nil, fmt.Errorf("jobset: encode manifest: %w", err)
	}
	if n := headerLen + KeyIDSize + len(body) + macLen; n > MaxManifestSize {
		return nil, fmt.Errorf("jobset: encode manifest: %d bytes exceed the limit of %d", n, MaxManifestSize)
	}
	return seal(FormatVersion, m.KeyID, body, key), nil
}

// seal frames body under version (with the key id from format 2 on) and
// appends the MAC.
func seal(version uint16, id [KeyIDSize]byte, body, key []byte) []byte {
	b := make([]byte, 0, headerLen+KeyIDSize+len(body)+macLen)
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint16(b, version)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(body)))
	if version >= 2 {
		b = append(b, id[:]...)
	}
	b = append(b, body...)
	mac := hmac.New(sha256.New, key)
	mac.Write(b)
	return mac.Sum(b)
}

// DecodeManifest reads a manifest from its bytes, checking in turn the
// magic and the version (ErrCorrupt, ErrVersion: a newer format is refused
// before its MAC is looked at, as its framing may differ), the length
// (ErrCorrupt), the MAC under key (ErrTampered), and the body (ErrCorrupt).
// Nothing of the body is decoded unless its MAC is right.
func DecodeManifest(data, key []byte) (*Manifest, error) {
	return DecodeManifestWith(data, key, nil)
}

// DecodeManifestWith is DecodeManifest where keyFor, if not nil, picks the
// key of a manifest that names one (format 2); a manifest of format 1 is
// checked under key.
func DecodeManifestWith(data, key []byte, keyFor KeyFunc) (*Manifest, error) {
	if err := checkKey(key); err != nil && keyFor == nil {
		return nil, err
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("empty file: %w", ErrCorrupt)
	}
	if len(data) < len(magic) || string(data[:len(magic)]) != magic {
		return nil, fmt.Errorf("not a job manifest (bad magic): %w", ErrCorrupt)
	}
	if len(data) < headerLen {
		return nil, fmt.Errorf("truncated header (%d bytes): %w", len(data), ErrCorrupt)
	}
	version := binary.LittleEndian.Uint16(data[8:])
	switch {
	case version == 0:
		return nil, fmt.Errorf("format version 0: %w", ErrCorrupt)
	case version > FormatVersion:
		return nil, fmt.Errorf("format version %d is newer than this build reads (%d): %w", version, FormatVersion, ErrVersion)
	}
	if flags := binary.LittleEndian.Uint16(data[10:]); flags != 0 {
		return nil, fmt.Errorf("unknown flags %#x: %w", flags, ErrCorrupt)
	}
	bodyLen := int64(binary.LittleEndian.Uint32(data[12:]))
	hl := headerLen
	var id [KeyIDSize]byte
	if version >= 2 {
		hl += KeyIDSize
		if len(data) < hl {
			return nil, fmt.Errorf("truncated header (%d bytes): %w", len(data), ErrCorrupt)
		}
		copy(id[:], data[headerLen:])
		if keyFor != nil && id != ([KeyIDSize]byte{}) {
			k, err := keyFor(id)
			if err != nil {
				return nil, fmt.Errorf("key %x: %w", id[:], err)
			}
			key = k
		}
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if want := int64(hl) + bodyLen + macLen; int64(len(data)) != want {
		what := "truncated"
		if int64(len(data)) > want {
			what = "trailing bytes"
		}
		return nil, fmt.Errorf("%s: %d bytes, the header announces %d: %w", what, len(data), want, ErrCorrupt)
	}
	signed, sum := data[:len(data)-macLen], data[len(data)-macLen:]
	mac := hmac.New(sha256.New, key)
	mac.Write(signed)
	if !hmac.Equal(mac.Sum(nil), sum) {
		return nil, fmt.Errorf("MAC mismatch (altered, or written under another key): %w", ErrTampered)
	}
	m, err := decodeBody(signed[hl:], version)
	if err != nil {
		return nil, err
	}
	m.Version = int(version)
	m.KeyID = id
	if version < 2 && (m.PrevSeq != 0 || m.PrevSHA256 != [32]byte{}) {
		return nil, fmt.Errorf("body: a format 1 manifest with format 2 fields: %w", ErrCorrupt)
	}
	if m.PrevSeq >= m.Seq && m.PrevSeq != 0 {
		return nil, fmt.Errorf("body: set %d follows set %d: %w", m.Seq, m.PrevSeq, ErrCorrupt)
	}
	return m, nil
}

// decodeBody decodes and validates an authenticated body of the given
// format version. It
// decodes field by field rather than through reflection, so that an array
// length is checked against the bytes left before anything is allocated
// for it (the body is authentic, but a writer's bug or a leaked key must
// not make a reader allocate without bound).
func decodeBody(body []byte, version uint16) (*Manifest, error) {
	r := bytes.NewReader(body)
	dec := msgpack.NewDecoder(r)
	m, err := decodeManifest(dec, r, version)
	if err != nil {
		return nil, fmt.Errorf("body: %v: %w", err, ErrCorrupt)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("body: %d bytes after the manifest: %w", r.Len(), ErrCorrupt)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("body: %v: %w", err, ErrCorrupt)
	}
	return m, nil
}

// arrayLen decodes an array's length (nil counts as empty) and refuses
// one with more elements than bytes are left.
func arrayLen(dec *msgpack.Decoder, r *bytes.Reader, what string) (int, error) {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if n > r.Len() {
		return 0, fmt.Errorf("%s: %d elements in %d bytes", what, n, r.Len())
	}
	return max(n, 0), nil
}

func decodeManifest(dec *msgpack.Decoder, r *bytes.Reader, version uint16) (*Manifest, error) {
	n, err := dec.DecodeMapLen()
	if err != nil {
		return nil, err
	}
	m := &Manifest{}
	for range n {
		key, err := dec.DecodeString()
		if err != nil {
			return nil, fmt.Errorf("field name: %w", err)
		}
		switch key {
		case "job":
			m.Job, err = dec.DecodeString()
		case "seq":
			m.Seq, err = dec.DecodeUint64()
		case "created":
			m.Created, err = dec.DecodeTime()
			m.Created = m.Created.UTC()
		case "root":
			m.Root, err = dec.DecodeString()
		case "program":
			m.Program, err = dec.DecodeString()
		case "args":
			var k int
			if k, err = arrayLen(dec, r, "args"); err == nil && k > 0 {
				m.Args = make([]string, k)
				for i := range m.Args {
					if m.Args[i], err = dec.DecodeString(); err != nil {
						break
					}
				}
			}
		case "epoch":
			if version < 2 {
				return nil, fmt.Errorf("field epoch in a version %d manifest", version)
			}
			m.Epoch, err = dec.DecodeUint64()
		case "owner":
			if version < 3 {
				return nil, fmt.Errorf("field owner in a version %d manifest", version)
			}
			m.Owner, err = dec.DecodeString()
		case "prev_seq":
			m.PrevSeq, err = dec.DecodeUint64()
		case "prev_sha256":
			var b []byte
			if b, err = dec.DecodeBytes(); err == nil && len(b) != sha256.Size {
				err = fmt.Errorf("%d bytes, want %d", len(b), sha256.Size)
			}
			copy(m.PrevSHA256[:], b)
		case "entries":
			var k int
			if k, err = arrayLen(dec, r, "entries"); err == nil {
				m.Entries = make([]Entry, k)
				for i := range m.Entries {
					if err = decodeEntry(dec, &m.Entries[i]); err != nil {
						err = fmt.Errorf("entry %d: %w", i, err)
						break
					}
				}
			}
		default:
			return nil, fmt.Errorf("unknown field %q", key)
		}
		if err != nil {
			return nil, fmt.Errorf("field %s: %w", key, err)
		}
	}
	return m, nil
}

func decodeEntry(dec *msgpack.Decoder, e *Entry) error {
	n, err := dec.DecodeMapLen()
	if err != nil {
		return err
	}
	for range n {
		key, err := dec.DecodeString()
		if err != nil {
			return fmt.Errorf("field name: %w", err)
		}
		switch key {
		case "tid":
			e.TID, err = dec.DecodeString()
		case "type":
			e.Type, err = dec.DecodeString()
		case "host":
			e.Host, err = dec.DecodeString()
		case "file":
			e.File, err = dec.DecodeString()
		case "bytes":
			e.Bytes, err = dec.DecodeInt64()
		case "sha256":
			var b []byte
			if b, err = dec.DecodeBytes(); err == nil && len(b) != sha256.Size {
				err = fmt.Errorf("%d bytes, want %d", len(b), sha256.Size)
			}
			copy(e.SHA256[:], b)
		default:
			return fmt.Errorf("unknown field %q", key)
		}
		if err != nil {
			return fmt.Errorf("field %s: %w", key, err)
		}
	}
	return nil
}

// WriteManifest completes the set in setDir by writing m, authenticated
// under key, as its manifest: a temporary file (mode 0600) is written,
// synced, renamed to MANIFEST, and the directory synced. Before writing it
// checks that m belongs in setDir (its Seq and Job match the directory's
// names), that every entry's file is present with its recorded size (else
// ErrIncomplete naming the file), and that the set has no manifest yet
// (fs.ErrExist). On any error (a full disk, an unwritable directory) the
// temporary file is removed and the set stays incomplete, so readers keep
// using the previous set.
func WriteManifest(setDir string, m *Manifest, key []byte) (err error) {
	data, err := EncodeManifest(m, key)
	if err != nil {
		return err
	}
	if err := checkPlace(setDir, m); err != nil {
		return fmt.Errorf("jobset: write manifest: %w", err)
	}
	for _, e := range m.Entries {
		path := filepath.Join(setDir, e.File)
		fi, err := os.Lstat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("jobset: write manifest: task %s: %s is missing: %w", e.TID, path, ErrIncomplete)
		case err != nil:
			return fmt.Errorf("jobset: write manifest: task %s: %w", e.TID, err)
		case !fi.Mode().IsRegular():
			return fmt.Errorf("jobset: write manifest: task %s: %s is not a regular file: %w", e.TID, path, ErrCorrupt)
		case fi.Size() != e.Bytes:
			return fmt.Errorf("jobset: write manifest: task %s: %s has %d bytes, the entry says %d: %w", e.TID, path, fi.Size(), e.Bytes, ErrIncomplete)
		}
	}
	final := filepath.Join(setDir, ManifestName)
	if _, err := os.Lstat(final); err == nil {
		return fmt.Errorf("jobset: write manifest: %s: %w", final, fs.ErrExist)
	}
	f, err := os.CreateTemp(setDir, ".tmp-"+ManifestName+"-*")
	if err != nil {
		return fmt.Errorf("jobset: write manifest in %s: %w", setDir, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
			err = fmt.Errorf("jobset: write manifest %s: %w", final, err)
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
	if err := syncDir(setDir); err != nil {
		// The manifest is in place and complete; only its durability is in
		// doubt, and the caller hears of it.
		return fmt.Errorf("fsync directory: %w", err)
	}
	return nil
}

// ReadManifest reads and authenticates the manifest of the set in setDir.
// Errors name the manifest's path and wrap ErrIncomplete (no manifest),
// ErrMode (readable by others), ErrCorrupt (not a regular file, larger
// than MaxManifestSize, malformed), ErrVersion, or ErrTampered (bad MAC,
// or an authentic manifest of another set or job). It does not look at the
// task checkpoints: see Verify.
func ReadManifest(setDir string, key []byte) (*Manifest, error) {
	return ReadManifestWith(setDir, key, nil)
}

// ReadManifestWith is ReadManifest where keyFor, if not nil, picks the key
// of a manifest that names one (see DecodeManifestWith).
func ReadManifestWith(setDir string, key []byte, keyFor KeyFunc) (*Manifest, error) {
	m, _, err := readManifestFile(filepath.Join(setDir, ManifestName), key, keyFor)
	if err != nil {
		return nil, err
	}
	if err := checkPlace(setDir, m); err != nil {
		return nil, fmt.Errorf("jobset: %s: %w", filepath.Join(setDir, ManifestName), err)
	}
	return m, nil
}

// readManifestFile reads and authenticates the manifest file at path,
// returning it with the file's bytes; it does not check where it lies.
func readManifestFile(path string, key []byte, keyFor KeyFunc) (*Manifest, []byte, error) {
	if err := checkKey(key); err != nil && keyFor == nil {
		return nil, nil, fmt.Errorf("jobset: read %s: %w", path, err)
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("jobset: %s: no manifest: %w", path, ErrIncomplete)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("jobset: read manifest: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("jobset: read manifest: %w", err)
	}
	if err := checkFile(path, fi); err != nil {
		return nil, nil, fmt.Errorf("jobset: %w", err)
	}
	if fi.Size() > MaxManifestSize {
		return nil, nil, fmt.Errorf("jobset: %s: %d bytes exceed the limit of %d: %w", path, fi.Size(), MaxManifestSize, ErrCorrupt)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxManifestSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("jobset: read %s: %w", path, err)
	}
	m, err := DecodeManifestWith(data, key, keyFor)
	if err != nil {
		return nil, nil, fmt.Errorf("jobset: %s: %w", path, err)
	}
	return m, data, nil
}

// checkFile refuses a set's file that is not a regular file or whose mode
// lets others than its owner read or write it.
func checkFile(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s): %w", path, fi.Mode().Type(), ErrCorrupt)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s has mode %#o, want 0600 or stricter: %w", path, perm, ErrMode)
	}
	return nil
}
