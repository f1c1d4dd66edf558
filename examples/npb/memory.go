package npb

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrNoMemory: a run needs more memory than the machine has available.
var ErrNoMemory = errors.New("not enough memory")

// memBase is what a run costs besides its kernel's arrays: the Go runtime,
// the embedded virtual machine and the tasks' small buffers.
const memBase = 32 << 20

// The garbage messages leave behind is estimated from measured peaks
// (classes A and C at np = 2): memCopies bytes per byte the run sends, but
// at most memGarbageCap times the kernel's arrays. Above the arrays and
// their tenth, the peaks reached 3.4 times the arrays for CG class C, 2.1
// for CG class A, 1.7 for IS class A, 1.6 for IS class C, 0.4 for FT class
// A and 0.1 for MG class C.
const (
	memCopies     = 1.5
	memGarbageCap = 4
)

// MemoryNeed estimates the peak resident memory, in bytes, of a run of
// kernel for class on np tasks that all live in this process (an embedded
// virtual machine, whatever its number of hosts).
//
// The estimate is the arrays the kernel's tasks allocate, worked out from
// the class's parameters as the code sizes them, plus a tenth for the
// collector's slack. With more than one task it adds the garbage the
// messages leave behind: every message is encoded into a fresh payload, the
// collector lets the heap grow to at least twice its live data before it
// reclaims them, and freed pages go back to the system only gradually. That
// part is proportional to the bytes the run sends, with a cap, and its
// factors are measured (see memCopies).
func MemoryNeed(kernel, class string, np int) (int64, error) {
	k, err := NormKernel(kernel)
	if err != nil {
		return 0, err
	}
	cl, err := NormClass(class)
	if err != nil {
		return 0, err
	}
	if _, err := newWorker(k, cl, np); err != nil {
		return 0, err
	}
	live, traffic := memArrays(k, cl, np)
	garbage := min(memGarbageCap*live, memCopies*traffic)
	return int64(memBase + live*1.1 + garbage), nil
}

// memArrays returns the bytes of the arrays a run allocates (summed over its
// np tasks, at their peak) and the bytes of the messages it sends. kernel,
// class and np must be valid.
func memArrays(kernel, class string, np int) (live, traffic float64) {
	nps := float64(np)
	others := float64(np-1) / nps // the part of its block a task sends away
	switch kernel {
	case "ep":
		return float64(np) * 8 * epNQ, 0
	case "cg":
		p, _ := CGParamsFor(class)
		n, w := float64(p.NA), float64(p.Nonzer+1)
		// Every task generates the whole stream of outer products: row
		// lengths (int32), columns (int32) and values (float64).
		gen := nps * n * (4 + 12*w)
		// The matrix: each outer product adds at most w² entries (float64
		// value, int32 column), and each task keeps those of its rows.
		matrix := 12*n*w*w + 8*(n+nps)
		// x, q, r, z over the rows, and the gathered p on every task.
		vectors := 4*8*n + nps*8*n
		live = gen + matrix + vectors
		// Each of the 25 steps and the residual's product all-gathers p,
		// once more for the untimed iteration.
		traffic = float64(p.Niter+1) * (cgItMax + 1) * (nps - 1) * 8 * n
		return live, traffic
	case "mg":
		p, _ := MGParamsFor(class)
		kr := 0
		if np > 2 {
			kr = ilog2(np)
		}
		lt := p.Levels()
		for k := 1; k <= lt; k++ {
			nk := float64(int(1) << k)
			plane := (nk + 2) * (nk + 2)
			arrays := 2.0 // u and r
			if k == lt {
				arrays = 3 // u, v and r on the finest grid
			}
			if k >= kr {
				// Slabs of nk/np planes and two ghosts on every task.
				live += arrays * 8 * plane * (nk + 2*nps)
				if np > 1 {
					// About three ghost exchanges per level and
					// V-cycle, two planes sent by every task.
					traffic += 3 * nps * 2 * 8 * plane
				}
			}
			if k <= kr {
				// The replicated coarse levels, whole on every task.
				live += nps * 2 * 8 * plane * (nk + 2)
			}
		}
		traffic *= float64(p.Nit + 2) // the warm-up V-cycle and the set-up
		return live, traffic
	case "ft":
		p, _ := FTParamsFor(class)
		n := float64(p.NX) * float64(p.NY) * float64(p.NZ)
		// u1 (complex), the evolution factors (float64) and the spectrum
		// (complex), twice while the timed set-up replaces the warm-up's.
		live = 16*n + 8*n + 2*16*n
		if np > 1 {
			// The transposed grid, each task's send and receive blocks
			// and the blocks in flight.
			live += 16*n + 2*16*n/nps + 16*n*others
			// One transpose per forward and inverse transform.
			traffic = float64(p.Niter+2) * 16 * n * others
		}
		return live, traffic
	case "is":
		p, _ := ISParamsFor(class)
		keys, maxKey := float64(p.Keys()), float64(p.MaxKey())
		// The keys, the keys ordered by bucket and the sorted keys of the
		// full verification (int32), the counts of each task's key range
		// and their copy, and the keys received from the other tasks.
		live = 3*4*keys + 2*4*maxKey + 4*keys*others
		// Every ranking (the untimed one too) sends each key whose bucket
		// another task owns.
		traffic = (isIterations + 1) * 4 * keys * others
		return live, traffic
	}
	return 0, 0
}

// ParseMemAvailable returns the MemAvailable figure of a /proc/meminfo
// text, in bytes.
func ParseMemAvailable(meminfo []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != "MemAvailable" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 || len(f) > 2 || (len(f) == 2 && f[1] != "kB") {
			return 0, fmt.Errorf("meminfo: MemAvailable: malformed value %q", strings.TrimSpace(rest))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 || kb > 1<<53 {
			return 0, fmt.Errorf("meminfo: MemAvailable: malformed value %q", f[0])
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("meminfo: %w", err)
	}
	return 0, errors.New("meminfo: no MemAvailable line")
}

// procMemAvailable reads MemAvailable from /proc/meminfo.
func procMemAvailable() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	return ParseMemAvailable(b)
}

// checkMemory refuses a run whose estimated need exceeds the memory
// available. When the available memory cannot be learnt (no /proc/meminfo),
// the run goes ahead.
func checkMemory(kernel, class string, np int, available func() (int64, error)) error {
	need, err := MemoryNeed(kernel, class, np)
	if err != nil {
		return err
	}
	if available == nil {
		available = procMemAvailable
	}
	avail, err := available()
	if err != nil {
		return nil
	}
	if need > avail {
		return fmt.Errorf("%s class %s np %d: needs about %s of memory and /proc/meminfo reports %s available: %w",
			strings.ToUpper(kernel), class, np, gib(need), gib(avail), ErrNoMemory)
	}
	return nil
}

// gib formats bytes in GiB with one decimal.
func gib(b int64) string {
	return strconv.FormatFloat(float64(b)/(1<<30), 'f', 1, 64) + " GiB"
}
