package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon"
)

// checkMigrateReport checks that r measured sizes in the modes vias, with
// plausible figures, and baselines when wanted.
func checkMigrateReport(t *testing.T, r *MigrateReport, sizes []float64, vias []daemon.Via, baselines bool, reps int) {
	t.Helper()
	if len(r.Results) != len(sizes)*len(vias) {
		t.Fatalf("%d results, want %d: %+v", len(r.Results), len(sizes)*len(vias), r.Results)
	}
	for i, s := range sizes {
		for k, via := range vias {
			x := r.Results[i*len(vias)+k]
			if x.SizeMiB != s || x.Via != string(via) {
				t.Errorf("result %d is %v MiB %s, want %v MiB %s", i*len(vias)+k, x.SizeMiB, x.Via, s, via)
			}
			state := int64(StateElements(s)) * 8
			if x.CheckpointBytes <= state || x.CheckpointBytes > state+4096 {
				t.Errorf("%v MiB %s: checkpoint of %d bytes for %d bytes of state", s, via, x.CheckpointBytes, state)
			}
			if !(x.Seconds > 0) || !(x.FreezeMS > 0) || x.FreezeMS > x.Seconds*1e3 || !(x.MBps > 0) || x.Reps != reps || !x.Verified {
				t.Errorf("%v MiB %s: implausible row %+v", s, via, x)
			}
			want := ""
			if baselines {
				want = BaselineQUIC
				if via == daemon.Indirect {
					want = BaselineFile
				}
			}
			if x.Baseline != want || (want != "") != (x.VsBaseline > 0) {
				t.Errorf("%v MiB %s: baseline %q (%v), want %q", s, via, x.Baseline, x.VsBaseline, want)
			}
			if want == "" {
				continue
			}
			bl, ok := r.Baseline(s, want)
			if !ok || bl.Bytes != x.CheckpointBytes || !(bl.Seconds > 0) || !(bl.MBps > 0) || bl.Reps != reps {
				t.Errorf("%v MiB %s: baseline %+v (found %v), want %d bytes", s, via, bl, ok, x.CheckpointBytes)
			}
		}
	}
	if !baselines && len(r.Baselines) != 0 {
		t.Errorf("baselines measured when not asked for: %+v", r.Baselines)
	}
}

func TestMigrateBothModes(t *testing.T) {
	dir := t.TempDir()
	sizes := []float64{0, 0.25}
	r, err := Migrate(context.Background(), MigrateOptions{SizesMiB: sizes, Reps: 2, Warmup: -1, Dir: dir, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	checkMigrateReport(t, r, sizes, []daemon.Via{daemon.Direct, daemon.Indirect}, true, 2)
	if r.Dir != dir || r.Reps != 2 || r.Warmup != 0 || !(r.Seconds > 0) {
		t.Errorf("report header: dir %q reps %d warm-up %d seconds %v", r.Dir, r.Reps, r.Warmup, r.Seconds)
	}
	// Empty-state freeze targets for both modes, and the throughput ones
	// at the largest size.
	var whats []string
	for _, tg := range r.Targets {
		whats = append(whats, tg.What)
	}
	for _, want := range []string{"direct freeze, empty state", "indirect freeze, empty state",
		"direct 0.25 MiB throughput / raw quic-go", "indirect 0.25 MiB throughput / write+fsync+read"} {
		if !strings.Contains(strings.Join(whats, "|"), want) {
			t.Errorf("targets %q lack %q", whats, want)
		}
	}
	// No checkpoint or baseline file is left in the shared directory.
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("left in the shared directory: %v", ents)
	}
}

func TestMigrateOneModeTempDir(t *testing.T) {
	sizes := []float64{0.125}
	r, err := Migrate(context.Background(), MigrateOptions{SizesMiB: sizes, Via: []daemon.Via{daemon.Indirect},
		Reps: 1, NoBaselines: true, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	checkMigrateReport(t, r, sizes, []daemon.Via{daemon.Indirect}, false, 1)
	if r.Warmup != 1 {
		t.Errorf("warm-up %d, want the default 1", r.Warmup)
	}
	if _, err := os.Stat(r.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temporary shared directory %s is still there: %v", r.Dir, err)
	}
}

func TestMigrateVerifyCatchesDifference(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o, err := MigrateOptions{Dir: t.TempDir(), NoBaselines: true}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	b, err := startMigBench(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.close(); err != nil {
			t.Error(err)
		}
	}()
	holder, err := b.spawnHolder(ctx, 1000, 7)
	if err != nil {
		t.Fatal(err)
	}
	mv := &migMover{b: b, tid: holder}
	for _, via := range []daemon.Via{daemon.Direct, daemon.Indirect} {
		if _, err := mv.move(ctx, via); err != nil {
			t.Fatal(err)
		}
	}
	// The holder has 1000 elements; a check expecting 1001 must fail.
	if err := b.verify(ctx, holder, 1001); !errors.Is(err, ErrVerify) {
		t.Errorf("verify against the wrong length: %v", err)
	}
	holder, err = b.spawnHolder(ctx, 1000, 7)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.verify(ctx, holder, 1000); err != nil {
		t.Errorf("verify an unmoved holder: %v", err)
	}
}

func TestMigrateOptions(t *testing.T) {
	o, err := MigrateOptions{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if len(o.SizesMiB) != len(DefaultMigrateSizes) || len(o.Via) != 2 || o.Reps != 5 || o.Warmup != 1 || o.Seed != 1 ||
		o.MoveTimeout != DefaultMoveTimeout || o.Timeout != DefaultMigrateTimeout {
		t.Errorf("defaults: %+v", o)
	}
	if o, _ := (MigrateOptions{Warmup: -3}).WithDefaults(); o.warmups() != 0 {
		t.Errorf("negative warm-up gives %d rounds", o.warmups())
	}
	for name, bad := range map[string]MigrateOptions{
		"negative size":  {SizesMiB: []float64{-1}},
		"huge size":      {SizesMiB: []float64{MaxMigrateMiB + 1}},
		"NaN size":       {SizesMiB: []float64{math.NaN()}},
		"repeated size":  {SizesMiB: []float64{1, 1}},
		"unknown mode":   {Via: []daemon.Via{"carrier-pigeon"}},
		"repeated mode":  {Via: []daemon.Via{daemon.Direct, daemon.Direct}},
		"negative reps":  {Reps: -1},
		"too many reps":  {Reps: 10_001},
		"long warm-up":   {Warmup: 101},
		"negative limit": {Timeout: -time.Second},
	} {
		if _, err := bad.WithDefaults(); !errors.Is(err, ErrOptions) {
			t.Errorf("%s: %v", name, err)
		}
		if _, err := Migrate(context.Background(), bad); !errors.Is(err, ErrOptions) {
			t.Errorf("Migrate with %s: %v", name, err)
		}
	}
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Migrate(context.Background(), MigrateOptions{Dir: file}); !errors.Is(err, ErrOptions) {
		t.Errorf("a file as the shared directory: %v", err)
	}
	if _, err := Migrate(context.Background(), MigrateOptions{Dir: filepath.Join(file, "nope")}); err == nil {
		t.Error("a missing shared directory was accepted")
	}
}

func TestParseMiBSizes(t *testing.T) {
	got, err := ParseMiBSizes("0, 0.5,1,16 ,1024")
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{0, 0.5, 1, 16, 1024}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	for _, bad := range []string{"", "1,", "x", "-1", "4097", "NaN", "Inf", "1e400", "1MiB"} {
		if _, err := ParseMiBSizes(bad); !errors.Is(err, ErrOptions) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func FuzzParseMiBSizes(f *testing.F) {
	for _, s := range []string{"0,0.5,1,2,4,8,12,16,64", "1024", "x", "-0", "1e3,2", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sizes, err := ParseMiBSizes(s)
		if err != nil {
			return
		}
		for _, v := range sizes {
			if math.IsNaN(v) || v < 0 || v > MaxMigrateMiB {
				t.Fatalf("%q gave size %v", s, v)
			}
			if n := StateElements(v); n < 0 || n > MaxMigrateMiB<<17 {
				t.Fatalf("%q: %v MiB is %d elements", s, v, n)
			}
		}
	})
}

func TestParseVias(t *testing.T) {
	got, err := ParseVias("direct, indirect")
	if err != nil || len(got) != 2 || got[0] != daemon.Direct || got[1] != daemon.Indirect {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "direct,", "tcp", "direct,nfs"} {
		if _, err := ParseVias(bad); !errors.Is(err, ErrOptions) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestStateElements(t *testing.T) {
	for mib, want := range map[float64]int{0: 0, 0.5: 65536, 1: 131072, 16: 2 << 20, 1024: 128 << 20, 1e-6: 0} {
		if got := StateElements(mib); got != want {
			t.Errorf("%v MiB: %d elements, want %d", mib, got, want)
		}
	}
}

func TestPattern(t *testing.T) {
	a := make([]float64, 1000)
	FillPattern(a, 3)
	if bad, first := CheckPattern(a, 3); bad != 0 || first != -1 {
		t.Fatalf("fresh pattern: %d bad, first %d", bad, first)
	}
	if bad, _ := CheckPattern(a, 4); bad < 990 {
		t.Errorf("another seed's pattern matches at %d of 1000", 1000-bad)
	}
	for i, v := range a {
		if v < 0 || v >= 1 {
			t.Fatalf("element %d is %v, outside [0, 1)", i, v)
		}
	}
	a[17] = math.Nextafter(a[17], 2)
	a[500] = -a[500]
	if bad, first := CheckPattern(a, 3); bad != 2 || first != 17 {
		t.Errorf("two changed elements: %d bad, first %d", bad, first)
	}
}

func TestFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	buf := bytes.Repeat([]byte("dpvm"), 300_000)
	want := bytes.Clone(buf)
	d, err := FileRoundTrip(dir, buf)
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 || !bytes.Equal(buf, want) {
		t.Errorf("took %v; bytes read back equal: %v", d, bytes.Equal(buf, want))
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
	if _, err := FileRoundTrip(filepath.Join(dir, "missing"), buf); err == nil {
		t.Error("a missing directory was accepted")
	}
}

func TestBulk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q, err := StartQUIC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := q.Close(); err != nil {
			t.Error(err)
		}
	}()
	for _, n := range []int{1, bulkChunk, 2*bulkChunk + 5} {
		d, err := q.Bulk(ctx, make([]byte, n))
		if err != nil || d <= 0 {
			t.Fatalf("%d bytes: %v, %v", n, d, err)
		}
	}
	// The stream still echoes afterwards: Bulk left it in step.
	if _, err := q.RoundTrips(ctx, 64, 3, 0); err != nil {
		t.Fatal(err)
	}
}

// sampleReport is a fixed report: 0 and 16 MiB in both modes with
// baselines, and 256 MiB indirect only.
func sampleReport() *MigrateReport {
	r := &MigrateReport{Reps: 5, Warmup: 1, Dir: "/tmp/shared", Seconds: 12.5,
		Results: []MigrateRow{
			{SizeMiB: 0, Via: "direct", Seconds: 0.0008, FreezeMS: 0.3, CheckpointBytes: 259, MBps: 0.32, Reps: 5, Baseline: BaselineQUIC, VsBaseline: 0.3, Verified: true},
			{SizeMiB: 0, Via: "indirect", Seconds: 0.006, FreezeMS: 5.6, CheckpointBytes: 259, MBps: 0.04, Reps: 5, Baseline: BaselineFile, VsBaseline: 0.1, Verified: true},
			{SizeMiB: 16, Via: "direct", Seconds: 0.12, FreezeMS: 120, CheckpointBytes: 16777492, MBps: 139.8, Reps: 5, Baseline: BaselineQUIC, VsBaseline: 0.9, Verified: true},
			{SizeMiB: 16, Via: "indirect", Seconds: 0.08, FreezeMS: 80, CheckpointBytes: 16777492, MBps: 209.7, Reps: 5, Baseline: BaselineFile, VsBaseline: 0.3, Verified: true},
			{SizeMiB: 256, Via: "indirect", Seconds: 0.35, FreezeMS: 340, CheckpointBytes: 268435732, MBps: 767, Reps: 5, Verified: true},
		},
		Baselines: []MigrateBaseline{
			{SizeMiB: 0, Kind: BaselineQUIC, Seconds: 0.0002, Bytes: 259, MBps: 1.3, Reps: 5},
			{SizeMiB: 0, Kind: BaselineFile, Seconds: 0.0006, Bytes: 259, MBps: 0.4, Reps: 5},
			{SizeMiB: 16, Kind: BaselineQUIC, Seconds: 0.108, Bytes: 16777492, MBps: 155, Reps: 5},
			{SizeMiB: 16, Kind: BaselineFile, Seconds: 0.024, Bytes: 16777492, MBps: 699, Reps: 5},
		},
	}
	r.Targets = MigrateTargets(r)
	return r
}

func TestMigrateTargets(t *testing.T) {
	want := map[string]bool{
		"direct 16 MiB throughput / raw quic-go":                  true,
		"indirect 16 MiB throughput / write+fsync+read":           false,
		"direct freeze, empty state":                              true,
		"indirect freeze, empty state":                            false,
		"indirect 256 MiB / CRIU dump+restore (feature's figure)": true,
	}
	ts := sampleReport().Targets
	if len(ts) != len(want) {
		t.Fatalf("targets %+v, want %v", ts, want)
	}
	for _, tg := range ts {
		met, ok := want[tg.What]
		if !ok || tg.Met != met || tg.Want == "" || tg.Got == "" {
			t.Errorf("target %+v, want met=%v (known: %v)", tg, met, ok)
		}
	}
	// Without a size of 16 MiB or more, the throughput targets are at the
	// largest size.
	r := &MigrateReport{Results: []MigrateRow{{SizeMiB: 1, Via: "direct", Baseline: BaselineQUIC, VsBaseline: 0.5}, {SizeMiB: 4, Via: "direct", Baseline: BaselineQUIC, VsBaseline: 0.85}}}
	ts = MigrateTargets(r)
	if len(ts) != 1 || ts[0].What != "direct 4 MiB throughput / raw quic-go" || !ts[0].Met {
		t.Errorf("targets without a large size: %+v", ts)
	}
}

func TestWriteMigrateText(t *testing.T) {
	var b strings.Builder
	if err := WriteMigrateText(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"medians of 5 timed rounds after 1 untimed",
		"indirect/direct", "1995 direct s",
		"0 MiB", "16 MiB", "256 MiB",
		"0.67×",   // 0.08 / 0.12
		"15.9",    // DynamicPVM's 16 MB direct
		"29.0",    // and indirect
		"0.30 ms", // the empty state's direct freeze
		"direct/quic", "indirect/file",
		"16777492 B", "0.90×",
		"targets:", "missed", "met",
		"run took 12.5 s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// 256 MiB was measured indirectly only: its direct cells are empty.
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "256 MiB") && !strings.Contains(line, " - ") {
			t.Errorf("256 MiB row without a gap for direct: %q", line)
		}
	}
}

func TestWriteMigrateCSV(t *testing.T) {
	var b strings.Builder
	if err := WriteMigrateCSV(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(b.String())).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 6 || strings.Join(recs[0], ",") != strings.Join(migrateCSVHeader, ",") {
		t.Fatalf("csv:\n%s", b.String())
	}
	if got := strings.Join(recs[3], ","); got != "16,direct,0.12,120,16777492,139.8,5,true,quic,0.108,155,0.9" {
		t.Errorf("16 MiB direct row: %s", got)
	}
	if got := strings.Join(recs[5], ","); got != "256,indirect,0.35,340,268435732,767,5,true,,,," {
		t.Errorf("256 MiB indirect row: %s", got)
	}
}

func TestMigrateJSONShape(t *testing.T) {
	raw, err := json.Marshal(sampleReport())
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"size_mib", "via", "seconds", "freeze_ms", "checkpoint_bytes"} {
		if _, ok := got.Results[2][key]; !ok {
			t.Errorf("results lack %q: %s", key, raw)
		}
	}
	if got.Results[2]["size_mib"] != 16.0 || got.Results[2]["via"] != "direct" {
		t.Errorf("result 2: %v", got.Results[2])
	}
}

func TestWriteMigrateSVG(t *testing.T) {
	var b strings.Builder
	if err := WriteMigrateSVG(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"<svg", "direct (QUIC stream)", "indirect (shared dir)", "raw quic-go", "write+fsync+read", "state (MiB)", "</svg>"} {
		if !strings.Contains(out, want) {
			t.Errorf("plot lacks %q", want)
		}
	}
	if n := strings.Count(out, "<polyline"); n != 4 {
		t.Errorf("%d lines, want 4", n)
	}
	if err := WriteMigrateSVG(&b, &MigrateReport{}); err == nil {
		t.Error("an empty report was plotted")
	}
}

func TestMigrateCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Migrate(ctx, MigrateOptions{SizesMiB: []float64{0}, Reps: 1, Dir: t.TempDir()})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled run: %v", err)
	}
}
