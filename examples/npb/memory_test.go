package npb

import (
	"errors"
	"runtime"
	"testing"
)

const meminfoSample = `MemTotal:       24576000 kB
MemFree:        20000000 kB
MemAvailable:   22000000 kB
Buffers:          100000 kB
`

func TestParseMemAvailable(t *testing.T) {
	cases := []struct {
		text string
		want int64
		ok   bool
	}{
		{meminfoSample, 22000000 << 10, true},
		{"MemAvailable: 0 kB\n", 0, true},
		{"MemAvailable:\t1024\n", 1024 << 10, true},
		{"MemTotal: 100 kB\nMemFree: 50 kB\n", 0, false},
		{"MemAvailable: lots kB\n", 0, false},
		{"MemAvailable: -5 kB\n", 0, false},
		{"MemAvailable: 5 MB\n", 0, false},
		{"MemAvailable:\n", 0, false},
		{"MemAvailable: 99999999999999999999 kB\n", 0, false},
		{"", 0, false},
	}
	for _, c := range cases {
		got, err := ParseMemAvailable([]byte(c.text))
		if c.ok && (err != nil || got != c.want) {
			t.Errorf("ParseMemAvailable(%q) = %d, %v; want %d", c.text, got, err, c.want)
		}
		if !c.ok && err == nil {
			t.Errorf("ParseMemAvailable(%q) = %d, want an error", c.text, got)
		}
	}
}

func FuzzParseMemAvailable(f *testing.F) {
	f.Add([]byte(meminfoSample))
	f.Add([]byte("MemAvailable: 12 kB"))
	f.Add([]byte("MemAvailable: 12 kB extra\n"))
	f.Add([]byte("MemAvailable::\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ParseMemAvailable(b)
		if err == nil && (n < 0 || n%1024 != 0) {
			t.Fatalf("ParseMemAvailable(%q) = %d: not a whole number of kB", b, n)
		}
	})
}

// TestMemoryNeedGrows checks the estimate against the classes' sizes: it
// grows from class S to A to C to D, FT class C needs more on two tasks (the
// transpose's buffers) than on one, and IS's two tasks more on two hosts
// than on one.
func TestMemoryNeedGrows(t *testing.T) {
	need := func(k, c string, np int) int64 {
		t.Helper()
		n, err := MemoryNeed(k, c, np, 1)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, k := range Kernels[1:] {
		for _, np := range []int{1, 2, 4} {
			s, a, c, d := need(k, "S", np), need(k, "A", np), need(k, "C", np), need(k, "D", np)
			if !(memBase < s && s < a && a < c && c < d) {
				t.Errorf("%s np %d: need S %d, A %d, C %d, D %d: not increasing", k, np, s, a, c, d)
			}
		}
	}
	if one, two := need("ft", "C", 1), need("ft", "C", 2); two <= one {
		t.Errorf("FT class C: np 2 needs %d, np 1 %d", two, one)
	}
	// IS's keys go in place between tasks of one host; on several hosts,
	// or an unknown number, the keys received and the chunks in flight
	// are counted.
	isOn := func(hosts int) int64 {
		n, err := MemoryNeed("is", "A", 2, hosts)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if one, two, unknown := isOn(1), isOn(2), isOn(0); !(one < two && two == unknown) {
		t.Errorf("IS class A np 2: need %d on one host, %d on two, %d on an unknown number", one, two, unknown)
	}
	if _, err := MemoryNeed("mg", "S", 3, 1); !errors.Is(err, ErrBadNP) {
		t.Errorf("MemoryNeed(mg, S, 3): %v, want ErrBadNP", err)
	}
	if _, err := MemoryNeed("zz", "S", 1, 1); !errors.Is(err, ErrUnknownKernel) {
		t.Errorf("MemoryNeed(zz): %v, want ErrUnknownKernel", err)
	}
}

// TestMemoryArraysTrackAllocations runs each kernel's class S serially and
// compares the bytes it allocates with the arrays the estimate counts for
// one task. The two differ (MG allocates finest-level arrays it replaces
// before touching them; the estimate bounds CG's matrix from above), but
// stay within a factor of two of each other, so the estimate follows the
// code's sizes.
func TestMemoryArraysTrackAllocations(t *testing.T) {
	for _, k := range Kernels[1:] {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		if _, err := RunSerial(k, "S", nil); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		alloc := float64(after.TotalAlloc - before.TotalAlloc)
		live, traffic := memArrays(k, "S", 1, 1)
		if traffic != 0 {
			t.Errorf("%s np 1: %g bytes of messages, want none", k, traffic)
		}
		t.Logf("%s class S: estimate %.0f bytes of arrays, allocated %.0f", k, live, alloc)
		if live < alloc/2 || live > 2*alloc {
			t.Errorf("%s class S: the estimate counts %.0f bytes of arrays, the run allocated %.0f", k, live, alloc)
		}
	}
}
