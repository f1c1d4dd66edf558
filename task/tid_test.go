package task

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestTIDStringParse(t *testing.T) {
	cases := []struct {
		tid TID
		s   string
	}{
		{NewTID(1, 42), "t1:42"},
		{NewTID(4294967295, 4294967295-1), "t4294967295:4294967294"},
		{NewTID(7, 0), "t7:0"},
		{0, "-"},
		{AnyTask, "*"},
	}
	for _, c := range cases {
		if got := c.tid.String(); got != c.s {
			t.Errorf("String(%#x) = %q, want %q", uint64(c.tid), got, c.s)
		}
		back, err := ParseTID(c.s)
		if err != nil || back != c.tid {
			t.Errorf("ParseTID(%q) = %v, %v; want %v", c.s, back, err, c.tid)
		}
	}
	tid := NewTID(3, 9)
	if tid.Host() != 3 || tid.Num() != 9 || tid.IsZero() {
		t.Errorf("NewTID(3, 9) parts: host %v num %d zero %v", tid.Host(), tid.Num(), tid.IsZero())
	}
}

func TestParseTIDErrors(t *testing.T) {
	for _, s := range []string{"", "t", "1:2", "t1", "t1:", "t:2", "t0:5", "tx:1", "t1:y", "t1:2:3", "t99999999999:1", "t1:-2"} {
		if _, err := ParseTID(s); !errors.Is(err, ErrBadTID) {
			t.Errorf("ParseTID(%q) error = %v, want ErrBadTID", s, err)
		}
	}
}

func TestTIDJSON(t *testing.T) {
	in := map[string]TID{"a": NewTID(2, 5)}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"a":"t2:5"}` {
		t.Fatalf("json = %s", b)
	}
	var out map[string]TID
	if err := json.Unmarshal(b, &out); err != nil || out["a"] != in["a"] {
		t.Fatalf("round trip = %v, %v", out, err)
	}
}

func FuzzParseTID(f *testing.F) {
	for _, s := range []string{"t1:42", "-", "*", "t0:0", "t1:", "t4294967295:4294967295"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tid, err := ParseTID(s)
		if err != nil {
			return
		}
		back, err := ParseTID(tid.String())
		if err != nil || back != tid {
			t.Fatalf("%q parsed to %v, which does not round-trip: %v %v", s, tid, back, err)
		}
	})
}

func TestExitStatus(t *testing.T) {
	if ExitStatus(nil) != 0 || Exit(0) != nil {
		t.Error("nil error or Exit(0) should be status 0")
	}
	if got := ExitStatus(Exit(3)); got != 3 {
		t.Errorf("ExitStatus(Exit(3)) = %d", got)
	}
	if got := ExitStatus(errors.New("boom")); got != 1 {
		t.Errorf("plain error status = %d, want 1", got)
	}
}

func TestHostIDText(t *testing.T) {
	b, err := json.Marshal(map[string]HostID{"h": 12})
	if err != nil || string(b) != `{"h":"h12"}` {
		t.Fatalf("json %s %v", b, err)
	}
	var m map[string]HostID
	if err := json.Unmarshal(b, &m); err != nil || m["h"] != 12 {
		t.Fatalf("round trip %v %v", m, err)
	}
	for _, bad := range []string{"", "12", "hx", "h-1", "h99999999999"} {
		if _, err := ParseHostID(bad); err == nil {
			t.Errorf("ParseHostID(%q) succeeded", bad)
		}
	}
}
