package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/task"
)

// DefaultMigrateSizes are the state sizes, in MiB, that `dpvm bench
// migrate` measures by default: DynamicPVM's Table 2 (0 to 16 MB) and
// 64 MiB (10-20 s on 2 cores). 256 and 1024 MiB may be asked for with
// SizesMiB; with them a run takes about two minutes and needs about four
// times the largest size in memory.
var DefaultMigrateSizes = []float64{0, 0.5, 1, 2, 4, 8, 12, 16, 64}

// Bounds of a migration benchmark.
const (
	// MaxMigrateMiB is the largest state size accepted.
	MaxMigrateMiB = 4096
	// DefaultMoveTimeout bounds each move's wait for the task's safe point
	// and for a direct checkpoint to arrive.
	DefaultMoveTimeout = 2 * time.Minute
	// DefaultMigrateTimeout bounds a whole run.
	DefaultMigrateTimeout = time.Hour
)

// Kinds of baseline measured beside the migrations.
const (
	// BaselineQUIC is raw quic-go carrying the checkpoint's bytes one way
	// on one connection and one stream: direct migration's baseline.
	BaselineQUIC = "quic"
	// BaselineFile is writing the checkpoint's bytes to a new file in the
	// shared directory, fsync, close, then reading them back: indirect
	// migration's baseline.
	BaselineFile = "file"
)

// ErrVerify: a migrated task's state differed from what it was given.
var ErrVerify = errors.New("bench: migrated state differs from the original")

// MigrateOptions bounds a migration benchmark. The zero value asks for the
// defaults.
type MigrateOptions struct {
	// SizesMiB are the state sizes in MiB (default DefaultMigrateSizes),
	// each 0..MaxMigrateMiB, without repeats.
	SizesMiB []float64
	// Via are the modes measured (default both, direct first).
	Via []daemon.Via
	// Reps is how many timed rounds each size gets (default 5); Warmup is
	// how many untimed rounds precede them (default 1; negative: none).
	Reps, Warmup int
	// Dir is the shared directory of indirect migration and of the file
	// baseline; empty: a new directory under os.TempDir, removed after.
	Dir string
	// NoBaselines leaves out the raw quic-go and file baselines.
	NoBaselines bool
	// Seed seeds the state's pattern (default 1).
	Seed uint64
	// MoveTimeout bounds each move's wait for the task's safe point and
	// for a direct checkpoint to arrive (default DefaultMoveTimeout).
	MoveTimeout time.Duration
	// Timeout bounds the whole run (default DefaultMigrateTimeout).
	Timeout time.Duration
	// Progress, when set, gets a line as each size is done.
	Progress io.Writer
	// Logger receives the daemons' logs (default: discarded).
	Logger *slog.Logger
	// CRIU are measured CRIU dump+restore figures (ReadCRIU) to set beside
	// the moves; sizes without one use the feature's figures.
	CRIU []CRIURow
}

// WithDefaults returns o with its zero fields set to their defaults, and
// an error wrapping ErrOptions when a field is out of range.
func (o MigrateOptions) WithDefaults() (MigrateOptions, error) {
	bad := func(format string, a ...any) (MigrateOptions, error) {
		return o, fmt.Errorf("%w: %s", ErrOptions, fmt.Sprintf(format, a...))
	}
	if len(o.SizesMiB) == 0 {
		o.SizesMiB = slices.Clone(DefaultMigrateSizes)
	}
	seen := map[float64]bool{}
	for _, s := range o.SizesMiB {
		if math.IsNaN(s) || s < 0 || s > MaxMigrateMiB {
			return bad("state size %v MiB is outside 0..%d MiB", s, MaxMigrateMiB)
		}
		if seen[s] {
			return bad("state size %v MiB is given twice", s)
		}
		seen[s] = true
	}
	if len(o.Via) == 0 {
		o.Via = []daemon.Via{daemon.Direct, daemon.Indirect}
	}
	vseen := map[daemon.Via]bool{}
	for _, v := range o.Via {
		if v != daemon.Direct && v != daemon.Indirect {
			return bad("migration mode %q: want direct or indirect", v)
		}
		if vseen[v] {
			return bad("migration mode %q is given twice", v)
		}
		vseen[v] = true
	}
	switch {
	case o.Reps < 0 || o.Reps > 10_000:
		return bad("reps %d is outside 1..10000", o.Reps)
	case o.Reps == 0:
		o.Reps = 5
	}
	switch {
	case o.Warmup > 100:
		return bad("warm-up %d is over 100 rounds", o.Warmup)
	case o.Warmup == 0:
		o.Warmup = 1
	case o.Warmup < 0:
		o.Warmup = -1
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"move timeout", &o.MoveTimeout, DefaultMoveTimeout},
		{"timeout", &o.Timeout, DefaultMigrateTimeout},
	} {
		if *f.v < 0 {
			return bad("%s %v is negative", f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	return o, nil
}

// warmups is the number of untimed rounds (Warmup after WithDefaults).
func (o *MigrateOptions) warmups() int { return max(o.Warmup, 0) }

// ParseMiBSizes parses a comma-separated list of sizes in MiB ("0,0.5,16").
func ParseMiBSizes(s string) ([]float64, error) {
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			return nil, fmt.Errorf("%w: empty size in %q", ErrOptions, s)
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%w: size %q is not a number of MiB", ErrOptions, f)
		}
		if v < 0 || v > MaxMigrateMiB {
			return nil, fmt.Errorf("%w: size %v MiB is outside 0..%d MiB", ErrOptions, v, MaxMigrateMiB)
		}
		out = append(out, v)
	}
	return out, nil
}

// ParseVias parses a comma-separated list of migration modes.
func ParseVias(s string) ([]daemon.Via, error) {
	var out []daemon.Via
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			return nil, fmt.Errorf("%w: empty mode in %q", ErrOptions, s)
		}
		v, err := daemon.ParseVia(f)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrOptions, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// StateElements is how many float64s a state of sizeMiB holds (rounded
// down to whole elements).
func StateElements(sizeMiB float64) int {
	return int(sizeMiB * (1 << 20) / 8)
}

// MigrateRow is one mode at one size: medians of the timed moves.
type MigrateRow struct {
	SizeMiB float64 `json:"size_mib"`
	Via     string  `json:"via"`
	// Seconds is the whole move, from the request to the commit, as the
	// master measures it.
	Seconds float64 `json:"seconds"`
	// FreezeMS is how long the task was stopped: from its suspension at a
	// safe point until it ran at the destination.
	FreezeMS float64 `json:"freeze_ms"`
	// CheckpointBytes is the checkpoint's size.
	CheckpointBytes int64 `json:"checkpoint_bytes"`
	// MBps is CheckpointBytes over Seconds, in 10^6 bytes per second.
	MBps float64 `json:"mbps"`
	// Reps is the number of timed moves.
	Reps int `json:"reps"`
	// Baseline names the baseline of this mode (BaselineQUIC for direct,
	// BaselineFile for indirect), when measured; VsBaseline is the median
	// over the rounds of the baseline's seconds over the move's: the
	// move's throughput as a fraction of the baseline's (1 is as fast).
	Baseline   string  `json:"baseline,omitempty"`
	VsBaseline float64 `json:"vs_baseline,omitempty"`
	// Verified is true once the task's state was found intact after all
	// the moves of its size.
	Verified bool `json:"verified"`
}

// MigrateBaseline is one baseline at one size: medians of the timed runs.
type MigrateBaseline struct {
	SizeMiB float64 `json:"size_mib"`
	Kind    string  `json:"kind"`
	Seconds float64 `json:"seconds"`
	// Bytes is how many bytes it moved: the checkpoint's size.
	Bytes int64   `json:"bytes"`
	MBps  float64 `json:"mbps"`
	Reps  int     `json:"reps"`
}

// MigrateTarget is one of the migration targets and whether the run meets
// it.
type MigrateTarget struct {
	What string `json:"what"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Met  bool   `json:"met"`
}

// MigrateReport is what a migration benchmark measured. Its JSON form is
// what `dpvm bench migrate --json` prints.
type MigrateReport struct {
	// Results has a row per size and mode, sizes in the order asked.
	Results   []MigrateRow      `json:"results"`
	Baselines []MigrateBaseline `json:"baselines,omitempty"`
	Targets   []MigrateTarget   `json:"targets,omitempty"`
	// CRIU are the measured CRIU figures the run was given.
	CRIU   []CRIURow `json:"criu,omitempty"`
	Reps   int       `json:"reps"`
	Warmup int       `json:"warmup"`
	Dir    string    `json:"dir"`
	// Seconds is how long the whole run took.
	Seconds float64 `json:"seconds"`
}

// Row returns the row of one size and mode.
func (r *MigrateReport) Row(sizeMiB float64, via daemon.Via) (MigrateRow, bool) {
	for _, x := range r.Results {
		if x.SizeMiB == sizeMiB && x.Via == string(via) {
			return x, true
		}
	}
	return MigrateRow{}, false
}

// Baseline returns the baseline of one size and kind.
func (r *MigrateReport) Baseline(sizeMiB float64, kind string) (MigrateBaseline, bool) {
	for _, x := range r.Baselines {
		if x.SizeMiB == sizeMiB && x.Kind == kind {
			return x, true
		}
	}
	return MigrateBaseline{}, false
}

// Sizes returns the sizes measured, in order.
func (r *MigrateReport) Sizes() []float64 {
	var out []float64
	for _, x := range r.Results {
		if !slices.Contains(out, x.SizeMiB) {
			out = append(out, x.SizeMiB)
		}
	}
	return out
}

// Migrate runs the migration benchmark: an in-process virtual machine of
// two daemons talking QUIC over loopback, sharing o.Dir; for each size, a
// task holding that much state in a []float64 filled with a seeded
// pattern is moved back and forth between them in each mode, in
// alternating order with the baselines, and its state is verified after
// the last move. Every figure is a median of o.Reps timed rounds.
func Migrate(ctx context.Context, o MigrateOptions) (*MigrateReport, error) {
	o, err := o.WithDefaults()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "dpvm-bench-migrate-")
		if err != nil {
			return nil, fmt.Errorf("bench migrate: %w", err)
		}
		defer os.RemoveAll(dir)
		o.Dir = dir
	} else if fi, err := os.Stat(o.Dir); err != nil {
		return nil, fmt.Errorf("bench migrate: shared directory: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%w: shared directory %s is not a directory", ErrOptions, o.Dir)
	}
	b, err := startMigBench(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("bench migrate: %w", err)
	}
	rep := &MigrateReport{Reps: o.Reps, Warmup: o.warmups(), Dir: o.Dir, CRIU: o.CRIU}
	for i, s := range o.SizesMiB {
		rows, bases, err := b.size(ctx, s, o.Seed+uint64(i))
		if err != nil {
			b.close()
			return nil, fmt.Errorf("bench migrate at %v MiB: %w", s, err)
		}
		rep.Results = append(rep.Results, rows...)
		rep.Baselines = append(rep.Baselines, bases...)
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "%v MiB done after %.1fs\n", s, time.Since(start).Seconds())
		}
	}
	if err := b.close(); err != nil {
		return nil, fmt.Errorf("bench migrate: %w", err)
	}
	rep.Targets = MigrateTargets(rep)
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// migBench is a running migration benchmark: the virtual machine, the
// driver task on the master, and the raw quic-go pair.
type migBench struct {
	o     MigrateOptions
	vm    *daemon.LocalVM
	drv   *migDriver
	tid   task.TID
	hosts [2]string
	q     *QUICPair
}

func startMigBench(ctx context.Context, o MigrateOptions) (*migBench, error) {
	vm, err := daemon.StartLocalVM(ctx, 2, daemon.Config{SharedDir: o.Dir, MoveTimeout: o.MoveTimeout, Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	b := &migBench{o: o, vm: vm, hosts: [2]string{vm.Daemons[0].Name(), vm.Daemons[1].Name()}}
	b.drv = &migDriver{cmds: make(chan command), gone: make(chan struct{})}
	if b.tid, err = vm.Master().SpawnTask(b.drv); err != nil {
		vm.Halt(10 * time.Second)
		return nil, fmt.Errorf("start the driver: %w", err)
	}
	if !o.NoBaselines && slices.Contains(o.Via, daemon.Direct) {
		if b.q, err = StartQUIC(ctx); err != nil {
			b.close()
			return nil, err
		}
	}
	return b, nil
}

func (b *migBench) close() error {
	var err error
	if b.q != nil {
		err = b.q.Close()
		b.q = nil
	}
	if b.drv != nil {
		close(b.drv.cmds)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, werr := b.vm.Master().Wait(ctx, b.tid); werr != nil && err == nil {
			err = fmt.Errorf("stop the driver: %w", werr)
		}
		cancel()
		b.drv = nil
	}
	if b.vm != nil {
		b.vm.Halt(10 * time.Second)
		b.vm = nil
	}
	return err
}

// do has the driver task run f.
func (b *migBench) do(ctx context.Context, f func(c *task.Ctx) error) error {
	cmd := command{ctx: ctx, f: func(_ context.Context, c *task.Ctx, _ task.TID) error { return f(c) }, done: make(chan error, 1)}
	select {
	case b.drv.cmds <- cmd:
	case <-ctx.Done():
		return ctx.Err()
	case <-b.drv.gone:
		return ErrClosed
	}
	return <-cmd.done
}

// An op is one timed measurement of a round.
type migOp struct {
	via  daemon.Via // a move, or
	base string     // a baseline
}

func (op migOp) String() string {
	if op.base != "" {
		return op.base + " baseline"
	}
	return string(op.via) + " move"
}

// ops lists a round's measurements: the moves first, then their
// baselines.
func (b *migBench) ops() []migOp {
	var ops []migOp
	for _, v := range b.o.Via {
		ops = append(ops, migOp{via: v})
	}
	if b.o.NoBaselines {
		return ops
	}
	for _, v := range b.o.Via {
		switch v {
		case daemon.Direct:
			ops = append(ops, migOp{base: BaselineQUIC})
		case daemon.Indirect:
			ops = append(ops, migOp{base: BaselineFile})
		}
	}
	return ops
}

// size measures one state size: it starts a holder with the state on the
// first daemon, runs the warm-up and timed rounds, each with the ops in a
// rotated order, then verifies the state and stops the holder.
func (b *migBench) size(ctx context.Context, sizeMiB float64, seed uint64) ([]MigrateRow, []MigrateBaseline, error) {
	n := StateElements(sizeMiB)
	holder, err := b.spawnHolder(ctx, n, seed)
	if err != nil {
		return nil, nil, err
	}
	mv := &migMover{b: b, tid: holder}
	var (
		ops       = b.ops()
		secs      = map[migOp][]float64{}
		freezes   = map[daemon.Via][]float64{}
		sizes     = map[daemon.Via]int64{}
		bytes     int64 // the last checkpoint's size
		baseBytes = map[string]int64{}
		src       []byte // the baselines' bytes
	)
	run := func(op migOp) (seconds, freezeMS float64, err error) {
		runtime.GC() // garbage of the previous op is not this one's cost
		if op.base == "" {
			r, err := mv.move(ctx, op.via)
			if err != nil {
				return 0, 0, err
			}
			bytes = r.CheckpointBytes
			sizes[op.via] = r.CheckpointBytes
			return r.Seconds, r.FreezeMS, nil
		}
		// Each baseline moves as many bytes as its mode's checkpoint (an
		// indirect one carries a salt more than a direct one).
		n := bytes
		via := daemon.Direct
		if op.base == BaselineFile {
			via = daemon.Indirect
		}
		if v, ok := sizes[via]; ok {
			n = v
		}
		baseBytes[op.base] = n
		if int64(cap(src)) < n {
			src = make([]byte, n)
			for i := range src {
				src[i] = byte(i*7 + 3)
			}
		}
		var d time.Duration
		if op.base == BaselineQUIC {
			d, err = b.q.Bulk(ctx, src[:n])
		} else {
			d, err = FileRoundTrip(b.o.Dir, src[:n])
		}
		return d.Seconds(), 0, err
	}
	// Round r runs the ops from the r-th on, cyclically. The moves come
	// first in ops, so the first round starts with a move, which tells
	// the baselines how many bytes a checkpoint has.
	warm := b.o.warmups()
	for r := range warm + b.o.Reps {
		for k := range ops {
			op := ops[(r+k)%len(ops)]
			s, f, err := run(op)
			if err != nil {
				return nil, nil, fmt.Errorf("%v, round %d: %w", op, r+1, err)
			}
			if r >= warm {
				secs[op] = append(secs[op], s)
				if op.base == "" {
					freezes[op.via] = append(freezes[op.via], f)
				}
			}
		}
	}
	src = nil
	if err := b.verify(ctx, holder, n); err != nil {
		return nil, nil, err
	}
	var rows []MigrateRow
	var bases []MigrateBaseline
	for _, op := range ops {
		med := Median(secs[op])
		if op.base != "" {
			n := baseBytes[op.base]
			bases = append(bases, MigrateBaseline{SizeMiB: sizeMiB, Kind: op.base, Seconds: med, Bytes: n,
				MBps: mbps(n, med), Reps: len(secs[op])})
			continue
		}
		row := MigrateRow{SizeMiB: sizeMiB, Via: string(op.via), Seconds: med, FreezeMS: Median(freezes[op.via]),
			CheckpointBytes: sizes[op.via], MBps: mbps(sizes[op.via], med), Reps: len(secs[op]), Verified: true}
		base := migOp{base: BaselineQUIC}
		if op.via == daemon.Indirect {
			base = migOp{base: BaselineFile}
		}
		if bs, ok := secs[base]; ok {
			row.Baseline = base.base
			var rs []float64
			for i, s := range secs[op] {
				if i < len(bs) && s > 0 {
					rs = append(rs, bs[i]/s)
				}
			}
			row.VsBaseline = Median(rs)
		}
		rows = append(rows, row)
	}
	return rows, bases, nil
}

func mbps(bytes int64, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(bytes) / seconds / 1e6
}

// migMover moves a holder back and forth between the two daemons.
type migMover struct {
	b   *migBench
	tid task.TID
	at  int // the index of the daemon it is on
}

// move migrates the holder to the other daemon.
func (m *migMover) move(ctx context.Context, via daemon.Via) (daemon.MigrateResult, error) {
	r, err := m.b.vm.Master().Migrate(ctx, m.tid, m.b.hosts[1-m.at], via)
	if err == nil {
		m.at = 1 - m.at
	}
	return r, err
}

// spawnHolder starts a holder of n elements of the pattern of seed on
// the first daemon and waits until it has filled its state.
func (b *migBench) spawnHolder(ctx context.Context, n int, seed uint64) (task.TID, error) {
	var holder task.TID
	err := b.do(ctx, func(c *task.Ctx) error {
		tids, err := c.Spawn(&migHolder{Seed: seed, N: n}, 1, task.OnHost(b.hosts[0]))
		if err != nil {
			return fmt.Errorf("start the task: %w", err)
		}
		holder = tids[0]
		if _, err := c.Recv(holder, tagHolderReady, nil, task.WithContext(ctx)); err != nil {
			return fmt.Errorf("wait for the task to fill its state: %w", err)
		}
		return nil
	})
	return holder, err
}

// verify asks the holder to check its state against the pattern, then
// stops it.
func (b *migBench) verify(ctx context.Context, holder task.TID, n int) error {
	return b.do(ctx, func(c *task.Ctx) error {
		if err := c.Send(holder, tagHolderVerify, nil, task.WithContext(ctx)); err != nil {
			return err
		}
		var got holderCheck
		if _, err := c.Recv(holder, tagHolderChecked, &got, task.WithContext(ctx)); err != nil {
			return fmt.Errorf("verify the state: %w", err)
		}
		if err := c.Send(holder, tagHolderStop, nil, task.WithContext(ctx)); err != nil {
			return err
		}
		if got.Len != n || got.Bad != 0 {
			return fmt.Errorf("%d of %d elements differ (first at %d), want %d elements: %w",
				got.Bad, got.Len, got.First, n, ErrVerify)
		}
		return nil
	})
}

// Message tags between the migration driver and its holders (after the
// pingpong tags).
const (
	tagHolderReady   = 31 // holder → driver: the state is filled
	tagHolderVerify  = 32 // driver → holder: check the state
	tagHolderChecked = 33 // holder → driver: a holderCheck
	tagHolderStop    = 34 // driver → holder: end
)

func init() {
	task.Register("dpvm.bench.migdriver", &migDriver{})
	task.Register("dpvm.bench.holder", &migHolder{})
}

// migDriver is the benchmark's root task on the master. Like the pinger it
// is started with SpawnTask, which runs it on this very struct, and it
// carries out the functions handed to it.
type migDriver struct {
	cmds chan command
	gone chan struct{} // closed when Run returns
}

func (d *migDriver) Run(c *task.Ctx) error {
	defer close(d.gone)
	for {
		select {
		case cmd, ok := <-d.cmds:
			if !ok {
				return nil
			}
			cmd.done <- cmd.f(cmd.ctx, c, 0)
		case <-c.Context().Done():
			return task.ErrKilled
		}
	}
}

// migHolder is the task that migrates: it fills Data with N elements of
// its seeded pattern, then waits in a Recv with task.Safe (so it can be moved at any
// time) for its parent to ask it to check the state or to stop.
type migHolder struct {
	Seed   uint64
	N      int
	Filled bool
	Data   []float64
}

// holderCheck is a holder's report on its state.
type holderCheck struct {
	Len   int // elements held
	Bad   int // elements that differ from the pattern
	First int // index of the first that differs, or -1
}

func (h *migHolder) Run(c *task.Ctx) error {
	if !h.Filled {
		if h.N > 0 {
			h.Data = make([]float64, h.N)
			FillPattern(h.Data, h.Seed)
		}
		h.Filled = true
		if err := c.Send(c.Parent(), tagHolderReady, nil); err != nil {
			return err
		}
	}
	for {
		st, err := c.Recv(c.Parent(), task.AnyTag, nil, task.Safe())
		if err != nil {
			return err
		}
		switch st.Tag {
		case tagHolderVerify:
			bad, first := CheckPattern(h.Data, h.Seed)
			if err := c.Send(c.Parent(), tagHolderChecked, holderCheck{Len: len(h.Data), Bad: bad, First: first}); err != nil {
				return err
			}
		case tagHolderStop:
			return nil
		default:
			return fmt.Errorf("holder: unexpected tag %d", st.Tag)
		}
	}
}

// PatternAt is element i of the state pattern of seed that the migration
// benchmark's task holds (and integration/criu's process, so that both
// hold the same bytes): splitmix64 of the index, as a float64 in [0, 1).
func PatternAt(seed uint64, i int) float64 {
	z := seed*0x9e3779b97f4a7c15 + uint64(i)*0xbf58476d1ce4e5b9
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// FillPattern fills data with the pattern of seed.
func FillPattern(data []float64, seed uint64) {
	for i := range data {
		data[i] = PatternAt(seed, i)
	}
}

// CheckPattern counts the elements of data that differ from the pattern
// of seed (bit for bit) and returns the first's index (-1 if none).
func CheckPattern(data []float64, seed uint64) (bad, first int) {
	first = -1
	for i, v := range data {
		if math.Float64bits(v) != math.Float64bits(PatternAt(seed, i)) {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	return bad, first
}
