package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/metrics/metricstest"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCheckLoopback(t *testing.T) {
	for _, c := range []struct {
		addr   string
		public bool
		ok     bool
	}{
		{"127.0.0.1:9100", false, true},
		{"127.0.0.2:0", false, true},
		{"[::1]:9100", false, true},
		{"localhost:9100", false, true},
		{"0.0.0.0:9100", false, false},
		{":9100", false, false},
		{"10.0.0.1:9100", false, false},
		{"node1.example:9100", false, false},
		{"0.0.0.0:9100", true, true},
		{":9100", true, true},
		{"no-port", true, false},
	} {
		err := CheckLoopback(c.addr, c.public)
		if (err == nil) != c.ok {
			t.Errorf("CheckLoopback(%q, %v) = %v, want ok %v", c.addr, c.public, err, c.ok)
		}
		if err != nil && c.addr != "no-port" && !errors.Is(err, ErrNotLoopback) {
			t.Errorf("CheckLoopback(%q): %v is not ErrNotLoopback", c.addr, err)
		}
	}
}

func TestNilIsANoOp(t *testing.T) {
	var m *Metrics
	p := m.Peer("h2")
	p.Sent(1, 10)
	p.Received(1, 10)
	m.SetSource(func() Snapshot { return Snapshot{} })
	m.MoveEnded(Move{Mode: "direct", Outcome: OutcomeCommitted})
	m.Transferred("direct", time.Second, nil)
	m.JobCheckpointed(1, time.Second, nil)
	m.RolledBack(1, time.Second, errors.New("x"))
	m.SchedChecked(time.Now(), true, []Decision{{Reason: "delay", Action: "migrate"}})
	m.ForgetPeer("h2")
	if p != nil || m.Fresh() != nil || m.Events() != nil {
		t.Fatal("a nil Metrics made something")
	}
	if moves, seen := m.Events().Moves(); moves != nil || seen != 0 {
		t.Fatalf("nil events: %v %d", moves, seen)
	}
}

func TestEventsKeepTheLastN(t *testing.T) {
	e := NewEvents(3)
	for i := range 5 {
		e.Add(Move{ID: fmt.Sprint("m", i)})
	}
	moves, seen := e.Moves()
	var ids []string
	for _, mv := range moves {
		ids = append(ids, mv.ID)
	}
	if seen != 5 || strings.Join(ids, ",") != "m2,m3,m4" {
		t.Fatalf("kept %v of %d, want m2,m3,m4 of 5", ids, seen)
	}
	if got := e.Find("m3"); len(got) != 1 || got[0].ID != "m3" {
		t.Fatalf("Find(m3) = %v", got)
	}
	if got := e.Find("m0"); len(got) != 0 {
		t.Fatalf("Find(m0) = %v, want nothing (dropped)", got)
	}
}

func TestCountersAndSnapshot(t *testing.T) {
	m := New(Options{NoRuntime: true})
	p := m.Peer("h2")
	if m.Peer("h2") != p {
		t.Fatal("a second lookup made new counters")
	}
	p.Sent(1, 100)
	p.Sent(1, 50)
	p.Sent(0, 0)
	p.Received(1, 7)
	m.SetSource(func() Snapshot {
		return Snapshot{Tasks: map[string]int{"running": 2}, MailboxMessages: 3, Load: 2.5, MemFreeBytes: -1,
			Conns: []Conn{{Peer: "h2", SmoothedRTT: time.Millisecond, BytesSent: 9}},
			Hosts: []Host{{Name: "h2", Load: 1, Tasks: 1, MemFreeBytes: 1 << 20}}}
	})
	m.MoveEnded(Move{ID: "mv1", Mode: "direct", Outcome: OutcomeCommitted, Freeze: 20 * time.Millisecond, Duration: time.Second, Bytes: 4096})
	m.MoveEnded(Move{Mode: "indirect", Outcome: OutcomeAborted, Freeze: time.Millisecond})
	m.SchedChecked(time.Now(), true, []Decision{{TID: "t2:1", Host: "h2", Reason: "delay", Action: "migrate", Location: "to h3: …"},
		{Reason: "delay+users", Action: "candidate"}, {}})
	m.SchedChecked(time.Now(), false, nil)
	m.JobCheckpointed(4, time.Second, nil)
	m.RolledBack(4, time.Second, errors.New("no checkpoint"))
	if evs, seen := m.Events().Sched(); seen != 1 || evs[0].TID != "t2:1" || evs[0].Reason != "delay" || evs[0].Decision != "to h3: …" {
		t.Errorf("scheduler events %+v (%d), want the one selected process", evs, seen)
	}
	if evs, seen := m.Events().Jobs(); seen != 2 || evs[0].Kind != "checkpoint" || evs[1].Outcome != OutcomeFailed || evs[1].Job != 4 {
		t.Errorf("job events %+v (%d), want a checkpoint then a failed rollback of job 4", evs, seen)
	}
	want := `
# HELP dpvm_message_sent_bytes_total Payload bytes of the task messages sent to a peer host.
# TYPE dpvm_message_sent_bytes_total counter
dpvm_message_sent_bytes_total{peer="h2"} 150
# HELP dpvm_messages_received_total Task messages received from a peer host (before duplicate suppression).
# TYPE dpvm_messages_received_total counter
dpvm_messages_received_total{peer="h2"} 1
# HELP dpvm_messages_sent_total Task messages sent to a peer host (payloads handed to its connection, resends included).
# TYPE dpvm_messages_sent_total counter
dpvm_messages_sent_total{peer="h2"} 2
# HELP dpvm_moves_total Task moves this master ran, by mode (direct, indirect) and outcome (committed, aborted, failed).
# TYPE dpvm_moves_total counter
dpvm_moves_total{mode="direct",outcome="committed"} 1
dpvm_moves_total{mode="indirect",outcome="aborted"} 1
# HELP dpvm_sched_checks_total Dynamic-SED check periods the master ran.
# TYPE dpvm_sched_checks_total counter
dpvm_sched_checks_total 2
# HELP dpvm_sched_listings_total Checks that listed every host's processes (the others could decide nothing and skipped it).
# TYPE dpvm_sched_listings_total counter
dpvm_sched_listings_total 1
# HELP dpvm_tasks This daemon's tasks by state.
# TYPE dpvm_tasks gauge
dpvm_tasks{state="running"} 2
# HELP dpvm_vm_host_memory_free_bytes Master: each host's free memory as it last reported it (absent when unknown).
# TYPE dpvm_vm_host_memory_free_bytes gauge
dpvm_vm_host_memory_free_bytes{host="h2"} 1.048576e+06
`
	names := []string{"dpvm_message_sent_bytes_total", "dpvm_messages_received_total", "dpvm_messages_sent_total", "dpvm_moves_total",
		"dpvm_sched_checks_total", "dpvm_sched_listings_total", "dpvm_tasks", "dpvm_vm_host_memory_free_bytes", "dpvm_host_memory_free_bytes"}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.schedDecide); n != 2 {
		t.Errorf("%d decision series, want 2 (the process that is no candidate is not counted)", n)
	}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(""), "dpvm_host_memory_free_bytes"); err != nil {
		t.Errorf("unknown free memory exported: %v", err)
	}
	lint, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range lint {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	s, err := Serve("127.0.0.1:0", h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return "http://" + s.Addr()
}

func TestServeEventsAndPprof(t *testing.T) {
	m := New(Options{NoRuntime: true})
	m.MoveEnded(Move{ID: "mv-7", TID: "t2:1", Mode: "direct", Outcome: OutcomeCommitted})
	m.MoveEnded(Move{ID: "mv-8", TID: "t2:2", Mode: "direct", Outcome: OutcomeFailed})
	base := serve(t, Handler(m))
	var ev struct {
		Seen  uint64 `json:"seen"`
		Moves []Move `json:"moves"`
	}
	if err := json.Unmarshal([]byte(metricstest.Get(t, base+"/events?move_id=mv-7")), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Seen != 2 || len(ev.Moves) != 1 || ev.Moves[0].TID != "t2:1" {
		t.Fatalf("events for mv-7: %+v", ev)
	}
	if body := metricstest.Get(t, base+"/metrics"); !strings.Contains(body, `dpvm_moves_total{mode="direct",outcome="failed"} 1`) {
		t.Fatalf("/metrics:\n%s", body)
	}
	pp := serve(t, PprofHandler())
	if body := metricstest.Get(t, pp+"/debug/pprof/"); !strings.Contains(body, "goroutine") || !strings.Contains(body, "heap") {
		t.Fatalf("/debug/pprof/:\n%s", body)
	}
	if body := metricstest.Get(t, pp+"/debug/pprof/goroutine?debug=1"); !strings.Contains(body, "goroutine profile:") {
		t.Fatalf("goroutine profile:\n%s", body)
	}
}
