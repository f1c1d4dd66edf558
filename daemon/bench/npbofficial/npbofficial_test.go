package npbofficial

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestSummarizeRecorded(t *testing.T) {
	lines, err := ReadFile("testdata/results-A.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 20 {
		t.Fatalf("%d lines, want 20", len(lines))
	}
	rows := Summarize(lines)
	var kernels []string
	for _, r := range rows {
		kernels = append(kernels, r.Kernel)
		if len(r.Pairs) != 2 || r.Pairs[0].NP != 1 || r.Pairs[1].NP != 2 {
			t.Fatalf("%s: pairs %+v, want np 1 and 2", r.Kernel, r.Pairs)
		}
	}
	if got := strings.Join(kernels, ","); got != "ep,cg,mg,ft,is" {
		t.Fatalf("rows %s, want ep,cg,mg,ft,is", got)
	}
	ep1 := rows[0].Pairs[0]
	if want := 149.3778998938605 / 213.58; math.Abs(ep1.Ratio.Median-want) > 1e-12 || ep1.Rounds != 1 || ep1.Failed != 0 {
		t.Errorf("EP np 1: %+v, want ratio %v over 1 round", ep1, want)
	}
	ft2 := rows[3].Pairs[1]
	if want := 1265044.0 / 1024; ft2.DpvmMiB.Median != want {
		t.Errorf("FT np 2 dpvm peak %v MiB, want %v", ft2.DpvmMiB.Median, want)
	}
	if want := (241984.0 + 241900) / 1024; ft2.OfficialMiB.Median != want {
		t.Errorf("FT np 2 MPI peak %v MiB (sum of ranks), want %v", ft2.OfficialMiB.Median, want)
	}
	var b strings.Builder
	if err := WriteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| EP | A | 0.70 | 0.69 | 16 vs 25 | 0.65 | 149 vs 214 | 298 vs 431 | 0 |",
		"| FT | A | 0.73 | 0.84 | 1235 vs 473 | 2.61 |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestSummarizeRounds(t *testing.T) {
	mk := func(round int, system string, mops float64, ok bool) Line {
		return Line{Round: round, Kernel: "is", Class: "S", System: system, NP: 2, Mops: mops, Verified: ok, MaxRSSKiB: []int64{1024, 2048}}
	}
	lines := []Line{
		mk(1, SystemOfficial, 100, true), mk(1, SystemDpvm, 50, true),
		mk(2, SystemDpvm, 90, true), mk(2, SystemOfficial, 100, true),
		mk(3, SystemOfficial, 100, true), mk(3, SystemDpvm, 70, true),
		// A round whose dpvm run failed counts as failed, not as a ratio.
		mk(4, SystemOfficial, 100, true), mk(4, SystemDpvm, 0, false),
		// A round with only one side is left out.
		mk(5, SystemOfficial, 100, true),
	}
	rows := Summarize(lines)
	if len(rows) != 1 || len(rows[0].Pairs) != 1 {
		t.Fatalf("rows %+v, want one row with one pair", rows)
	}
	p := rows[0].Pairs[0]
	if p.Rounds != 3 || p.Failed != 1 {
		t.Errorf("rounds %d failed %d, want 3 and 1", p.Rounds, p.Failed)
	}
	if p.Ratio.Median != 0.7 || p.Ratio.Min != 0.5 || p.Ratio.Max != 0.9 {
		t.Errorf("ratio %+v, want median 0.7 over 0.5–0.9", p.Ratio)
	}
	if p.DpvmMiB.Median != 3 || p.MemRatio() != 1 {
		t.Errorf("peak %+v MiB, memory ratio %v; want 3 MiB, 1", p.DpvmMiB, p.MemRatio())
	}
	var b strings.Builder
	if err := WriteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	if want := "| IS | S | — | 0.70 (0.50–0.90) | 3 vs 3 | 1.00 | — vs — | 70 (50–90) vs 100 | 1 |"; !strings.Contains(b.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, b.String())
	}
}

func TestParseLinesRejects(t *testing.T) {
	for _, bad := range []string{
		`{"round":0,"kernel":"ep","class":"A","system":"dpvm","np":1,"time_s":1,"mops":1,"verified":true,"maxrss_kib":[]}`,
		`{"round":1,"kernel":"","class":"A","system":"dpvm","np":1,"time_s":1,"mops":1,"verified":true,"maxrss_kib":[]}`,
		`{"round":1,"kernel":"ep","class":"A","system":"pvm","np":1,"time_s":1,"mops":1,"verified":true,"maxrss_kib":[]}`,
		`{"round":1,"kernel":"ep","class":"A","system":"dpvm","np":0,"time_s":1,"mops":1,"verified":true,"maxrss_kib":[]}`,
		`{"round":1,"kernel":"ep","class":"A","system":"dpvm","np":1,"time_s":-1,"mops":1,"verified":true,"maxrss_kib":[]}`,
		`{"round":1,"kernel":"ep","class":"A","system":"dpvm","np":1,"time_s":1,"mops":1,"verified":true,"maxrss_kib":[-5]}`,
		`{"round":1,"kernel":"ep","class":"A","system":"dpvm","np":1,"time_s":1,"mops":1,"verified":true,"extra":1}`,
		`{"round":1,"kernel":"ep","class":"A","system":"dpvm","suite":"hpf","np":1,"time_s":1,"mops":1,"verified":true}`,
		`{"round":1,"kernel":"ep","class":"A","system":"official","suite":"serial","np":2,"time_s":1,"mops":1,"verified":true}`,
		`not json`,
	} {
		if _, err := ParseLines(strings.NewReader("# comment\n\n" + bad + "\n")); !errors.Is(err, ErrBadLine) {
			t.Errorf("%s: %v, want ErrBadLine", bad, err)
		} else if !strings.Contains(err.Error(), " 3:") {
			t.Errorf("%s: %v, want the line number 3", bad, err)
		}
	}
}

func FuzzParseLines(f *testing.F) {
	f.Add(`{"round":1,"kernel":"ep","class":"A","system":"dpvm","np":1,"time_s":1,"mops":1,"verified":true,"maxrss_kib":[1,2]}`)
	f.Add("# x\n\n{}")
	f.Fuzz(func(t *testing.T, s string) {
		lines, err := ParseLines(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, l := range lines {
			if err := l.Validate(); err != nil {
				t.Fatalf("accepted an invalid line %+v: %v", l, err)
			}
		}
		var b strings.Builder
		if err := WriteTable(&b, Summarize(lines)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSummarizeOMP pairs each dpvm run with the official run of its own
// suite: at np 2 one round holds an MPI pair and an OpenMP pair, and lines
// without a suite (older harnesses) count as serial at np 1 and MPI above.
func TestSummarizeOMP(t *testing.T) {
	mk := func(system, suite string, np int, mops float64, kib ...int64) Line {
		return Line{Round: 1, Kernel: "cg", Class: "A", System: system, Suite: suite, NP: np, Mops: mops, Verified: true, MaxRSSKiB: kib}
	}
	lines := []Line{
		mk(SystemOfficial, "", 1, 100, 1024), mk(SystemDpvm, "", 1, 110, 2048),
		mk(SystemOfficial, SuiteMPI, 2, 200, 1024, 1024), mk(SystemDpvm, SuiteMPI, 2, 150, 2048),
		mk(SystemOfficial, SuiteOMP, 2, 250, 1024), mk(SystemDpvm, SuiteOMP, 2, 200, 2048),
		mk(SystemOfficial, SuiteOMP, 4, 400, 2048), mk(SystemDpvm, SuiteOMP, 4, 500, 3072),
	}
	rows := Summarize(lines)
	if len(rows) != 1 {
		t.Fatalf("rows %+v, want one", rows)
	}
	type sn struct {
		suite string
		np    int
		ratio float64
	}
	var got []sn
	for _, p := range rows[0].Pairs {
		got = append(got, sn{p.Suite, p.NP, p.Ratio.Median})
		if p.Rounds != 1 || p.Failed != 0 {
			t.Errorf("%s np %d: %+v", p.Suite, p.NP, p)
		}
	}
	want := []sn{{SuiteSerial, 1, 1.1}, {SuiteMPI, 2, 0.75}, {SuiteOMP, 2, 0.8}, {SuiteOMP, 4, 1.25}}
	if !slices.Equal(got, want) {
		t.Fatalf("pairs %v, want %v", got, want)
	}
	var b strings.Builder
	if err := WriteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"| CG | A | 1.10 | 0.75 | 2 vs 2 | 1.00 | 110 vs 100 | 150 vs 200 | 0 |",
		"| kernel | class | N | dpvm np=N ÷ official OMP at N threads |",
		"| CG | A | 2 | 0.80 | 2 vs 1 | 2.00 | 200 vs 250 | 0 |",
		"| CG | A | 4 | 1.25 | 3 vs 2 | 1.50 | 500 vs 400 | 0 |",
	} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, b.String())
		}
	}
	// Without OpenMP pairs there is no second table.
	b.Reset()
	if err := WriteTable(&b, Summarize(lines[:4])); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "OMP") {
		t.Errorf("an OpenMP table without OpenMP runs:\n%s", b.String())
	}
}
