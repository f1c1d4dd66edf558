package npb

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestReportRoundTrip(t *testing.T) {
	zeta, n, ok := 17.130235054029, 50, true
	r := &Report{Kernel: "cg", Class: "A", NP: 2, Hosts: 1, Iterations: 15, TimeS: 1.5, Mops: 997.6, MopsPerTask: 498.8,
		Verified: Successful, Values: Values{Zeta: &zeta, PartialVerified: &n, FullVerified: &ok,
			Checksums: [][2]float64{{504.6735008193, 511.404790551}}}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"kernel":"cg"`, `"class":"A"`, `"np":2`, `"hosts":1`, `"time_s":1.5`, `"mops":997.6`, `"verified":"SUCCESSFUL"`, `"zeta":17.130235054029`, `"checksums":[[504.6735008193,511.404790551]]`, `"partial_verified":50`, `"full_verified":true`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("JSON %s lacks %s", b, key)
		}
	}
	back, err := ParseReport(b)
	if err != nil {
		t.Fatal(err)
	}
	if *back.Values.Zeta != zeta || back.Values.Checksums[0] != r.Values.Checksums[0] || back.Mops != r.Mops {
		t.Fatalf("round trip changed the report: %+v", back)
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CG Benchmark Completed.", "Zeta            =       1.7130235054029e+01", "T =     1     Checksum", "Verification    =   SUCCESSFUL"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
}

func TestParseReportRejects(t *testing.T) {
	for _, in := range []string{
		``,
		`{`,
		`{"kernel":"xx","class":"S","verified":"SUCCESSFUL"}`,
		`{"kernel":"ep","class":"Q","verified":"SUCCESSFUL"}`,
		`{"kernel":"ep","class":"S","verified":"MAYBE"}`,
		`{"kernel":"ep","class":"S","verified":"SUCCESSFUL","extra":1}`,
		`{"kernel":"ep","class":"S","verified":"SUCCESSFUL","values":{"sx":"a"}}`,
	} {
		if _, err := ParseReport([]byte(in)); err == nil {
			t.Errorf("ParseReport(%q) succeeded", in)
		}
	}
}

func TestLineSink(t *testing.T) {
	var other bytes.Buffer
	var got []Progress
	s := &lineSink{other: &other, progress: func(p Progress) { got = append(got, p) }}
	// Writes split anywhere, lines of other output pass through.
	in := "hello\n" + progressPrefix + `{"done":1,"total":4}` + "\n" + reportPrefix + `{"kernel":"is","class":"S","np":1,"verified":"SUCCESSFUL"}` + "\n"
	for i := 0; i < len(in); i += 7 {
		if _, err := s.Write([]byte(in[i:min(i+7, len(in))])); err != nil {
			t.Fatal(err)
		}
	}
	if other.String() != "hello\n" || len(got) != 1 || got[0] != (Progress{1, 4}) || s.report == nil || s.report.Kernel != "is" || s.err != nil {
		t.Fatalf("other %q, progress %v, report %+v, err %v", other.String(), got, s.report, s.err)
	}
	s.Write([]byte(reportPrefix + "{broken\n"))
	if s.err == nil {
		t.Fatal("a malformed report line was accepted")
	}
}

func FuzzParseReport(f *testing.F) {
	f.Add([]byte(`{"kernel":"ft","class":"W","np":2,"hosts":1,"time_s":0.2,"mops":1800,"verified":"SUCCESSFUL","values":{"checksums":[[567.36,529.32]]}}`))
	f.Add([]byte(`{"kernel":"is","class":"B","verified":"NOT PERFORMED","values":{"partial_verified":0,"full_verified":true}}`))
	f.Add([]byte(`{"kernel":"ep"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseReport(data)
		if err != nil {
			return
		}
		// What parses re-encodes and parses to the same verdict.
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		r2, err := ParseReport(b)
		if err != nil {
			t.Fatalf("re-parse %s: %v", b, err)
		}
		if r2.Kernel != r.Kernel || r2.Class != r.Class || r2.Verified != r.Verified {
			t.Fatalf("round trip changed %+v into %+v", r, r2)
		}
	})
}
