package peers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
)

// ErrBadLine is returned (wrapped, with the line number) for a line that is
// not a valid result.
var ErrBadLine = errors.New("peers: bad result line")

// Modes of a result line, as printed by `dpvm bench pingpong --json`.
const (
	ModeLocal  = "local"  // tasks on one host and one daemon (or shared memory)
	ModeRemote = "remote" // tasks talking over a network transport
	// ModeQUIC is the mode of `dpvm bench quic --json`: raw quic-go. A line
	// of this mode without a system is named SystemQUIC and compared with
	// the remote systems.
	ModeQUIC = "quic"
)

// SystemQUIC names raw quic-go's lines.
const SystemQUIC = "quic-go"

// SizeResult is one row of the latency table: a message size and its
// one-way latency (half the median round trip), with the bandwidth it
// implies (size / one-way latency, in 10^6 bytes per second).
type SizeResult struct {
	Size     int     `json:"size"`
	OnewayUS float64 `json:"oneway_us"`
	MBps     float64 `json:"mbps"`
	Reps     int     `json:"reps,omitempty"`
}

// SpawnResult is the time from the spawn call until each of Tasks spawned
// tasks has said hello, the median over Reps repetitions.
type SpawnResult struct {
	Tasks int     `json:"tasks"`
	US    float64 `json:"us"`
	Reps  int     `json:"reps,omitempty"`
}

// CollResult is one collective's figure: the median over Reps iterations
// of the slower rank's time for operation Op (allreduce, bcast, allgather,
// alltoall) on Size bytes of float64s per rank, in a communicator of the
// line's CollNP tasks.
type CollResult struct {
	Op   string  `json:"op"`
	Size int     `json:"size"`
	US   float64 `json:"us"`
	Reps int     `json:"reps,omitempty"`
}

// Line is one run of one configuration. Fields a run did not measure are
// zero (no measured time or rate is ever zero).
type Line struct {
	Round        int           `json:"round,omitempty"`
	System       string        `json:"system,omitempty"`
	Mode         string        `json:"mode"`
	Results      []SizeResult  `json:"results"`
	RateMsgsPerS float64       `json:"rate_msgs_per_s,omitempty"`
	Spawn        []SpawnResult `json:"spawn,omitempty"`
	GroupSize    int           `json:"group_size,omitempty"`
	BarrierUS    float64       `json:"barrier_us,omitempty"`
	BcastUS      float64       `json:"bcast_us,omitempty"`
	ReduceUS     float64       `json:"reduce_us,omitempty"`
	// Spawn32MS and Barrier8US are the spawn and barrier figures of `dpvm
	// bench pingpong --json` (32 tasks, in ms; 8 tasks, in µs); ParseLine
	// moves them into Spawn and BarrierUS when those are empty.
	Spawn32MS  float64 `json:"spawn32_ms,omitempty"`
	Barrier8US float64 `json:"barrier8_us,omitempty"`
	// CollNP and Coll are the collectives of a communicator of CollNP
	// tasks (mpi_bench.c and dpvm's lines).
	CollNP int          `json:"coll_np,omitempty"`
	Coll   []CollResult `json:"coll,omitempty"`
}

// maxLine bounds one input line; a result line is well under 2 KiB.
const maxLine = 1 << 20

// ParseLines reads result lines, one JSON object a line. Blank lines and
// lines starting with '#' are skipped. A line without a system is dpvm's
// own and is named "dpvm-" followed by its mode.
func ParseLines(r io.Reader) ([]Line, error) {
	var lines []Line
	err := EachLine(r, maxLine, func(n int, b []byte) error {
		l, err := ParseLine(b)
		if err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		lines = append(lines, l)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return lines, nil
}

// EachLine calls f with every line of r and its number (from 1), trimmed
// of spaces, skipping blank lines and lines starting with '#', and stops
// at f's first error. A line longer than maxLen bytes is an error.
func EachLine(r io.Reader, maxLen int, f func(n int, b []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(4096, maxLen)), maxLen)
	for n := 1; sc.Scan(); n++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		if err := f(n, b); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading results: %w", err)
	}
	return nil
}

// ParseLine decodes and checks one result line.
func ParseLine(b []byte) (Line, error) {
	var l Line
	if err := json.Unmarshal(b, &l); err != nil {
		return Line{}, fmt.Errorf("%w: %w", ErrBadLine, err)
	}
	switch {
	case l.Mode == ModeQUIC:
		if l.System == "" {
			l.System = SystemQUIC
		}
		l.Mode = ModeRemote
	case l.System == "" && l.Mode != "":
		l.System = "dpvm-" + l.Mode
	}
	if l.Spawn32MS != 0 && len(l.Spawn) == 0 && finiteNonNeg(l.Spawn32MS) {
		l.Spawn = []SpawnResult{{Tasks: 32, US: l.Spawn32MS * 1e3}}
	}
	if l.Barrier8US != 0 && l.BarrierUS == 0 && l.GroupSize == 0 {
		l.BarrierUS, l.GroupSize = l.Barrier8US, 8
	}
	if err := l.Validate(); err != nil {
		return Line{}, err
	}
	return l, nil
}

// Validate reports the first thing wrong with l.
func (l Line) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadLine, fmt.Sprintf(format, a...))
	}
	if l.Mode != ModeLocal && l.Mode != ModeRemote {
		return bad("mode %q is neither %q nor %q", l.Mode, ModeLocal, ModeRemote)
	}
	if l.System == "" || strings.ContainsAny(l.System, " |\t\n") {
		return bad("system %q is empty or has spaces or '|'", l.System)
	}
	if l.Round < 0 {
		return bad("round %d is negative", l.Round)
	}
	seen := map[int]bool{}
	for _, r := range l.Results {
		if r.Size <= 0 {
			return bad("size %d is not positive", r.Size)
		}
		if seen[r.Size] {
			return bad("size %d appears twice", r.Size)
		}
		seen[r.Size] = true
		if !finiteNonNeg(r.OnewayUS) || !finiteNonNeg(r.MBps) || r.Reps < 0 {
			return bad("size %d: oneway_us %v, mbps %v, reps %d", r.Size, r.OnewayUS, r.MBps, r.Reps)
		}
	}
	tasks := map[int]bool{}
	for _, s := range l.Spawn {
		if s.Tasks <= 0 || tasks[s.Tasks] || !finiteNonNeg(s.US) || s.Reps < 0 {
			return bad("spawn of %d tasks: %v µs, %d reps (or repeated)", s.Tasks, s.US, s.Reps)
		}
		tasks[s.Tasks] = true
	}
	for name, v := range map[string]float64{
		"rate_msgs_per_s": l.RateMsgsPerS, "barrier_us": l.BarrierUS,
		"bcast_us": l.BcastUS, "reduce_us": l.ReduceUS,
		"spawn32_ms": l.Spawn32MS, "barrier8_us": l.Barrier8US,
	} {
		if !finiteNonNeg(v) {
			return bad("%s is %v", name, v)
		}
	}
	if l.GroupSize < 0 {
		return bad("group_size %d is negative", l.GroupSize)
	}
	if l.CollNP < 0 || (len(l.Coll) > 0 && l.CollNP == 0) {
		return bad("coll_np %d with %d collectives", l.CollNP, len(l.Coll))
	}
	type opSize struct {
		op   string
		size int
	}
	ops := map[opSize]bool{}
	for _, c := range l.Coll {
		k := opSize{c.Op, c.Size}
		if !slices.Contains(CollOps, c.Op) || c.Size <= 0 || ops[k] || !finiteNonNeg(c.US) || c.Reps < 0 {
			return bad("collective %s of %d bytes: %v µs, %d reps (unknown, repeated or out of range)", c.Op, c.Size, c.US, c.Reps)
		}
		ops[k] = true
	}
	return nil
}

func finiteNonNeg(v float64) bool { return v >= 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

// Metric is one row of the table: a figure every system may report.
type Metric struct {
	Key    string // stable name, e.g. "oneway_8"
	Label  string // row label, with the unit
	Higher bool   // larger is better (bandwidth, rate)
	// Value returns the figure in the row's unit, or false when l has none.
	Value func(l Line) (float64, bool)
}

func oneway(size int) func(Line) (float64, bool) {
	return func(l Line) (float64, bool) {
		for _, r := range l.Results {
			if r.Size == size && r.OnewayUS > 0 {
				return r.OnewayUS, true
			}
		}
		return 0, false
	}
}

func spawn(tasks int) func(Line) (float64, bool) {
	return func(l Line) (float64, bool) {
		for _, s := range l.Spawn {
			if s.Tasks == tasks && s.US > 0 {
				return s.US / 1e3, true
			}
		}
		return 0, false
	}
}

// CollOps are the collective operations a line may report, in the
// table's order; CollSizes their sizes (bytes per rank) and CollNP the
// communicator's size of the table's rows.
var (
	CollOps   = []string{"allreduce", "bcast", "allgather", "alltoall"}
	CollSizes = []int{8, 8 << 10, 1 << 20}
)

// CollNP is the number of tasks of the collectives' rows.
const CollNP = 2

// coll returns the time of op on size bytes per rank at CollNP tasks.
func coll(op string, size int) func(Line) (float64, bool) {
	return func(l Line) (float64, bool) {
		if l.CollNP != CollNP {
			return 0, false
		}
		for _, c := range l.Coll {
			if c.Op == op && c.Size == size && c.US > 0 {
				return c.US, true
			}
		}
		return 0, false
	}
}

// collMetrics are the collectives' rows: every operation at every size.
func collMetrics() []Metric {
	var ms []Metric
	for _, op := range CollOps {
		label := op
		if op == "allreduce" {
			label = "allreduce sum"
		}
		for _, size := range CollSizes {
			ms = append(ms, Metric{
				Key:   fmt.Sprintf("%s_%s", op, sizeKey(size)),
				Label: fmt.Sprintf("%s %s, %d tasks (µs)", label, sizeLabel(size), CollNP),
				Value: coll(op, size),
			})
		}
	}
	return ms
}

// sizeKey and sizeLabel name a size in a metric's key (8, 8k, 1m) and
// label (8 B, 8 KiB, 1 MiB).
func sizeKey(size int) string {
	n, key, _ := sizeUnit(size)
	return fmt.Sprintf("%d%s", n, key)
}

func sizeLabel(size int) string {
	n, _, label := sizeUnit(size)
	return fmt.Sprintf("%d %s", n, label)
}

// sizeUnit writes size in the largest binary unit that divides it, with
// the unit's short key and its label.
func sizeUnit(size int) (n int, key, label string) {
	switch {
	case size >= 1<<20 && size%(1<<20) == 0:
		return size >> 20, "m", "MiB"
	case size >= 1<<10 && size%(1<<10) == 0:
		return size >> 10, "k", "KiB"
	}
	return size, "", "B"
}

func positive(f func(Line) float64) func(Line) (float64, bool) {
	return func(l Line) (float64, bool) {
		v := f(l)
		return v, v > 0
	}
}

// Metrics are the table's rows, in order: the collectives of CollNP tasks
// last.
var Metrics = append([]Metric{
	{Key: "oneway_8", Label: "one-way 8 B (µs)", Value: oneway(8)},
	{Key: "oneway_1k", Label: "one-way 1 KiB (µs)", Value: oneway(1024)},
	{Key: "oneway_64k", Label: "one-way 64 KiB (µs)", Value: oneway(64 << 10)},
	{Key: "oneway_1m", Label: "one-way 1 MiB (µs)", Value: oneway(1 << 20)},
	{Key: "mbps_1m", Label: "bandwidth 1 MiB (MB/s)", Higher: true, Value: func(l Line) (float64, bool) {
		v, ok := oneway(1 << 20)(l)
		if !ok {
			return 0, false
		}
		return float64(1<<20) / v, true
	}},
	{Key: "rate", Label: "8 B messages (k/s)", Higher: true, Value: positive(func(l Line) float64 { return l.RateMsgsPerS / 1e3 })},
	{Key: "spawn_1", Label: "spawn 1 task (ms)", Value: spawn(1)},
	{Key: "spawn_8", Label: "spawn 8 tasks (ms)", Value: spawn(8)},
	{Key: "spawn_32", Label: "spawn 32 tasks (ms)", Value: spawn(32)},
	{Key: "barrier", Label: "barrier, 8 tasks (µs)", Value: positive(func(l Line) float64 { return l.BarrierUS })},
	{Key: "bcast", Label: "bcast 8 B to 8 tasks (µs)", Value: positive(func(l Line) float64 { return l.BcastUS })},
	{Key: "reduce", Label: "reduce sum, 8 tasks (µs)", Value: positive(func(l Line) float64 { return l.ReduceUS })},
}, collMetrics()...)

// Stat is the summary of one figure over the rounds of one system.
type Stat struct {
	Median, Min, Max float64
	N                int
}

// Summary is one system's figures over all its rounds.
type Summary struct {
	System string
	Mode   string
	Rounds int
	Stats  map[string]Stat // by Metric.Key; absent when never measured
}

// systemOrder is the column order of the systems the harness knows.
var systemOrder = []string{"dpvm-local", "pvm-daemon", "pvm-direct", "mpi-shm", "dpvm-remote", SystemQUIC, "mpi-tcp", "raw-tcp"}

// Summarize groups lines by system and reduces every metric to its median
// and range over the rounds. Systems come in the harness's column order, a
// variant named after a known system ("pvm-direct-frag65536") right after
// it, unknown ones last, ties in alphabetical order. A system whose
// lines disagree on the mode is an error.
func Summarize(lines []Line) ([]Summary, error) {
	by := map[string][]Line{}
	for _, l := range lines {
		if prev, ok := by[l.System]; ok && prev[0].Mode != l.Mode {
			return nil, fmt.Errorf("%w: system %s has modes %s and %s", ErrBadLine, l.System, prev[0].Mode, l.Mode)
		}
		by[l.System] = append(by[l.System], l)
	}
	names := make([]string, 0, len(by))
	for name := range by {
		names = append(names, name)
	}
	// A variant of a known system (pvm-direct-frag65536) sits beside it.
	rank := func(s string) int {
		for i, known := range systemOrder {
			if s == known || strings.HasPrefix(s, known+"-") {
				return i
			}
		}
		return len(systemOrder)
	}
	sort.Slice(names, func(i, j int) bool {
		ri, rj := rank(names[i]), rank(names[j])
		if ri != rj {
			return ri < rj
		}
		return names[i] < names[j]
	})
	out := make([]Summary, 0, len(names))
	for _, name := range names {
		ls := by[name]
		s := Summary{System: name, Mode: ls[0].Mode, Rounds: len(ls), Stats: map[string]Stat{}}
		for _, m := range Metrics {
			var vs []float64
			for _, l := range ls {
				if v, ok := m.Value(l); ok {
					vs = append(vs, v)
				}
			}
			if len(vs) > 0 {
				s.Stats[m.Key] = StatOf(vs)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// StatOf returns the median and range of vs (at least one value); it does
// not change vs.
func StatOf(vs []float64) Stat {
	vs = slices.Clone(vs)
	slices.Sort(vs)
	n := len(vs)
	med := vs[n/2]
	if n%2 == 0 {
		med = (vs[n/2-1] + vs[n/2]) / 2
	}
	return Stat{Median: med, Min: vs[0], Max: vs[n-1], N: n}
}

// Ratio is how many times better dpvm is than a peer on one metric: the
// peer's median over dpvm's for times, dpvm's over the peer's for bandwidth
// and rate. Above 1, dpvm is better.
func Ratio(m Metric, dpvm, peer Stat) float64 {
	if m.Higher {
		return dpvm.Median / peer.Median
	}
	return peer.Median / dpvm.Median
}

// FormatValue prints v with three significant digits and no exponent.
func FormatValue(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

func cell(s Stat, ok bool) string {
	if !ok {
		return "–"
	}
	if s.N == 1 || s.Min == s.Max {
		return FormatValue(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", FormatValue(s.Median), FormatValue(s.Min), FormatValue(s.Max))
}

// WriteTable prints the summaries as a Markdown table: one row per metric
// that any system reports, one column per system, each cell the median over
// the rounds with the range in parentheses. When dpvm's own systems are
// present, a second table gives, for every peer, the ratio to dpvm in the
// same mode (above 1: dpvm is better).
func WriteTable(w io.Writer, sums []Summary) error {
	if len(sums) == 0 {
		return fmt.Errorf("peers: no results to tabulate")
	}
	var b strings.Builder
	b.WriteString("| |")
	for _, s := range sums {
		fmt.Fprintf(&b, " %s |", s.System)
	}
	b.WriteString("\n|---|")
	for range sums {
		b.WriteString("---|")
	}
	b.WriteString("\n| mode, rounds |")
	for _, s := range sums {
		fmt.Fprintf(&b, " %s, %d |", s.Mode, s.Rounds)
	}
	b.WriteString("\n")
	for _, m := range Metrics {
		if !anyHas(sums, m.Key) {
			continue
		}
		fmt.Fprintf(&b, "| %s |", m.Label)
		for _, s := range sums {
			st, ok := s.Stats[m.Key]
			fmt.Fprintf(&b, " %s |", cell(st, ok))
		}
		b.WriteString("\n")
	}
	writeRatios(&b, sums)
	_, err := io.WriteString(w, b.String())
	return err
}

func anyHas(sums []Summary, key string) bool {
	for _, s := range sums {
		if _, ok := s.Stats[key]; ok {
			return true
		}
	}
	return false
}

// writeRatios adds the dpvm-versus-peer table when dpvm's lines are there.
func writeRatios(b *strings.Builder, sums []Summary) {
	dpvm := map[string]Summary{}
	var peers []Summary
	for _, s := range sums {
		if strings.HasPrefix(s.System, "dpvm-") {
			dpvm[s.Mode] = s
		} else {
			peers = append(peers, s)
		}
	}
	var cols []Summary
	for _, p := range peers {
		if _, ok := dpvm[p.Mode]; ok {
			cols = append(cols, p)
		}
	}
	if len(cols) == 0 {
		return
	}
	b.WriteString("\ndpvm's advantage (peer ÷ dpvm for times, dpvm ÷ peer for bandwidth and rate; above 1, dpvm is better):\n\n| |")
	for _, p := range cols {
		fmt.Fprintf(b, " vs %s |", p.System)
	}
	b.WriteString("\n|---|")
	for range cols {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, m := range Metrics {
		row := make([]string, len(cols))
		has := false
		for i, p := range cols {
			d, okd := dpvm[p.Mode].Stats[m.Key]
			ps, okp := p.Stats[m.Key]
			row[i] = "–"
			if okd && okp && d.Median > 0 && ps.Median > 0 {
				row[i] = FormatValue(Ratio(m, d, ps)) + "×"
				has = true
			}
		}
		if has {
			name, _, _ := strings.Cut(m.Label, " (")
			fmt.Fprintf(b, "| %s | %s |\n", name, strings.Join(row, " | "))
		}
	}
}
