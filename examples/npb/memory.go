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

// memBase is what a run costs besides its kernel's arrays: the program's
// resident code (memText), the Go runtime, the embedded virtual machine and
// the tasks' small buffers. A run of EP, whose arrays are a few bytes,
// peaks at 17 MiB.
const memBase = 24 << 20

// memTask is what each task past the first adds besides its arrays: its
// goroutines' stacks, its mailbox and its share of the virtual machine's
// buffers, measured on classes S and W (TestNPBMemoryNeedHonest in
// cmd/cli).
const memTask = 6 << 20

// memSlack is what the peak holds per byte of arrays: the collector's slack,
// reached by FT class C at np = 2 (8.04 GiB on 7 GiB of arrays).
const memSlack = 1.15

// memText is the part of memBase that is the binary's resident code and
// data, outside the Go runtime's accounting (and so outside its memory
// limit).
const memText = 8 << 20

// MemoryNeed estimates the peak resident memory, in bytes, of a run of
// kernel for class on np tasks that all live in this process, an embedded
// virtual machine of hosts hosts (below 1: not known, counted as more than
// one).
//
// The estimate is the arrays the kernel's tasks allocate, worked out from
// the class's parameters as the code sizes them, plus 15 % for the
// collector's slack (memSlack), plus a fixed part for the runtime and for each task,
// plus the messages that can be in flight at once (each
// is an encoded payload, garbage once it is decoded). On one host IS's
// keys cost nothing more: they go to the other tasks in place, and what a
// task receives is views of its senders' arrays. `dpvm npb` sets the
// collector's memory limit to HeapLimit, which is this estimate less the
// resident code, so that the garbage the messages leave is reclaimed as it
// comes instead of when the heap has doubled: the estimate is then also a
// bound the run keeps to.
func MemoryNeed(kernel, class string, np, hosts int) (int64, error) {
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
	live, inflight := memArrays(k, cl, np, hosts)
	return int64(memBase + float64(np-1)*memTask + live*memSlack + inflight), nil
}

// HeapLimit is the memory limit for the Go runtime (debug.SetMemoryLimit)
// of a process that runs kernel for class on np tasks of an embedded
// virtual machine of hosts hosts and nothing else: MemoryNeed less the
// binary's resident code, which the runtime does not count.
func HeapLimit(kernel, class string, np, hosts int) (int64, error) {
	need, err := MemoryNeed(kernel, class, np, hosts)
	if err != nil {
		return 0, err
	}
	return need - memText, nil
}

// memArrays returns the bytes of the arrays a run allocates (summed over its
// np tasks, at their peak) and the bytes of the messages that can be in
// flight at once on a virtual machine of hosts hosts. kernel, class and np
// must be valid.
func memArrays(kernel, class string, np, hosts int) (live, inflight float64) {
	nps := float64(np)
	others := float64(np-1) / nps // the part of its block a task sends away
	switch kernel {
	case "ep":
		return float64(np) * 8 * (epNQ + 2*epNK), 0 // the counts and a batch's pairs
	case "cg":
		p, _ := CGParamsFor(class)
		n, w := float64(p.NA), float64(p.Nonzer+1)
		// The whole stream of outer products (row lengths, int32;
		// columns, int32; values, float64): generated once on one host,
		// where the matrix is shared, else by every task.
		gen := n * (4 + 12*w)
		if hosts != 1 {
			gen *= nps
		}
		// The matrix: each outer product adds at most w² entries (float64
		// value, int32 column), and each task keeps those of its rows.
		matrix := 12*n*w*w + 8*(n+nps)
		// x, q, z, r, p and a step's new z and r over the rows, and the
		// gathered p and z on every task.
		vectors := 7*8*n + nps*2*8*n
		live = gen + matrix + vectors
		// An all-gather of p: every task's block to every other, sent in
		// place (nothing in flight) between tasks of one host.
		if hosts != 1 {
			inflight = (nps - 1) * 8 * n
		}
		return live, inflight
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
			}
			if k <= kr {
				// The replicated coarse levels, whole on every task.
				live += nps * 2 * 8 * plane * (nk + 2)
			}
		}
		if np > 1 {
			// A ghost exchange on the finest level: two planes from
			// every task.
			n := float64(int(1) << lt)
			inflight = nps * 2 * 8 * (n + 2) * (n + 2)
		}
		return live, inflight
	case "ft":
		p, _ := FTParamsFor(class)
		n := float64(p.NX) * float64(p.NY) * float64(p.NZ)
		// u1 (complex), the evolution factors (float64) and the spectrum
		// (complex).
		live = 16*n + 8*n + 16*n
		if np > 1 {
			// The inverse transform's two plane buffers on every task;
			// the transposes send in place, so on one host nothing else
			// is in flight, and between hosts a chunk per pair of tasks.
			plane := 16 * float64(p.NX) * float64(p.NZ)
			live += nps * 2 * plane
			if hosts != 1 {
				inflight = nps * (nps - 1) * 16 * min(float64(ftChunk), n/nps/nps)
			}
		}
		return live, inflight
	case "is":
		p, _ := ISParamsFor(class)
		keys, maxKey := float64(p.Keys()), float64(p.MaxKey())
		// The keys (int32, with an eighth to spare so the full
		// verification can sort into them) and the keys ordered by bucket,
		// the counts of each task's key range and their copy.
		live = 4*keys + 4*keys*9/8 + 2*4*maxKey
		if hosts == 1 {
			// The keys go in place: a task receives views of its
			// senders' keys ordered by bucket, and no copies are in
			// flight.
			return live, 0
		}
		// The keys received from the other tasks, and a chunk of keys
		// per pair of tasks in flight.
		live += 4 * keys * others
		inflight = nps * (nps - 1) * 4 * min(float64(isChunk), keys/nps/nps)
		return live, inflight
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

// MemAvailable reads MemAvailable from /proc/meminfo, in bytes.
func MemAvailable() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	return ParseMemAvailable(b)
}

// checkMemory refuses a run whose estimated need exceeds the memory
// available. When the available memory cannot be learnt (no /proc/meminfo),
// the run goes ahead.
func checkMemory(kernel, class string, np, hosts int, available func() (int64, error)) error {
	need, err := MemoryNeed(kernel, class, np, hosts)
	if err != nil {
		return err
	}
	if available == nil {
		available = MemAvailable
	}
	avail, err := available()
	if err != nil {
		return nil
	}
	if need > avail {
		return fmt.Errorf("%s class %s np %d: needs about %s of memory and /proc/meminfo reports %s available: %w",
			strings.ToUpper(kernel), class, np, FormatBytes(need), FormatBytes(avail), ErrNoMemory)
	}
	return nil
}

// FormatBytes formats a memory size with one decimal: in MiB below 1 GiB,
// else in GiB.
func FormatBytes(b int64) string {
	if b < 1<<30 {
		return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB"
	}
	return strconv.FormatFloat(float64(b)/(1<<30), 'f', 1, 64) + " GiB"
}
