package npbofficial

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/dpvm/dpvm/daemon/bench/peers"
)

// Systems of a result line.
const (
	SystemOfficial = "official" // the official NPB binary (serial or MPI)
	SystemDpvm     = "dpvm"     // dpvm npb
)

// Official suites: the one an official run belongs to, and the one a dpvm
// run is paired with.
const (
	SuiteSerial = "serial" // the serial code (or the OpenMP suite on one thread), np 1
	SuiteMPI    = "mpi"    // the MPI code, np ranks
	SuiteOMP    = "omp"    // the OpenMP code, np threads
)

// suiteOrder is the order of a row's pairs (then by task count).
var suiteOrder = []string{SuiteSerial, SuiteMPI, SuiteOMP}

// ErrBadLine is returned (wrapped, with the line number) for a line that is
// not a valid result.
var ErrBadLine = errors.New("npbofficial: bad result line")

// Line is one run of one kernel.
type Line struct {
	Round  int    `json:"round"`
	Kernel string `json:"kernel"`
	Class  string `json:"class"`
	System string `json:"system"`
	// Suite is the official suite of the run (official) or of the run it
	// is paired with (dpvm): serial, mpi or omp. Lines of harnesses
	// without OpenMP runs leave it out: serial at np 1, mpi above.
	Suite     string  `json:"suite,omitempty"`
	NP        int     `json:"np"`
	TimeS     float64 `json:"time_s"`
	Mops      float64 `json:"mops"`
	Verified  bool    `json:"verified"`
	MaxRSSKiB []int64 `json:"maxrss_kib"`
}

// maxLine bounds one input line; a result line is well under 1 KiB.
const maxLine = 64 << 10

// maxProcs bounds the processes of one run a line may list.
const maxProcs = 1024

// Validate reports what is wrong with a line.
func (l Line) Validate() error {
	switch {
	case l.Round < 1:
		return fmt.Errorf("round %d: want 1 or more", l.Round)
	case l.Kernel == "":
		return errors.New("no kernel")
	case l.System != SystemOfficial && l.System != SystemDpvm:
		return fmt.Errorf("system %q: want %s or %s", l.System, SystemOfficial, SystemDpvm)
	case l.NP < 1:
		return fmt.Errorf("np %d: want 1 or more", l.NP)
	case l.Suite != "" && !slices.Contains(suiteOrder, l.Suite):
		return fmt.Errorf("suite %q: want %s", l.Suite, strings.Join(suiteOrder, ", "))
	case l.Suite == SuiteSerial && l.NP != 1:
		return fmt.Errorf("suite %s with np %d: the serial code runs one task", l.Suite, l.NP)
	case !(l.Mops >= 0) || math.IsInf(l.Mops, 0) || !(l.TimeS >= 0) || math.IsInf(l.TimeS, 0):
		return fmt.Errorf("time %v s, %v Mop/s: want finite and not negative", l.TimeS, l.Mops)
	case len(l.MaxRSSKiB) > maxProcs:
		return fmt.Errorf("%d processes: at most %d", len(l.MaxRSSKiB), maxProcs)
	}
	for _, r := range l.MaxRSSKiB {
		if r < 0 {
			return fmt.Errorf("peak resident set %d KiB: negative", r)
		}
	}
	return nil
}

// SuiteOf returns the line's suite, inferring it for lines that leave it
// out (serial at np 1, mpi above).
func (l Line) SuiteOf() string {
	switch {
	case l.Suite != "":
		return l.Suite
	case l.NP == 1:
		return SuiteSerial
	}
	return SuiteMPI
}

// PeakMiB is the run's peak memory: the sum of its processes' peak
// resident sets, in MiB (0 when none was measured).
func (l Line) PeakMiB() float64 {
	var s int64
	for _, r := range l.MaxRSSKiB {
		s += r
	}
	return float64(s) / 1024
}

// ParseLines reads result lines, one JSON object a line; blank lines and
// lines starting with '#' are skipped.
func ParseLines(r io.Reader) ([]Line, error) {
	var lines []Line
	err := peers.EachLine(r, maxLine, func(n int, b []byte) error {
		var l Line
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return fmt.Errorf("%w %d: %v", ErrBadLine, n, err)
		}
		if err := l.Validate(); err != nil {
			return fmt.Errorf("%w %d: %v", ErrBadLine, n, err)
		}
		lines = append(lines, l)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return lines, nil
}

// ReadFile reads the result lines of one file (results.jsonl).
func ReadFile(name string) ([]Line, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("npbofficial: %w", err)
	}
	defer f.Close()
	return ParseLines(f)
}

// Pair compares dpvm with one official suite on one kernel at one task (or
// thread) count, over the rounds where both ran and verified.
type Pair struct {
	Suite  string     `json:"suite"`
	NP     int        `json:"np"`
	Rounds int        `json:"rounds"` // rounds with both runs verified
	Failed int        `json:"failed"` // runs that failed or did not verify
	Ratio  peers.Stat `json:"ratio"`  // dpvm's Mop/s ÷ the official's, per round
	// Mop/s and peak memory (MiB, the sum of the processes) of each.
	DpvmMops     peers.Stat `json:"dpvm_mops"`
	OfficialMops peers.Stat `json:"official_mops"`
	DpvmMiB      peers.Stat `json:"dpvm_mib"`
	OfficialMiB  peers.Stat `json:"official_mib"`
}

// MemRatio is dpvm's median peak over the official's (0 when either was
// not measured).
func (p Pair) MemRatio() float64 {
	if p.DpvmMiB.N == 0 || p.OfficialMiB.N == 0 || p.OfficialMiB.Median == 0 {
		return 0
	}
	return p.DpvmMiB.Median / p.OfficialMiB.Median
}

// Row is one kernel's comparison.
type Row struct {
	Kernel string `json:"kernel"`
	Class  string `json:"class"`
	Pairs  []Pair `json:"pairs"` // by suite (serial, mpi, omp), then task count
}

// kernelOrder is the table's row order (NPB's own).
var kernelOrder = []string{"ep", "cg", "mg", "ft", "is"}

// Summarize pairs every dpvm run with the official run of the same kernel,
// class, suite, task count and round, and reduces the pairs to medians and
// ranges.
// A pair counts only when both runs verified; the others are counted in
// Failed. Rows come in NPB's kernel order, then by class.
func Summarize(lines []Line) []Row {
	type key struct {
		kernel, class, suite string
		np                   int
	}
	type both struct{ dpvm, official *Line }
	runs := map[key]map[int]*both{}
	var keys []key
	for i := range lines {
		l := &lines[i]
		k := key{l.Kernel, l.Class, l.SuiteOf(), l.NP}
		if runs[k] == nil {
			runs[k] = map[int]*both{}
			keys = append(keys, k)
		}
		b := runs[k][l.Round]
		if b == nil {
			b = &both{}
			runs[k][l.Round] = b
		}
		if l.System == SystemDpvm {
			b.dpvm = l
		} else {
			b.official = l
		}
	}
	rank := func(k string) int {
		if i := slices.Index(kernelOrder, k); i >= 0 {
			return i
		}
		return len(kernelOrder)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := rank(a.kernel) - rank(b.kernel); c != 0 {
			return c
		}
		if c := strings.Compare(a.kernel, b.kernel); c != 0 {
			return c
		}
		if c := strings.Compare(a.class, b.class); c != 0 {
			return c
		}
		if c := slices.Index(suiteOrder, a.suite) - slices.Index(suiteOrder, b.suite); c != 0 {
			return c
		}
		return a.np - b.np
	})
	var rows []Row
	for _, k := range keys {
		if len(rows) == 0 || rows[len(rows)-1].Kernel != k.kernel || rows[len(rows)-1].Class != k.class {
			rows = append(rows, Row{Kernel: k.kernel, Class: k.class})
		}
		p := Pair{Suite: k.suite, NP: k.np}
		var ratio, dm, om, dmem, omem []float64
		for _, b := range runs[k] {
			for _, l := range []*Line{b.dpvm, b.official} {
				if l != nil && !l.Verified {
					p.Failed++
				}
			}
			if b.dpvm == nil || b.official == nil || !b.dpvm.Verified || !b.official.Verified ||
				b.dpvm.Mops <= 0 || b.official.Mops <= 0 {
				continue
			}
			p.Rounds++
			ratio = append(ratio, b.dpvm.Mops/b.official.Mops)
			dm = append(dm, b.dpvm.Mops)
			om = append(om, b.official.Mops)
			if m := b.dpvm.PeakMiB(); m > 0 {
				dmem = append(dmem, m)
			}
			if m := b.official.PeakMiB(); m > 0 {
				omem = append(omem, m)
			}
		}
		p.Ratio, p.DpvmMops, p.OfficialMops = statOf(ratio), statOf(dm), statOf(om)
		p.DpvmMiB, p.OfficialMiB = statOf(dmem), statOf(omem)
		rows[len(rows)-1].Pairs = append(rows[len(rows)-1].Pairs, p)
	}
	return rows
}

// statOf is peers.StatOf that also takes no values (a zero Stat).
func statOf(vs []float64) peers.Stat {
	if len(vs) == 0 {
		return peers.Stat{}
	}
	return peers.StatOf(vs)
}

// cell prints a median with its range, or "—" when nothing was measured.
func cell(s peers.Stat, digits int) string {
	if s.N == 0 {
		return "—"
	}
	f := func(v float64) string { return fmt.Sprintf("%.*f", digits, v) }
	if s.N == 1 || s.Min == s.Max {
		return f(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.Median), f(s.Min), f(s.Max))
}

func (r Row) pair(suite string, np int) (Pair, bool) {
	for _, p := range r.Pairs {
		if p.Suite == suite && p.NP == np {
			return p, true
		}
	}
	return Pair{}, false
}

// WriteTable prints the comparison as a Markdown table: for every kernel,
// dpvm's Mop/s over the official serial code's at np = 1 and over the
// official MPI code's at np = 2 (medians of the per-round ratios, with
// their range), peak memory at np = 2 (the sum of the processes), and the
// Mop/s behind the ratios. Above 1 in a ratio column, dpvm is faster. When
// the rows hold OpenMP pairs, a second table follows with one line per
// kernel and thread count: dpvm at np = N over the OpenMP code at N threads.
func WriteTable(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| kernel | class | dpvm np=1 ÷ official serial | dpvm np=2 ÷ official MPI np=2 | peak memory np=2, dpvm vs MPI (MiB, sum of ranks) | memory ÷ MPI | Mop/s np=1, dpvm vs serial | Mop/s np=2, dpvm vs MPI | failed runs |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		p1, _ := r.pair(SuiteSerial, 1)
		p2, _ := r.pair(SuiteMPI, 2)
		mem := "—"
		if p2.DpvmMiB.N > 0 || p2.OfficialMiB.N > 0 {
			mem = cell(p2.DpvmMiB, 0) + " vs " + cell(p2.OfficialMiB, 0)
		}
		memRatio := "—"
		if m := p2.MemRatio(); m > 0 {
			memRatio = fmt.Sprintf("%.2f", m)
		}
		failed := 0
		for _, p := range r.Pairs {
			failed += p.Failed
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s vs %s | %s vs %s | %d |\n",
			strings.ToUpper(r.Kernel), r.Class, cell(p1.Ratio, 2), cell(p2.Ratio, 2), mem, memRatio,
			cell(p1.DpvmMops, 0), cell(p1.OfficialMops, 0), cell(p2.DpvmMops, 0), cell(p2.OfficialMops, 0), failed)
	}
	omp := false
	for _, r := range rows {
		for _, p := range r.Pairs {
			omp = omp || p.Suite == SuiteOMP
		}
	}
	if omp {
		b.WriteString("\n| kernel | class | N | dpvm np=N ÷ official OMP at N threads | peak memory, dpvm vs OMP (MiB) | memory ÷ OMP | Mop/s, dpvm vs OMP | failed runs |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rows {
			for _, p := range r.Pairs {
				if p.Suite != SuiteOMP {
					continue
				}
				mem, memRatio := "—", "—"
				if p.DpvmMiB.N > 0 || p.OfficialMiB.N > 0 {
					mem = cell(p.DpvmMiB, 0) + " vs " + cell(p.OfficialMiB, 0)
				}
				if m := p.MemRatio(); m > 0 {
					memRatio = fmt.Sprintf("%.2f", m)
				}
				fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s vs %s | %d |\n",
					strings.ToUpper(r.Kernel), r.Class, p.NP, cell(p.Ratio, 2), mem, memRatio,
					cell(p.DpvmMops, 0), cell(p.OfficialMops, 0), p.Failed)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
