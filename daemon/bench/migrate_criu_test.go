package bench

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// criuSample is what integration/criu/run.sh printed on this machine: a
// line of a same-host run (before between-hosts figures existed) and one
// of a run that moved the process between hosts too.
const criuSample = `{"tool":"criu","version":"4.1.1","size_mib":0,"dump_s":0.2,"restore_s":0.3,"seconds":0.5,"image_bytes":862036,"reps":3,"verified":true,"dir":"/tmp/x"}

{"tool":"criu","version":"4.1.1","size_mib":256,"dump_s":0.55,"restore_s":1.54,"seconds":2.2,"image_bytes":269980465,"reps":3,"verified":true,"dir":"/tmp/x","remote_dump_s":0.6,"copy_s":2,"remote_restore_s":1.4,"remote_s":4,"copy_via":"scp","cipher":"chacha20-poly1305@openssh.com","ssh":"OpenSSH_9.2p1 Debian-2+deb12u10"}
`

func TestReadCRIU(t *testing.T) {
	rows, err := ReadCRIU(strings.NewReader(criuSample))
	if err != nil {
		t.Fatal(err)
	}
	want := []CRIURow{
		{SizeMiB: 0, DumpS: 0.2, RestoreS: 0.3, Seconds: 0.5, ImageBytes: 862036, Reps: 3, Version: "4.1.1"},
		{SizeMiB: 256, DumpS: 0.55, RestoreS: 1.54, Seconds: 2.2, ImageBytes: 269980465, Reps: 3, Version: "4.1.1",
			RemoteDumpS: 0.6, CopyS: 2, RemoteRestoreS: 1.4, RemoteS: 4, CopyVia: "scp", Cipher: "chacha20-poly1305@openssh.com"},
	}
	if len(rows) != 2 || rows[0] != want[0] || rows[1] != want[1] {
		t.Fatalf("rows %+v, want %+v", rows, want)
	}
	if rows[0].Remote() || !rows[1].Remote() {
		t.Errorf("Remote: %v, %v; want false, true", rows[0].Remote(), rows[1].Remote())
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
		{line("") + "\n" + strings.Replace(line(""), `"reps"`, `"copy_s":-1,"remote_s":1,"copy_via":"scp","reps"`, 1), "line 2: times between hosts"},
		{strings.Replace(line(""), `"reps"`, `"remote_dump_s":0.2,"copy_s":1,"copy_via":"scp","reps"`, 1), "without remote_s"},
		{strings.Replace(line(""), `"reps"`, `"cipher":"aes128-ctr","reps"`, 1), "without remote_s"},
		{strings.Replace(line(""), `"reps"`, `"remote_s":2,"copy_via":"scp","reps"`, 1), "without copy_s and copy_via"},
		{strings.Replace(line(""), `"reps"`, `"remote_s":2,"copy_s":1,"reps"`, 1), "without copy_s and copy_via"},
		{strings.Replace(line(""), `"reps"`, `"remote_s":"x","reps"`, 1), "not a JSON object"},
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
	if !strings.Contains(b.String(), ">CRIU same host</text>") || strings.Count(b.String(), "<polyline") != 6 {
		t.Errorf("plot has no CRIU lines:\n%s", b.String())
	}
}

// criuRemoteReport is sampleReport with direct moves of 256 and 1024 MiB
// and CRIU figures between hosts for both: direct beats CRIU at 256 MiB
// (0.5 s against 4 s) and not at 1024 MiB (6 s against 5 s).
func criuRemoteReport(t *testing.T) *MigrateReport {
	t.Helper()
	r := sampleReport()
	r.Results = append(r.Results,
		MigrateRow{SizeMiB: 256, Via: "direct", Seconds: 0.5, FreezeMS: 490, CheckpointBytes: 268435732, MBps: 537, Reps: 5, Verified: true},
		MigrateRow{SizeMiB: 1024, Via: "direct", Seconds: 6, FreezeMS: 5990, CheckpointBytes: 1073742352, MBps: 179, Reps: 5, Verified: true})
	in := criuSample + `{"tool":"criu","version":"4.1.1","size_mib":1024,"dump_s":0.6,"restore_s":3.9,"seconds":4.5,"image_bytes":1078249107,"reps":3,"verified":true,"remote_dump_s":0.7,"copy_s":3,"remote_restore_s":1.3,"remote_s":5,"copy_via":"scp","cipher":"chacha20-poly1305@openssh.com"}`
	var err error
	if r.CRIU, err = ReadCRIU(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	r.Targets = MigrateTargets(r)
	return r
}

// TestCRIURemoteTargets: CRIU's move between hosts judges direct migration
// from 256 MiB up, and only where it was measured.
func TestCRIURemoteTargets(t *testing.T) {
	r := criuRemoteReport(t)
	want := map[string]MigrateTarget{
		"direct 256 MiB / CRIU between hosts: dump+ssh copy+restore (measured, criu 4.1.1)":  {Want: "< 4 s", Got: "0.500 s", Met: true},
		"direct 1024 MiB / CRIU between hosts: dump+ssh copy+restore (measured, criu 4.1.1)": {Want: "< 5 s", Got: "6.000 s", Met: false},
	}
	got := 0
	for _, tg := range r.Targets {
		if !strings.Contains(tg.What, "between hosts") {
			continue
		}
		got++
		w, ok := want[tg.What]
		if !ok || tg.Want != w.Want || tg.Got != w.Got || tg.Met != w.Met {
			t.Errorf("target %+v, want %+v (known: %v)", tg, w, ok)
		}
	}
	if got != len(want) {
		t.Errorf("%d between-hosts targets in %+v, want %d", got, r.Targets, len(want))
	}
	// Same-host figures alone judge no direct move.
	r.CRIU = []CRIURow{{SizeMiB: 256, DumpS: 0.5, RestoreS: 1, Seconds: 1.5, Reps: 3}}
	for _, tg := range MigrateTargets(r) {
		if strings.Contains(tg.What, "between hosts") {
			t.Errorf("between-hosts target without between-hosts figures: %+v", tg)
		}
	}
}

// TestCRIURemoteOutputs: the move between hosts is in the text, the CSV,
// the JSON and the plot, beside the direct moves.
func TestCRIURemoteOutputs(t *testing.T) {
	r := criuRemoteReport(t)
	var b strings.Builder
	if err := WriteMigrateText(&b, r); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{
		"CRIU between hosts: dump, encrypted copy of the images to the other host (scp, chacha20-poly1305@openssh.com), restore there:",
		"dump s  copy s", "direct/criu",
		"256 MiB   0.600   2.000  134.99 MB/s      1.400    4.000     0.500        0.12×",
		"1024 MiB   0.700   3.000  359.42 MB/s      1.300    5.000     6.000        1.20×",
		"direct 1024 MiB / CRIU between hosts: dump+ssh copy+restore (measured, criu 4.1.1)  < 5 s    6.000 s  missed",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	// The 0 MiB row was measured on the same host only.
	if strings.Contains(text[strings.Index(text, "CRIU between hosts"):], "\n     0 MiB") {
		t.Errorf("a same-host row in the between-hosts table:\n%s", text)
	}

	b.Reset()
	if err := WriteMigrateCSV(&b, r); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(b.String())).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var criu []string
	for _, rec := range recs {
		if len(rec) != len(migrateCSVHeader) {
			t.Fatalf("row %q has %d fields, want %d", rec, len(rec), len(migrateCSVHeader))
		}
		if strings.HasPrefix(rec[1], "criu") {
			criu = append(criu, strings.Join(rec, ","))
		}
	}
	wantCSV := []string{
		"0,criu,0.5,,862036,1.72407,3,true,,,,",
		"256,criu,2.2,,269980465,122.718,3,true,,,,",
		"256,criu-remote,4,,269980465,67.4951,3,true,,,,",
		"1024,criu,4.5,,1078249107,239.611,3,true,,,,",
		"1024,criu-remote,5,,1078249107,215.65,3,true,,,,",
	}
	if strings.Join(criu, "\n") != strings.Join(wantCSV, "\n") {
		t.Errorf("CRIU CSV rows:\n%s\nwant:\n%s", strings.Join(criu, "\n"), strings.Join(wantCSV, "\n"))
	}

	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var shape struct {
		CRIU []map[string]any `json:"criu"`
	}
	if err := json.Unmarshal(raw, &shape); err != nil {
		t.Fatal(err)
	}
	if len(shape.CRIU) != 3 {
		t.Fatalf("JSON criu: %s", raw)
	}
	if _, ok := shape.CRIU[0]["remote_s"]; ok {
		t.Errorf("same-host row with remote_s: %v", shape.CRIU[0])
	}
	for _, key := range []string{"size_mib", "dump_s", "restore_s", "seconds", "image_bytes", "reps", "version"} {
		if _, ok := shape.CRIU[1][key]; !ok {
			t.Errorf("JSON criu row lacks %q: %v", key, shape.CRIU[1])
		}
	}
	if shape.CRIU[1]["remote_s"] != 4.0 || shape.CRIU[1]["copy_s"] != 2.0 || shape.CRIU[1]["remote_dump_s"] != 0.6 ||
		shape.CRIU[1]["remote_restore_s"] != 1.4 || shape.CRIU[1]["copy_via"] != "scp" || shape.CRIU[1]["cipher"] != "chacha20-poly1305@openssh.com" {
		t.Errorf("JSON criu row between hosts: %v", shape.CRIU[1])
	}

	b.Reset()
	if err := WriteMigrateSVG(&b, r); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	if !strings.Contains(svg, ">CRIU between hosts</text>") || strings.Count(svg, "<polyline") != 6 {
		t.Errorf("plot lacks the between-hosts line:\n%s", svg)
	}
	c := MigrateChart(r)
	last := c.Series[len(c.Series)-1]
	if last.Name != "CRIU between hosts" || len(last.X) != 2 || last.X[0] != 256 || last.Y[1] != 5 {
		t.Errorf("between-hosts series %+v", last)
	}
}

// FuzzReadCRIU feeds `dpvm bench migrate --criu FILE` arbitrary lines: it
// never panics, and every row it accepts is in range.
func FuzzReadCRIU(f *testing.F) {
	f.Add(criuSample)
	f.Add(`{"tool":"criu","size_mib":16,"dump_s":0.2,"restore_s":0.3,"seconds":0.5,"reps":3,"verified":true}`)
	f.Add(`{"tool":"criu","size_mib":-1}` + "\n\n" + `{`)
	f.Add(`{"tool":"criu","size_mib":1e309,"dump_s":"x"}`)
	f.Add(`{"tool":"criu","size_mib":16,"seconds":0.5,"reps":3,"verified":true,"remote_s":2,"copy_s":1,"copy_via":"scp"}`)
	f.Add(`{"tool":"criu","size_mib":16,"seconds":0.5,"reps":3,"verified":true,"remote_s":1e400,"copy_s":-0}`)
	f.Fuzz(func(t *testing.T, in string) {
		rows, err := ReadCRIU(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, r := range rows {
			if r.SizeMiB < 0 || r.SizeMiB > MaxMigrateMiB || !(r.Seconds > 0) {
				t.Fatalf("accepted %+v from %q", r, in)
			}
			if r.Remote() && (!(r.CopyS > 0) || r.CopyVia == "" || r.RemoteDumpS < 0 || r.RemoteRestoreS < 0) {
				t.Fatalf("accepted between-hosts figures %+v from %q", r, in)
			}
			if !r.Remote() && (r.CopyS != 0 || r.RemoteDumpS != 0 || r.RemoteRestoreS != 0 || r.CopyVia != "") {
				t.Fatalf("accepted between-hosts phases without a total: %+v from %q", r, in)
			}
		}
	})
}

// TestCRIULineRoundTrip: a line as integration/criu writes it (a CRIULine
// encoded as JSON) reads back as the same row.
func TestCRIULineRoundTrip(t *testing.T) {
	want := CRIURow{SizeMiB: 256, DumpS: 0.2, RestoreS: 0.9, Seconds: 1.1, ImageBytes: 269932397, Reps: 3,
		Version: "4.1.1", RemoteDumpS: 0.24, CopyS: 2.2, RemoteRestoreS: 0.84, RemoteS: 3.4, CopyVia: "scp",
		Cipher: "chacha20-poly1305@openssh.com"}
	b, err := json.Marshal(CRIULine{CRIURow: want, Tool: "criu", Verified: true, Dir: "/tmp/x", SSH: "OpenSSH_9.2p1"})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := ReadCRIU(strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0] != want {
		t.Fatalf("read %+v, want %+v", rows, want)
	}
}
