package load

import (
	"encoding/binary"
	"math"
	"os"
	"testing"
)

// FuzzParseUtmp feeds untrusted bytes to the utmp parser: it must not
// panic, must return one record per whole 384-byte record, and the records
// must survive encoding and decoding again unchanged.
func FuzzParseUtmp(f *testing.F) {
	if data, err := os.ReadFile("testdata/utmp-glibc"); err == nil {
		f.Add(data)
	}
	f.Add(AppendUtmp(nil, UtmpRecord{Type: UtUserProcess, User: "alice", Line: "pts/0"}, binary.LittleEndian))
	f.Add(make([]byte, UtmpRecordSize+7))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := ParseUtmp(data, binary.LittleEndian)
		if err != nil {
			if len(data) <= MaxUtmpSize {
				t.Fatalf("error on %d bytes: %v", len(data), err)
			}
			return
		}
		if len(recs) != len(data)/UtmpRecordSize {
			t.Fatalf("%d records from %d bytes", len(recs), len(data))
		}
		var again []byte
		for _, r := range recs {
			again = AppendUtmp(again, r, binary.LittleEndian)
		}
		back, err := ParseUtmp(again, binary.LittleEndian)
		if err != nil || len(back) != len(recs) {
			t.Fatalf("re-parse: %d records, %v", len(back), err)
		}
		for i := range recs {
			if back[i] != recs[i] {
				t.Fatalf("record %d changed on re-encoding:\n%+v\n%+v", i, recs[i], back[i])
			}
		}
		users, sessions := InteractiveUsers(recs)
		if users < 0 || users > sessions || sessions > len(recs) {
			t.Fatalf("users %d, sessions %d, records %d", users, sessions, len(recs))
		}
	})
}

// FuzzParseProc feeds untrusted bytes to the /proc parsers: none may
// panic, and what they accept must be within the package's bounds.
func FuzzParseProc(f *testing.F) {
	for _, p := range []string{"testdata/proc/stat", "testdata/proc/meminfo", "testdata/proc/meminfo-old", "testdata/proc/loadavg", "testdata/proc/task/103/stat"} {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("procs_running 3\nMemFree: 12 kB\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if st, err := ParseStat(data); err == nil {
			if st.ProcsRunning < 0 || st.ProcsRunning > MaxTasks || st.ProcsBlocked < 0 || st.ProcsBlocked > MaxTasks || st.CPUs < 0 || st.CPUs > MaxTasks {
				t.Fatalf("stat out of bounds: %+v", st)
			}
		}
		if m, err := ParseMeminfo(data); err == nil {
			if a := m.AvailableMiB(); !(a >= 0) || math.IsInf(a, 0) || a > 3*MaxMemMiB {
				t.Fatalf("available memory %g MiB from %+v", a, m)
			}
		}
		if v, err := ParseLoadavg(data); err == nil && !inRange(v, MaxLoad) {
			t.Fatalf("load average %g", v)
		}
		if s, err := ParseTaskState(data); err == nil && !(s >= 'A' && s <= 'Z' || s >= 'a' && s <= 'z') {
			t.Fatalf("state %q", s)
		}
	})
}
