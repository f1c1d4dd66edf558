package daemon

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/dpvm/dpvm/daemon/metrics"
	"github.com/dpvm/dpvm/daemon/metrics/metricstest"
	"github.com/dpvm/dpvm/task"
)

// scrapeUntil scrapes url until ok holds of the answer, or 30s have
// passed, and returns the last answer.
func scrapeUntil(t *testing.T, url string, ok func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		f := metricstest.Scrape(t, url)
		if ok(f) || time.Now().After(deadline) {
			return f
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serveMetrics serves d's metrics on loopback until the test ends and
// returns the scrape URL.
func serveMetrics(t *testing.T, d *Daemon) string {
	t.Helper()
	s, err := metrics.Serve("127.0.0.1:0", metrics.Handler(d.Metrics()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return "http://" + s.Addr() + "/metrics"
}

// TestMetricsScrapeVM scrapes the daemons of a running VM (QUIC on
// loopback) before and after a task sends messages across hosts and
// migrates, and checks that the figures moved as they should.
func TestMetricsScrapeVM(t *testing.T) {
	vm := startVM(t, 3, Config{Metrics: metrics.New(metrics.Options{})})
	m, h2, h3 := vm.Daemons[0], vm.Daemons[1], vm.Daemons[2]
	urls := []string{serveMetrics(t, m), serveMetrics(t, h2), serveMetrics(t, h3)}

	before := metricstest.Scrape(t, urls[0])
	if v, ok := metricstest.Value(before, "dpvm_messages_sent_total", "peer=h2"); ok && v != 0 {
		t.Fatalf("before any message: master sent %v to h2", v)
	}
	if _, ok := metricstest.Value(before, "go_goroutines"); !ok {
		t.Error("no Go runtime metrics (go_goroutines)")
	}
	if _, ok := metricstest.Value(before, "process_open_fds"); !ok {
		t.Error("no process metrics (process_open_fds)")
	}
	if v, ok := metricstest.Value(before, "dpvm_vm_host_tasks", "host=h3"); !ok || v != 0 {
		t.Errorf("master's view of h3's tasks: %v %v, want 0", v, ok)
	}

	const msgs = 3
	spawned, moved := make(chan task.TID, 1), make(chan struct{})
	root := fn(t, func(c *task.Ctx, _ int) error {
		tids, err := c.Spawn(&movingTask{}, 1, task.OnHost("h2"))
		if err != nil {
			return err
		}
		for i := range msgs {
			if err := c.Send(tids[0], 1, i); err != nil {
				return err
			}
		}
		spawned <- tids[0]
		<-moved
		return stopMover(c, tids[0], msgs)
	})
	rootTID, err := m.SpawnTask(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mv task.TID
	select {
	case mv = <-spawned:
	case <-ctx.Done():
		t.Fatal("the root task did not spawn its mover")
	}
	// Messages are counted as they are written to the connection, which
	// may follow Send: scrape until they are, within a deadline.
	mid := scrapeUntil(t, urls[0], func(f map[string]*dto.MetricFamily) bool {
		v, _ := metricstest.Value(f, "dpvm_messages_sent_total", "peer=h2")
		return v >= msgs
	})
	if v, _ := metricstest.Value(mid, "dpvm_message_sent_bytes_total", "peer=h2"); v <= 0 {
		t.Errorf("master sent %v bytes of messages to h2, want some", v)
	}
	if _, err := m.Migrate(ctx, mv, "h3", Direct); err != nil {
		t.Fatal(err)
	}
	close(moved)
	if info, err := m.Wait(ctx, rootTID); err != nil || info.State != Exited || info.Status != 0 {
		t.Fatalf("root task: %+v, %v", info, err)
	}

	type check struct {
		host   int
		name   string
		labels []string
		min    float64
		max    float64
	}
	checks := []check{
		{0, "dpvm_moves_total", []string{"mode=direct", "outcome=committed"}, 1, 1},
		{0, "dpvm_move_freeze_seconds", []string{"mode=direct"}, 1, 1},
		{0, "dpvm_move_duration_seconds", []string{"mode=direct"}, 1, 1},
		{0, "dpvm_move_checkpoint_bytes", []string{"mode=direct"}, 1, 1},
		{1, "dpvm_move_transfers_total", []string{"mode=direct", "outcome=ok"}, 1, 1},
		{1, "dpvm_move_transfer_seconds", []string{"mode=direct"}, 1, 1},
		// The mover received the messages on h2, then the stop on h3,
		// and answered from h3.
		{1, "dpvm_messages_received_total", []string{"peer=h1"}, msgs, 1e9},
		{2, "dpvm_messages_received_total", []string{"peer=h1"}, 1, 1e9},
		{2, "dpvm_messages_sent_total", []string{"peer=h1"}, 1, 1e9},
		{0, "dpvm_messages_received_total", []string{"peer=h3"}, 1, 1e9},
		{0, "dpvm_message_received_bytes_total", []string{"peer=h3"}, 1, 1e9},
		{0, "dpvm_tasks", []string{"state=exited"}, 1, 1},
		{2, "dpvm_tasks", []string{"state=exited"}, 1, 1},
		{2, "dpvm_tasks", []string{"state=running"}, 0, 0},
		{0, "dpvm_mailbox_messages", nil, 0, 0},
		{0, "dpvm_quic_sent_bytes_total", []string{"peer=h2"}, 1, 1e12},
		{2, "dpvm_quic_smoothed_rtt_seconds", []string{"peer=h1"}, 1e-9, 10},
		{0, "dpvm_host_load", nil, 0, 1e6},
		{0, "dpvm_vm_host_suspected", []string{"host=h2"}, 0, 0},
	}
	holds := func(f map[string]*dto.MetricFamily, c check) (float64, bool, bool) {
		v, ok := metricstest.Value(f, c.name, c.labels...)
		return v, ok, ok && v >= c.min && v <= c.max
	}
	// A frame's messages are counted once the frame is handled, which may
	// be after the task it carried a message to has taken it and answered:
	// scrape until the figures settle, within a deadline.
	for host, url := range urls {
		f := scrapeUntil(t, url, func(f map[string]*dto.MetricFamily) bool {
			for _, c := range checks {
				if _, _, good := holds(f, c); c.host == host && !good {
					return false
				}
			}
			return true
		})
		for _, c := range checks {
			if v, ok, good := holds(f, c); c.host == host && !good {
				t.Errorf("%s: %s%v = %v (present %v), want %v..%v", url, c.name, c.labels, v, ok, c.min, c.max)
			}
		}
	}
	evs, seen := m.Metrics().Events().Moves()
	if seen != 1 || len(evs) != 1 {
		t.Fatalf("move events: %d kept of %d, want 1", len(evs), seen)
	}
	if e := evs[0]; e.TID != mv.String() || e.From != "h2" || e.To != "h3" || e.Outcome != metrics.OutcomeCommitted || e.Bytes <= 0 {
		t.Errorf("move event %+v, want %v h2 -> h3 committed with its checkpoint's size", e, mv)
	}
}

// TestMetricsMoveFailed checks that a move refused before its task froze
// is counted as failed, with no freeze time.
func TestMetricsMoveFailed(t *testing.T) {
	vm := startVM(t, 2, Config{Metrics: metrics.New(metrics.Options{NoRuntime: true})})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.Migrate(ctx, task.NewTID(2, 99), "h1", Direct); err == nil {
		t.Fatal("moving a task that does not exist succeeded")
	}
	fams := metricstest.Scrape(t, serveMetrics(t, m))
	if v, _ := metricstest.Value(fams, "dpvm_moves_total", "mode=direct", "outcome=failed"); v != 1 {
		t.Errorf("failed moves %v, want 1", v)
	}
	if v, ok := metricstest.Value(fams, "dpvm_move_freeze_seconds", "mode=direct"); ok && v != 0 {
		t.Errorf("freeze observations %v after a move that never froze, want 0", v)
	}
	if _, ok := metricstest.Value(fams, "go_goroutines"); ok {
		t.Error("Go runtime metrics with NoRuntime")
	}
	if evs, _ := m.Metrics().Events().Moves(); len(evs) != 1 || evs[0].Err == "" || !strings.Contains(evs[0].Err, fmt.Sprint(task.NewTID(2, 99))) {
		t.Errorf("events %+v, want the failed move with its error", evs)
	}
}
