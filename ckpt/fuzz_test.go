package ckpt

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"github.com/dpvm/dpvm/task"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the seed corpus in testdata/fuzz/FuzzRead")

// fuzzSeeds are the seed inputs of FuzzRead: authentic checkpoints of
// several shapes and broken ones. Their bytes are deterministic.
func fuzzSeeds(t testing.TB) map[string][]byte {
	numbers := encode(t, sampleMeta(), randNumbers(rand.New(rand.NewPCG(30, 30)), 3))
	wm := toWire(sampleMeta())
	wm.Type = "ckpt-test.big"
	return map[string][]byte{
		"numbers":      numbers,
		"nested":       encode(t, sampleMeta(), sampleNested(rand.New(rand.NewPCG(31, 31)))),
		"empty":        encode(t, &Meta{TID: task.NewTID(1, 1)}, &empty{}),
		"truncated":    numbers[:len(numbers)/2],
		"evolved-type": craft(t, testKey, wm, stateMap("Gone", mp(1))),
		"absurd-block": craft(t, testKey, wm, stateMap("Data", block(codeFloat64, 1<<40))),
		"gmac":         encodeWith(t, WriteOptions{Auth: AuthGMAC, Rand: seededRand(32)}, sampleMeta(), randNumbers(rand.New(rand.NewPCG(32, 32)), 3)),
		"channel":      encodeWith(t, WriteOptions{Auth: AuthChannel}, sampleMeta(), sampleNested(rand.New(rand.NewPCG(33, 33)))),
	}
}

// TestFuzzCorpus checks the committed seed corpus is what fuzzSeeds
// produces (go test ./ckpt -run TestFuzzCorpus -update-corpus rewrites it).
func TestFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzRead")
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

// FuzzRead: no input makes Read panic, allocate beyond its limits or return a
// task with an error; every refusal wraps a sentinel; an accepted
// checkpoint writes back to one that reads the same.
func FuzzRead(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		// From a file, and from an authenticated channel (where a CRC-32C
		// is all that guards the decoder).
		fuzzRead(t, data, Limits{MaxMeta: 1 << 20, MaxState: 64 << 20, Prealloc: 1 << 20})
		fuzzRead(t, data, Limits{MaxMeta: 1 << 20, MaxState: 64 << 20, Prealloc: 1 << 20, Channel: true})
	})
}

// fuzzRead checks FuzzRead's properties for one input and one Limits.
func fuzzRead(t *testing.T, data []byte, lim Limits) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	m, st, err := ReadLimits(bytes.NewReader(data), testKey, lim)
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*uint64(lim.MaxState) {
		t.Fatalf("allocated %d bytes reading %d", alloc, len(data))
	}
	if err != nil {
		if m != nil || st != nil {
			t.Fatalf("error %v with a result", err)
		}
		for _, s := range []error{ErrCorrupt, ErrTruncated, ErrTampered, ErrVersion, task.ErrUnknownType} {
			if errors.Is(err, s) {
				return
			}
		}
		t.Fatalf("error wraps no sentinel: %v", err)
	}
	var buf bytes.Buffer
	if _, err := Write(&buf, testKey, m, st); err != nil {
		t.Fatalf("rewriting an accepted checkpoint: %v", err)
	}
	m2, st2, err := ReadLimits(&buf, testKey, lim)
	if err != nil {
		t.Fatalf("reading a rewritten checkpoint: %v", err)
	}
	if !reflect.DeepEqual(m, m2) || !reflect.DeepEqual(st, st2) {
		t.Fatal("a rewritten checkpoint reads differently")
	}
}
