package load

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// glibcRecords are the records of testdata/utmp-glibc, which glibc's
// pututline wrote on linux/amd64 (little-endian).
var glibcRecords = []UtmpRecord{
	{Type: UtBootTime, PID: 0, Line: "~", ID: "~", User: "reboot", Host: "6.1.0", Session: 0, Time: time.Unix(1700000000, 250000e3).UTC()},
	{Type: UtRunLevel, PID: 53, Line: "~", ID: "~", User: "runlevel", Host: "6.1.0", Session: 53, Time: time.Unix(1700000001, 250000e3).UTC()},
	{Type: UtLoginProcess, PID: 700, Line: "tty1", ID: "tty1", User: "LOGIN", Session: 700, Time: time.Unix(1700000002, 250000e3).UTC()},
	{Type: UtUserProcess, PID: 1201, Line: "pts/0", ID: "ts/0", User: "alice", Host: "10.0.0.7", Session: 1201, Time: time.Unix(1700000100, 250000e3).UTC()},
	{Type: UtUserProcess, PID: 1202, Line: "pts/1", ID: "ts/1", User: "alice", Session: 1202, Time: time.Unix(1700000200, 250000e3).UTC()},
	{Type: UtUserProcess, PID: 1300, Line: "pts/2", ID: "ts/2", User: "bob", Host: "workstation-17.example.org", Session: 1300, Time: time.Unix(1700000300, 250000e3).UTC()},
	{Type: UtDeadProcess, PID: 1100, Line: "pts/3", ID: "ts/3", Session: 1100, Time: time.Unix(1700000050, 250000e3).UTC()},
}

func TestParseUtmpGlibcFile(t *testing.T) {
	data, err := os.ReadFile("testdata/utmp-glibc")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := ParseUtmp(data, binary.LittleEndian)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(glibcRecords) {
		t.Fatalf("got %d records, want %d", len(recs), len(glibcRecords))
	}
	for i, r := range recs {
		if !r.Time.Equal(glibcRecords[i].Time) {
			t.Errorf("record %d: time %v, want %v", i, r.Time, glibcRecords[i].Time)
		}
		r.Time = glibcRecords[i].Time
		if r != glibcRecords[i] {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, r, glibcRecords[i])
		}
	}
	users, sessions := InteractiveUsers(recs)
	if users != 2 || sessions != 3 {
		t.Errorf("InteractiveUsers = %d users, %d sessions; want 2, 3", users, sessions)
	}
}

// TestAppendUtmpMatchesGlibc checks the encoder byte for byte against the
// file glibc wrote, which pins the record layout.
func TestAppendUtmpMatchesGlibc(t *testing.T) {
	want, err := os.ReadFile("testdata/utmp-glibc")
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for _, r := range glibcRecords {
		got = AppendUtmp(got, r, binary.LittleEndian)
	}
	if !bytes.Equal(got, want) {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("first difference at byte %d (record %d, offset %d): got %#x, want %#x", i, i/UtmpRecordSize, i%UtmpRecordSize, got[i], want[i])
			}
		}
		t.Fatalf("got %d bytes, want %d", len(got), len(want))
	}
}

func TestParseUtmpEdges(t *testing.T) {
	long := UtmpRecord{
		Type: UtUserProcess, PID: -5,
		Line: strings.Repeat("l", 32), ID: "abcd", User: strings.Repeat("u", 32), Host: strings.Repeat("h", 256),
		Session: 1 << 30, Time: time.Unix(4000000000, 0).UTC(), // after 2038: tv_sec read as unsigned
	}
	for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		data := AppendUtmp(nil, long, order)
		data = AppendUtmp(data, UtmpRecord{Type: UtUserProcess, User: "carol", Line: "pts/9"}, order)
		data = append(data, make([]byte, UtmpRecordSize-1)...) // partial record being appended
		recs, err := ParseUtmp(data, order)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 2 {
			t.Fatalf("%v: %d records, want 2 (the partial one ignored)", order, len(recs))
		}
		if recs[0] != long {
			t.Errorf("%v: fields filling their size:\n got %+v\nwant %+v", order, recs[0], long)
		}
		if u, s := InteractiveUsers(recs); u != 2 || s != 2 {
			t.Errorf("%v: users %d sessions %d, want 2, 2", order, u, s)
		}
	}
	// A microsecond field out of range keeps the second.
	data := AppendUtmp(nil, UtmpRecord{Type: UtUserProcess, User: "x", Time: time.Unix(100, 0)}, binary.LittleEndian)
	binary.LittleEndian.PutUint32(data[utOffTvUsec:], 2_000_000)
	recs, _ := ParseUtmp(data, binary.LittleEndian)
	if !recs[0].Time.Equal(time.Unix(100, 0)) {
		t.Errorf("usec out of range: time %v, want 100 s", recs[0].Time)
	}
	// A user process with an empty name is no user.
	recs, _ = ParseUtmp(AppendUtmp(nil, UtmpRecord{Type: UtUserProcess}, nil), nil)
	if u, s := InteractiveUsers(recs); u != 0 || s != 0 {
		t.Errorf("nameless session counted: %d users, %d sessions", u, s)
	}
	if _, err := ParseUtmp(make([]byte, MaxUtmpSize+1), nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("oversized utmp: err %v, want ErrMalformed", err)
	}
}

// TestProcReadsBuiltUtmp writes a utmp file in the machine's format, as
// login programs do, and reads it through Proc.
func TestProcReadsBuiltUtmp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "utmp")
	var data []byte
	for _, u := range []string{"dave", "erin", "dave", "frank"} {
		data = AppendUtmp(data, UtmpRecord{Type: UtUserProcess, PID: 10, Line: "pts/1", User: u, Time: time.Unix(1700000000, 0)}, nil)
	}
	data = AppendUtmp(data, UtmpRecord{Type: UtDeadProcess, Line: "pts/7", User: "gone"}, nil)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	p := fixtureProc()
	p.UtmpPath = path
	s, err := p.Sample(time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if s.Users != 3 {
		t.Errorf("users = %d, want 3 (dave, erin, frank)", s.Users)
	}
}
