package jobset

import (
	"bytes"
	"fmt"
	"testing"
)

// BenchmarkVerify measures Verify of a set of four 16 MiB task
// checkpoints (Latest and Prune pay it for every set they accept): the
// SHA-256 of every file, read back from the file system.
func BenchmarkVerify(b *testing.B) {
	jobDir := newJobDir(b)
	setDir, err := NewSet(jobDir, 1)
	must(b, err)
	m := &Manifest{Job: "pi", Seq: 1, Created: created}
	var total int64
	for i := range 4 {
		e := writeTask(b, setDir, fmt.Sprintf("t%d:1", i+1), bytes.Repeat([]byte{byte(i)}, 16<<20))
		m.Entries = append(m.Entries, e)
		total += e.Bytes
	}
	must(b, WriteManifest(setDir, m, testKey))
	b.SetBytes(total)
	for b.Loop() {
		if err := Verify(setDir, m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadManifest measures reading and authenticating the manifest
// of a 256-task job.
func BenchmarkReadManifest(b *testing.B) {
	jobDir := newJobDir(b)
	setDir, err := NewSet(jobDir, 1)
	must(b, err)
	m := &Manifest{Job: "pi", Seq: 1, Created: created}
	for i := range 256 {
		m.Entries = append(m.Entries, writeTask(b, setDir, fmt.Sprintf("t%d:%d", i%8+1, i+1), []byte("x")))
	}
	must(b, WriteManifest(setDir, m, testKey))
	for b.Loop() {
		if _, err := ReadManifest(setDir, testKey); err != nil {
			b.Fatal(err)
		}
	}
}
