package jobset

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
)

func TestJobNames(t *testing.T) {
	for _, ok := range []string{"pi", "a", "Job_1.2-x", "a..", "-x", "007"} {
		if err := CheckJobName(ok); err != nil {
			t.Errorf("CheckJobName(%q): %v", ok, err)
		}
	}
	long := make([]byte, MaxNameLen+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, bad := range []string{"", ".", "..", "..a", ".hidden", "a/b", "../x", "a b", "a\x00", "é", string(long)} {
		if _, err := JobDir("/root", bad); !errors.Is(err, ErrName) {
			t.Errorf("JobDir(%q): %v, want ErrName", bad, err)
		}
	}
	if dir, err := JobDir("/shared", "pi-3"); err != nil || dir != "/shared/job-pi-3" {
		t.Errorf("JobDir = %q, %v", dir, err)
	}
	if err := CheckJobName(string(long[:MaxNameLen])); err != nil {
		t.Errorf("a name of %d characters: %v", MaxNameLen, err)
	}
}

func TestFileNames(t *testing.T) {
	for _, ok := range []string{"t1-2.ckpt", "a", "MANIFEST.old"} {
		if err := CheckFileName(ok); err != nil {
			t.Errorf("CheckFileName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", ".tmp-x", "a/b", "../x", `a\b`, "a\x00", ManifestName} {
		if err := CheckFileName(bad); !errors.Is(err, ErrName) {
			t.Errorf("CheckFileName(%q): %v, want ErrName", bad, err)
		}
	}
}

func TestSetNames(t *testing.T) {
	if got := SetDir("/j", 7); got != "/j/ckpt-00000007" {
		t.Errorf("SetDir(7) = %q", got)
	}
	if got := SetDir("/j", 123456789); got != "/j/ckpt-123456789" {
		t.Errorf("SetDir(123456789) = %q", got)
	}
	for name, want := range map[string]uint64{"ckpt-00000000": 0, "ckpt-00000042": 42, "ckpt-123456789": 123456789} {
		if seq, ok := parseSetName(name); !ok || seq != want {
			t.Errorf("parseSetName(%q) = %d, %v", name, seq, ok)
		}
	}
	for _, bad := range []string{"ckpt-1", "ckpt-000000001", "ckpt-0000000x", "ckpt--0000001", "ckpt-+0000001", "job-00000001", "ckpt-99999999999999999999"} {
		if seq, ok := parseSetName(bad); ok {
			t.Errorf("parseSetName(%q) = %d, want refusal", bad, seq)
		}
	}
}

func TestListing(t *testing.T) {
	root := t.TempDir()
	jobs, err := Jobs(filepath.Join(root, "missing"))
	if err != nil || jobs != nil {
		t.Errorf("Jobs of a missing root = %v, %v", jobs, err)
	}
	jobDir, err := JobDir(root, "pi")
	must(t, err)
	seqs, err := Sets(jobDir)
	if err != nil || seqs != nil {
		t.Errorf("Sets of a missing job = %v, %v", seqs, err)
	}
	if next, err := NextSeq(jobDir); err != nil || next != 1 {
		t.Errorf("NextSeq of a missing job = %d, %v", next, err)
	}
	for _, seq := range []uint64{3, 1, 12} {
		_, err := NewSet(jobDir, seq)
		must(t, err)
	}
	_, err = NewSet(jobDir, 3)
	if !errors.Is(err, fs.ErrExist) {
		t.Errorf("NewSet of an existing set: %v, want fs.ErrExist", err)
	}
	// Entries that are not sets or jobs are ignored.
	must(t, os.WriteFile(filepath.Join(jobDir, "ckpt-00000099"), nil, 0o600))
	must(t, os.Mkdir(filepath.Join(jobDir, "ckpt-5"), 0o700))
	must(t, os.Mkdir(filepath.Join(jobDir, ".tmp-x"), 0o700))
	otherDir, err := JobDir(root, "other.job")
	must(t, err)
	must(t, os.Mkdir(otherDir, 0o700))
	must(t, os.Mkdir(filepath.Join(root, "job-.x"), 0o700))
	must(t, os.Mkdir(filepath.Join(root, "notajob"), 0o700))
	must(t, os.WriteFile(filepath.Join(root, "job-file"), nil, 0o600))

	seqs, err = Sets(jobDir)
	must(t, err)
	if !reflect.DeepEqual(seqs, []uint64{1, 3, 12}) {
		t.Errorf("Sets = %v, want [1 3 12]", seqs)
	}
	if next, err := NextSeq(jobDir); err != nil || next != 13 {
		t.Errorf("NextSeq = %d, %v; want 13", next, err)
	}
	jobs, err = Jobs(root)
	must(t, err)
	if !reflect.DeepEqual(jobs, []string{"other.job", "pi"}) {
		t.Errorf("Jobs = %v", jobs)
	}
}

func TestDirectoryModes(t *testing.T) {
	jobDir := newJobDir(t)
	setDir, _ := makeSet(t, jobDir, 1, 2, true)
	for path, want := range map[string]fs.FileMode{
		jobDir:                              0o700 | fs.ModeDir,
		setDir:                              0o700 | fs.ModeDir,
		filepath.Join(setDir, ManifestName): 0o600,
	} {
		fi, err := os.Stat(path)
		must(t, err)
		if fi.Mode() != want {
			t.Errorf("%s has mode %v, want %v", path, fi.Mode(), want)
		}
	}
}

// An unwritable shared directory (simulated by a path under a regular
// file, which fails for every user) fails cleanly with the OS error
// wrapped.
func TestNewSetUnwritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "plain")
	must(t, os.WriteFile(file, nil, 0o600))
	jobDir, err := JobDir(file, "pi")
	must(t, err)
	_, err = NewSet(jobDir, 1)
	wantErr(t, err, []error{syscall.ENOTDIR}, "new set 1")
	if _, err := Sets(jobDir); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("Sets under a file: %v, want ENOTDIR", err)
	}
}
