package bench

import (
	"errors"
	"strings"
	"testing"
)

// criuSample is what integration/criu/run.sh printed on this machine.
const criuSample = `{"tool":"criu","version":"4.1.1","size_mib":0,"dump_s":0.2,"restore_s":0.3,"seconds":0.5,"image_bytes":862036,"reps":3,"verified":true,"dir":"/tmp/x"}

{"tool":"criu","version":"4.1.1","size_mib":256,"dump_s":0.55,"restore_s":1.54,"seconds":2.2,"image_bytes":269980465,"reps":3,"verified":true,"dir":"/tmp/x"}
`

func TestReadCRIU(t *testing.T) {
	rows, err := ReadCRIU(strings.NewReader(criuSample))
	if err != nil {
		t.Fatal(err)
	}
	want := []CRIURow{
		{SizeMiB: 0, DumpS: 0.2, RestoreS: 0.3, Seconds: 0.5, ImageBytes: 862036, Reps: 3, Version: "4.1.1"},
		{SizeMiB: 256, DumpS: 0.55, RestoreS: 1.54, Seconds: 2.2, ImageBytes: 269980465, Reps: 3, Version: "4.1.1"},
	}
	if len(rows) != 2 || rows[0] != want[0] || rows[1] != want[1] {
		t.Fatalf("rows %+v, want %+v", rows, want)
	}
	line := func(mod string) string {
		return `{"tool":"criu","size_mib":16,"dump_s":0.2,"restore_s":0.3,"seconds":0.5,"reps":3,"verified":true}` + mod
	}
	cases := []struct{ in, want string }{
		{"", "no result lines"},
		{"not json\n", "line 1: not a JSON object"},
		{`{"tool":"criu"} {}`, "line 1: more than one JSON value"},
		{`{"tool":"dmtcp","size_mib":1,"seconds":1,"reps":1,"verified":true}`, `line 1: tool "dmtcp"`},
		{`{"tool":"criu","size_mib":-1,"seconds":1,"reps":1,"verified":true}`, "size -1 MiB is outside"},
		{`{"tool":"criu","size_mib":5000,"seconds":1,"reps":1,"verified":true}`, "size 5000 MiB is outside"},
		{`{"tool":"criu","size_mib":1,"seconds":0,"reps":1,"verified":true}`, "want positive numbers"},
		{`{"tool":"criu","size_mib":1,"seconds":1,"dump_s":-1,"reps":1,"verified":true}`, "want positive numbers"},
		{`{"tool":"criu","size_mib":1,"seconds":1,"reps":0,"verified":true}`, "reps 0"},
		{`{"tool":"criu","size_mib":1,"seconds":1,"reps":1,"verified":false}`, "was not verified"},
		{`{"tool":"criu","size_mib":1,"seconds":1,"reps":1,"verified":true,"dump_s":"x"}`, "line 1: not a JSON object"},
		{line("\n") + line("\n"), "line 2: size 16 MiB is given twice"},
	}
	for _, c := range cases {
		_, err := ReadCRIU(strings.NewReader(c.in))
		if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want ErrOptions and %q", c.in, err, c.want)
		}
	}
}

// TestCRIUInReport: measured CRIU figures replace the feature's in the
// targets, and appear in the text and the plot.
func TestCRIUInReport(t *testing.T) {
	r := sampleReport()
	var err error
	if r.CRIU, err = ReadCRIU(strings.NewReader(criuSample)); err != nil {
		t.Fatal(err)
	}
	r.Targets = MigrateTargets(r)
	found := false
	for _, tg := range r.Targets {
		if strings.Contains(tg.What, "CRIU") {
			found = true
			if tg.What != "indirect 256 MiB / CRIU dump+restore (measured, criu 4.1.1)" || tg.Want != "< 2.2 s" || !tg.Met {
				t.Errorf("CRIU target %+v", tg)
			}
		}
	}
	if !found {
		t.Errorf("no CRIU target in %+v", r.Targets)
	}
	var b strings.Builder
	if err := WriteMigrateText(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CRIU's same-host dump+restore", "criu total s", "269980465 B", "0.16×"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := WriteMigrateSVG(&b, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "CRIU dump+restore") || strings.Count(b.String(), "<polyline") != 5 {
		t.Errorf("plot has no CRIU line:\n%s", b.String())
	}
}

// FuzzReadCRIU feeds `dpvm bench migrate --criu FILE` arbitrary lines: it
// never panics, and every row it accepts is in range.
func FuzzReadCRIU(f *testing.F) {
	f.Add(criuSample)
	f.Add(`{"tool":"criu","size_mib":16,"dump_s":0.2,"restore_s":0.3,"seconds":0.5,"reps":3,"verified":true}`)
	f.Add(`{"tool":"criu","size_mib":-1}` + "\n\n" + `{`)
	f.Add(`{"tool":"criu","size_mib":1e309,"dump_s":"x"}`)
	f.Fuzz(func(t *testing.T, in string) {
		rows, err := ReadCRIU(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, r := range rows {
			if r.SizeMiB < 0 || r.SizeMiB > MaxMigrateMiB || !(r.Seconds > 0) {
				t.Fatalf("accepted %+v from %q", r, in)
			}
		}
	})
}
