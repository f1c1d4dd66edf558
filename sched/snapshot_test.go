package sched

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseSnapshotDefaults(t *testing.T) {
	_, err := ParseSnapshot([]byte(`{"hosts":[{"name":"h1"}],"processes":[{"tid":"p","host":"h1"}],"hosts_note_is_not_here":0}`))
	if err == nil || !strings.Contains(err.Error(), `unknown field "hosts_note_is_not_here"`) {
		t.Fatalf("unknown key: err = %v", err)
	}
	s, err := ParseSnapshot([]byte(`{"hosts":[{"name":"h1","load":1}],"processes":[{"tid":"p","host":"h1"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Classes, DefaultClasses()) || s.Params != DefaultParams() {
		t.Errorf("defaults: classes %v params %+v", s.Classes, s.Params)
	}
	h := s.Hosts[0]
	if h.Alpha != 1 || h.Load != 1 || !math.IsInf(h.MemFree, 1) || h.Users != 0 || h.MaxUsers != 0 || h.Slowdown != 0 {
		t.Errorf("host defaults %+v", h)
	}
	if p := s.Processes[0]; p.Class != 0 || p.Mem != 0 || p.Counter != 0 {
		t.Errorf("process defaults %+v", p)
	}
	if s.Job != (Job{}) {
		t.Errorf("job default %+v", s.Job)
	}
}

func TestParseSnapshotValues(t *testing.T) {
	s, err := ParseSnapshot([]byte(`{
		"classes":[{"delta":1,"min":1,"max":1.5},{"delta":2,"max":3}],
		"params":{"load_reserve":0,"mem_reserve_mib":1,"mem_min_mib":0.5,"c1max":3,"c2max":2,"dmax":8,"delta_t":"100ms"},
		"hosts":[{"name":"h1","alpha":2,"load":3,"mem_free_mib":64,"users":1,"max_users":2,"slowdown":4.5}],
		"job":{"minsize":2,"maxsize":9},
		"processes":[{"tid":"p1","host":"h1","class":2,"mem_mib":8,"counter":5}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &Snapshot{
		Classes:   []Class{{1, 1, 1.5}, {2, 1.5, 3}},
		Params:    Params{LoadReserve: 0, MemReserve: 1, MemMin: 0.5, C1Max: 3, C2Max: 2, DMax: 8, DeltaT: 100 * time.Millisecond},
		Hosts:     []Host{{Name: "h1", Alpha: 2, Load: 3, MemFree: 64, Users: 1, MaxUsers: 2, Slowdown: 4.5}},
		Processes: []Process{{TID: "p1", Host: "h1", Class: 2, Mem: 8, Counter: 5}},
		Job:       Job{MinSize: 2, MaxSize: 9},
	}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
	s, err = ParseSnapshot([]byte(`{"params":{"delta_t":0.5},"hosts":[{"name":"h"}]}`))
	if err != nil || s.Params.DeltaT != 500*time.Millisecond {
		t.Fatalf("delta_t in seconds: %v %v", s, err)
	}
}

func TestParseSnapshotErrors(t *testing.T) {
	for _, c := range []struct {
		in, want string
	}{
		{``, "empty input"},
		{`{"hosts":[`, "unexpected end"},
		{`{"hosts":[{"name":"a"}]} {}`, "after the JSON object"},
		{`{"hosts":[{"name":"a",}]}`, "malformed JSON"},
		{`[]`, "expected a JSON object"},
		{`{"hosts":[{"name":"a","alpha":"fast"}]}`, `key "hosts.alpha": expected a number, got string`},
		{`{"hosts":[{"name":"a","users":1.5}]}`, `key "hosts.users": expected an integer`},
		{`{"hosts":[{"name":"a","alpha":-1}]}`, `host "a": alpha must be positive, got -1`},
		{`{"hosts":[{"name":"a","alpha":0}]}`, `alpha must be positive`},
		{`{"hosts":[{"name":"a","load":-1}]}`, `load must be non-negative`},
		{`{"hosts":[{"name":"a","mem_free_mib":-5}]}`, `mem_free_mib must be non-negative`},
		{`{"hosts":[{"name":"a","users":-1}]}`, `users must be non-negative`},
		{`{"hosts":[{"name":"a","max_users":-1}]}`, `max_users must be non-negative`},
		{`{"hosts":[{"name":"a","slowdown":-1}]}`, `slowdown must be non-negative`},
		{`{"hosts":[{"alpha":1}]}`, `host 1: name is required`},
		{`{"hosts":[{"name":"a"},{"name":"a"}]}`, `host "a" listed twice`},
		{`{"hosts":[]}`, `no hosts`},
		{`{}`, `no hosts`},
		{`{"hosts":[{"name":"a","load":1}],"processes":[{"tid":"p","host":"b"}]}`, `process "p": unknown host "b"`},
		{`{"hosts":[{"name":"a","load":1}],"processes":[{"host":"a"}]}`, `process 1: tid is required`},
		{`{"hosts":[{"name":"a","load":2}],"processes":[{"tid":"p","host":"a"},{"tid":"p","host":"a"}]}`, `process "p" listed twice`},
		{`{"hosts":[{"name":"a","load":1}],"processes":[{"tid":"p","host":"a"},{"tid":"q","host":"a"}]}`, `load 1 is smaller than its 2 listed processes`},
		{`{"hosts":[{"name":"a","load":1}],"processes":[{"tid":"p","host":"a","class":5}]}`, `class 5 out of range 1..4`},
		{`{"hosts":[{"name":"a","load":1}],"processes":[{"tid":"p","host":"a","class":0}]}`, `class 0 out of range`},
		{`{"hosts":[{"name":"a","load":1}],"processes":[{"tid":"p","host":"a","mem_mib":-1}]}`, `mem_mib must be a non-negative`},
		{`{"hosts":[{"name":"a","load":1}],"processes":[{"tid":"p","host":"a","counter":-1}]}`, `counter must be non-negative`},
		{`{"classes":[{"delta":2,"min":1.5,"max":2.5},{"delta":1,"min":1,"max":1.5}],"hosts":[{"name":"a"}]}`, `classes not ordered`},
		{`{"classes":[{"delta":1,"min":1,"max":2},{"delta":2,"min":1.5,"max":3}],"hosts":[{"name":"a"}]}`, `classes not ordered`},
		{`{"classes":[{"delta":1,"min":2,"max":1}],"hosts":[{"name":"a"}]}`, `need 0 <= min < max`},
		{`{"classes":[{"delta":5,"min":1,"max":2}],"hosts":[{"name":"a"}]}`, `delta 5 must be positive and lie in`},
		{`{"classes":[{"delta":1}],"hosts":[{"name":"a"}]}`, `delta and max are required`},
		{`{"classes":[],"hosts":[{"name":"a"}]}`, `no delay classes`},
		{`{"params":{"c1max":0},"hosts":[{"name":"a"}]}`, `c1max must be at least 1`},
		{`{"params":{"c2max":-3},"hosts":[{"name":"a"}]}`, `c2max must be at least 1`},
		{`{"params":{"dmax":0},"hosts":[{"name":"a"}]}`, `dmax must be positive`},
		{`{"params":{"load_reserve":-0.5},"hosts":[{"name":"a"}]}`, `load_reserve must be a non-negative`},
		{`{"params":{"mem_min_mib":-1},"hosts":[{"name":"a"}]}`, `mem_min_mib must be a non-negative`},
		{`{"params":{"mem_reserve_mib":-1},"hosts":[{"name":"a"}]}`, `mem_reserve_mib must be a non-negative`},
		{`{"params":{"delta_t":"soon"},"hosts":[{"name":"a"}]}`, `delta_t "soon" is not a duration`},
		{`{"params":{"delta_t":-1},"hosts":[{"name":"a"}]}`, `delta_t must be positive`},
		{`{"params":{"delta_t":"-3m"},"hosts":[{"name":"a"}]}`, `delta_t must be positive`},
		{`{"params":{"delta_t":true},"hosts":[{"name":"a"}]}`, `delta_t must be a duration string or a number`},
		{`{"job":{"minsize":0},"hosts":[{"name":"a"}]}`, `minsize must be at least 1`},
		{`{"job":{"minsize":5,"maxsize":4},"hosts":[{"name":"a"}]}`, `maxsize 4 must be at least minsize 5`},
		{`{"job":{"maxsize":0},"hosts":[{"name":"a"}]}`, `maxsize must be at least 1`},
	} {
		_, err := ParseSnapshot([]byte(c.in))
		if err == nil {
			t.Errorf("%s: accepted", c.in)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: error %v does not wrap ErrInvalid", c.in, err)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q, want it to mention %q", c.in, err, c.want)
		}
		if strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "wire") {
			t.Errorf("%s: error %q is not one clean line", c.in, err)
		}
	}
}

// FuzzParseSnapshot feeds arbitrary bytes to the decoder. Whatever it
// accepts must validate, and Plan and Step must decide on it without
// panicking and with consistent results.
func FuzzParseSnapshot(f *testing.F) {
	for _, seed := range []string{
		`{"hosts":[{"name":"h1","alpha":1,"load":0,"mem_free_mib":64}],"job":{"minsize":1,"maxsize":100}}`,
		`{"classes":[{"delta":1,"min":1,"max":1.5},{"delta":2,"min":1.5,"max":2.5}],"params":{"load_reserve":0.5,"mem_reserve_mib":1,"mem_min_mib":0.5,"c1max":6,"c2max":4,"dmax":12},"hosts":[{"name":"h1","alpha":1,"load":2,"mem_free_mib":64,"users":1,"max_users":0,"slowdown":4.5},{"name":"h2","alpha":4,"load":0,"mem_free_mib":128}],"processes":[{"tid":"p1","host":"h1","class":1,"mem_mib":8,"counter":5}]}`,
		`{"hosts":[{"name":"a","alpha":1e-300,"load":1e300}]}`,
		`{"hosts":[{"name":"a"}],"processes":[{"tid":"x","host":"a"}]}`,
		`{"params":{"delta_t":"3m"},"hosts":[{"name":"a","load":3}],"processes":[{"tid":"x","host":"a","counter":99}]}`,
		`not json`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSnapshot(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("accepted snapshot does not validate: %v", err)
		}
		m, err := Plan(s, s.Job)
		if err != nil {
			t.Fatalf("plan: %v", err)
		}
		total := 0
		for _, n := range m.Placement {
			total += n
		}
		if total != m.Size || (m.Class == 0) != (m.Size == 0) {
			t.Fatalf("plan: class %d size %d placement %v", m.Class, m.Size, m.Placement)
		}
		r, err := Step(s)
		if err != nil {
			t.Fatalf("step: %v", err)
		}
		if len(r.Counters) != len(s.Processes) {
			t.Fatalf("step: %d counters for %d processes", len(r.Counters), len(s.Processes))
		}
		if err := r.After.Validate(); err != nil {
			t.Fatalf("step: snapshot after the moves: %v", err)
		}
	})
}
