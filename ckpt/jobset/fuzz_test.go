package jobset

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the seed corpus in testdata/fuzz/FuzzReadManifest")

// fuzzSeeds are the seed inputs of FuzzReadManifest: authentic manifests
// and broken ones. Their bytes are deterministic.
func fuzzSeeds(t testing.TB) map[string][]byte {
	small := &Manifest{Job: "pi", Seq: 1, Created: created, Root: "t1:1", Program: "pi", Args: []string{"-n", "10"},
		Entries: []Entry{{TID: "t1:1", Type: "pi.master", Host: "h1", File: "t1-1.ckpt", Bytes: 10, SHA256: sum([]byte("0123456789"))}}}
	big := &Manifest{Job: "jacobi.2", Seq: 123456789, Created: created.Add(time.Hour), Root: "t1:1", Program: "jacobi", Epoch: 1 << 33}
	for i := range 20 {
		big.Entries = append(big.Entries, Entry{TID: fmt.Sprintf("t%d:%d", i%4+1, i+1), Type: "jacobi.worker", Host: fmt.Sprintf("h%d", i%4+1),
			File: fmt.Sprintf("t%d.ckpt", i), Bytes: int64(i) << 20, SHA256: sum([]byte{byte(i)})})
	}
	enc := func(m *Manifest) []byte {
		b, err := EncodeManifest(m, testKey)
		must(t, err)
		return b
	}
	s, b := enc(small), enc(big)
	body := s[headerLen+KeyIDSize : len(s)-macLen]
	dup := wireManifest{Job: "pi", Seq: 1, Entries: []wireEntry{{TID: "a", Type: "x", File: "f", SHA256: make([]byte, 32)}, {TID: "a", Type: "x", File: "g", SHA256: make([]byte, 32)}}}
	dupBody, err := msgpack.Marshal(&dup)
	must(t, err)
	otherKey := bytes.Repeat([]byte{1}, KeySize)
	wrongKey, err := EncodeManifest(small, otherKey)
	must(t, err)
	return map[string][]byte{
		"small":          s,
		"big":            b,
		"wrong-key":      wrongKey,
		"truncated":      s[:len(s)/2],
		"newer-version":  seal(FormatVersion+1, [KeyIDSize]byte{}, body, testKey),
		"version-1":      seal(1, [KeyIDSize]byte{}, body, testKey),
		"garbage-body":   seal(FormatVersion, [KeyIDSize]byte{}, []byte{0x93, 0xc1, 0xff, 0x00}, testKey),
		"duplicate-tids": seal(FormatVersion, [KeyIDSize]byte{}, dupBody, testKey),
		"huge-array":     seal(FormatVersion, [KeyIDSize]byte{}, []byte{0x81, 0xa7, 0x65, 0x6e, 0x74, 0x72, 0x69, 0x65, 0x73, 0xdd, 0xff, 0xff, 0xff, 0xff}, testKey),
	}
}

// TestFuzzCorpus checks the committed seed corpus is what fuzzSeeds
// produces (go test ./ckpt/jobset -run TestFuzzCorpus -update-corpus
// rewrites it).
func TestFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzReadManifest")
	for name, b := range fuzzSeeds(t) {
		path := filepath.Join(dir, name)
		want := fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", b)
		if *updateCorpus {
			must(t, os.MkdirAll(dir, 0o755))
			must(t, os.WriteFile(path, want, 0o644))
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("seed %s is missing or stale (%v): rerun with -update-corpus", path, err)
		}
	}
}

// FuzzReadManifest: no input makes ReadManifest or DecodeManifest panic
// or allocate without bound; both agree; every refusal wraps a sentinel;
// nothing is accepted without a valid MAC; and an accepted manifest
// encodes back to one that reads the same. The input is also tried as a
// body under a valid MAC, which reaches the decoder and the validation.
func FuzzReadManifest(f *testing.F) {
	setDir := SetDir(filepath.Join(f.TempDir(), "job-pi"), 1)
	must(f, os.MkdirAll(setDir, 0o700))
	path := filepath.Join(setDir, ManifestName)
	sentinels := []error{ErrCorrupt, ErrTampered, ErrVersion}
	check := func(t *testing.T, data []byte, m *Manifest, err error) {
		if err != nil {
			if m != nil {
				t.Fatalf("error %v with a manifest", err)
			}
			for _, s := range sentinels {
				if errors.Is(err, s) {
					return
				}
			}
			t.Fatalf("error wraps no sentinel: %v", err)
		}
		mac := hmac.New(sha256.New, testKey)
		mac.Write(data[:len(data)-macLen])
		if len(data) < headerLen+macLen || !hmac.Equal(mac.Sum(nil), data[len(data)-macLen:]) {
			t.Fatal("accepted a manifest without a valid MAC")
		}
		// Re-encoded in the current format (a format 1 manifest has no
		// key id and no link, which format 2 writes as zero and absent).
		cur := *m
		cur.Version = 0
		b, err := EncodeManifest(&cur, testKey)
		if err != nil {
			t.Fatalf("re-encoding an accepted manifest: %v", err)
		}
		m2, err := DecodeManifest(b, testKey)
		if err == nil {
			m2.Version = m.Version
		}
		if err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("a re-encoded manifest reads differently: %v", err)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		m, err := DecodeManifest(data, testKey)
		check(t, data, m, err)

		must(t, os.WriteFile(path, data, 0o600))
		fm, ferr := ReadManifest(setDir, testKey)
		// ReadManifest also refuses an authentic manifest of another set.
		if (err == nil) != (ferr == nil) && !(ferr != nil && errors.Is(ferr, ErrTampered) && m != nil && (m.Seq != 1 || m.Job != "pi")) {
			t.Fatalf("DecodeManifest: %v; ReadManifest: %v", err, ferr)
		}
		if ferr == nil && !reflect.DeepEqual(m, fm) {
			t.Fatal("DecodeManifest and ReadManifest read differently")
		}

		sealed := seal(FormatVersion, [KeyIDSize]byte{}, data, testKey)
		m, err = DecodeManifest(sealed, testKey)
		check(t, sealed, m, err)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20+64*uint64(len(data)) {
			t.Fatalf("allocated %d bytes reading %d", alloc, len(data))
		}
	})
}
