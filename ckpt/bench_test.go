package ckpt

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/dpvm/dpvm/task"
)

var benchSizes = []int{1, 16, 256} // MiB

// bigState returns a task holding mib MiB of random float64s.
func bigState(mib int) *big {
	s := &big{Iter: 1, Data: make([]float64, mib<<20/8)}
	r := rand.New(rand.NewPCG(uint64(mib), 1))
	for i := range s.Data {
		s.Data[i] = r.NormFloat64()
	}
	return s
}

func encodeBig(b *testing.B, s task.Task, size int) []byte {
	var buf bytes.Buffer
	buf.Grow(size + 4096)
	if _, err := Write(&buf, testKey, sampleMeta(), s); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// BenchmarkWriteFloat64 writes a checkpoint of a task holding one []float64
// (to io.Discard: the codec and the MAC, no I/O).
func BenchmarkWriteFloat64(b *testing.B) {
	for _, mib := range benchSizes {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			s := bigState(mib)
			b.SetBytes(int64(mib) << 20)
			for b.Loop() {
				if _, err := Write(io.Discard, testKey, sampleMeta(), s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReadFloat64 reads it back from memory, into a new task.
func BenchmarkReadFloat64(b *testing.B) {
	for _, mib := range benchSizes {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			enc := encodeBig(b, bigState(mib), mib<<20)
			b.SetBytes(int64(mib) << 20)
			for b.Loop() {
				if _, _, err := Read(bytes.NewReader(enc), testKey); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReadFloat64Stream reads it from a stream of unknown length with
// the default Limits, so blocks over Limits.Prealloc grow as they arrive.
func BenchmarkReadFloat64Stream(b *testing.B) {
	for _, mib := range benchSizes {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			enc := encodeBig(b, bigState(mib), mib<<20)
			b.SetBytes(int64(mib) << 20)
			for b.Loop() {
				if _, _, err := Read(hideLen{bytes.NewReader(enc)}, testKey); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMsgpackFloat64 is plain msgpack of the same struct, element by
// element, for comparison.
func BenchmarkMsgpackFloat64(b *testing.B) {
	for _, mib := range benchSizes {
		s := bigState(mib)
		enc, err := msgpack.Marshal(s)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("Encode/%dMiB", mib), func(b *testing.B) {
			b.SetBytes(int64(mib) << 20)
			e := msgpack.NewEncoder(io.Discard)
			for b.Loop() {
				if err := e.Encode(s); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("Decode/%dMiB", mib), func(b *testing.B) {
			b.SetBytes(int64(mib) << 20)
			for b.Loop() {
				var out big
				if err := msgpack.Unmarshal(enc, &out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// kinds holds 16 MiB of one of the other numeric kinds NPB kernels use.
type kinds struct {
	C128 []complex128
	I32  []int32
	F32  []float32
}

func (*kinds) Run(*task.Ctx) error { return nil }

func init() { task.Register("ckpt-test.kinds", (*kinds)(nil)) }

// BenchmarkKinds writes and reads 16 MiB of []complex128, []int32 and
// []float32.
func BenchmarkKinds(b *testing.B) {
	const size = 16 << 20
	states := map[string]*kinds{
		"complex128": {C128: make([]complex128, size/16)},
		"int32":      {I32: make([]int32, size/4)},
		"float32":    {F32: make([]float32, size/4)},
	}
	for _, name := range []string{"complex128", "int32", "float32"} {
		s := states[name]
		r := rand.NewChaCha8([32]byte{7})
		switch {
		case s.C128 != nil:
			r.Read(memBytes(unsafe.Pointer(&s.C128[0]), len(s.C128), 16))
		case s.I32 != nil:
			r.Read(memBytes(unsafe.Pointer(&s.I32[0]), len(s.I32), 4))
		default:
			r.Read(memBytes(unsafe.Pointer(&s.F32[0]), len(s.F32), 4))
		}
		b.Run("Write/"+name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				if _, err := Write(io.Discard, testKey, sampleMeta(), s); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("Read/"+name, func(b *testing.B) {
			enc := encodeBig(b, s, size)
			b.SetBytes(size)
			for b.Loop() {
				if _, _, err := Read(bytes.NewReader(enc), testKey); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDirRoundTrip saves a checkpoint in a temporary directory, opens
// and reads it back (Dir.Save + Dir.Open + Read), for comparison with
// BenchmarkRawFileRoundTrip of the same bytes.
func BenchmarkDirRoundTrip(b *testing.B) {
	for _, mib := range benchSizes {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			d := Dir{Path: b.TempDir()}
			s := bigState(mib)
			b.SetBytes(int64(mib) << 20)
			for b.Loop() {
				if _, err := saveTaskB(d, s); err != nil {
					b.Fatal(err)
				}
				f, err := d.Open("c")
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := Read(f, testKey); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}

func saveTaskB(d Dir, s task.Task) (int64, error) {
	return d.Save("c", func(w io.Writer) error {
		_, err := Write(w, testKey, sampleMeta(), s)
		return err
	})
}

// BenchmarkRawFileRoundTrip writes the state's bytes to a file with fsync
// and reads them back into a new slice: the floor for the indirect store.
func BenchmarkRawFileRoundTrip(b *testing.B) {
	for _, mib := range benchSizes {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "raw")
			s := bigState(mib)
			data := memBytes(unsafe.Pointer(&s.Data[0]), len(s.Data), 8)
			b.SetBytes(int64(mib) << 20)
			for b.Loop() {
				f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := f.Write(data); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
				f.Close()
				f, err = os.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				out := NewBytes(len(data)) // fresh memory, as a restore's
				if _, err := io.ReadFull(f, out); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}

// BenchmarkAuth writes (to io.Discard) and reads back (from memory, into a
// new task) 16 MiB of []float64 under each authentication.
func BenchmarkAuth(b *testing.B) {
	s := bigState(16)
	for _, a := range []Auth{AuthHMAC, AuthGMAC, AuthChannel} {
		o := WriteOptions{Auth: a}
		b.Run(a.String()+"/write", func(b *testing.B) {
			b.SetBytes(16 << 20)
			for b.Loop() {
				if _, err := WriteWith(io.Discard, testKey, sampleMeta(), s, o); err != nil {
					b.Fatal(err)
				}
			}
		})
		var buf bytes.Buffer
		if _, err := WriteWith(&buf, testKey, sampleMeta(), s, o); err != nil {
			b.Fatal(err)
		}
		enc := buf.Bytes()
		b.Run(a.String()+"/read", func(b *testing.B) {
			b.SetBytes(16 << 20)
			for b.Loop() {
				if _, _, err := ReadLimits(bytes.NewReader(enc), testKey, Limits{Channel: true}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
