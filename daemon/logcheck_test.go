package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/metrics"
	"github.com/dpvm/dpvm/task"
)

// logRecord is one log line as checkLog saw it: every key it carries,
// from the logger's With attributes and the call's own, groups joined
// with dots.
type logRecord struct {
	level slog.Level
	msg   string
	keys  []string
	attrs map[string]string
}

// checkLog is a slog handler that keeps every record for a test to
// inspect; duplicate keys are visible in keys.
type checkLog struct {
	mu     *sync.Mutex
	recs   *[]logRecord
	attrs  []slog.Attr // With attributes, keys already prefixed
	prefix string
}

func newCheckLog() *checkLog { return &checkLog{mu: &sync.Mutex{}, recs: &[]logRecord{}} }

func (h *checkLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *checkLog) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), prefixed(h.prefix, as)...)
	return &c
}

func (h *checkLog) WithGroup(name string) slog.Handler {
	c := *h
	c.prefix = h.prefix + name + "."
	return &c
}

func prefixed(prefix string, as []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, 0, len(as))
	for _, a := range as {
		if a.Value.Kind() == slog.KindGroup {
			out = append(out, prefixed(prefix+a.Key+".", a.Value.Group())...)
			continue
		}
		out = append(out, slog.Attr{Key: prefix + a.Key, Value: a.Value})
	}
	return out
}

func (h *checkLog) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	all := append([]slog.Attr(nil), h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		all = append(all, prefixed(h.prefix, []slog.Attr{a})...)
		return true
	})
	for _, a := range all {
		rec.keys = append(rec.keys, a.Key)
		rec.attrs[a.Key] = a.Value.Resolve().String()
	}
	h.mu.Lock()
	*h.recs = append(*h.recs, rec)
	h.mu.Unlock()
	return nil
}

func (h *checkLog) records() []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]logRecord(nil), *h.recs...)
}

// TestLogLinesOverAVMLife records every log line of a VM's life — joins,
// spawns across hosts, messages, a move, a task's own line, a clean halt —
// and checks that each names its host, that no key appears twice in a line,
// that a task's line names its task, and that a clean halt warns of nothing.
func TestLogLinesOverAVMLife(t *testing.T) {
	// Both clean halts: the master's (dpvm halt), and LocalVM's, which
	// stops the hosts first, each leaving the master (dpvm run --hosts N).
	t.Run("HaltVM", func(t *testing.T) { logLinesOverAVMLife(t, true) })
	t.Run("LocalVM.Halt", func(t *testing.T) { logLinesOverAVMLife(t, false) })
}

func logLinesOverAVMLife(t *testing.T, haltVM bool) {
	h := newCheckLog()
	// MailboxHigh of one byte: a message stays unacknowledged until its
	// task has taken it, so the messages to the sinks below are still held
	// by their sender when the VM halts.
	vm := startVM(t, 3, Config{Logger: slog.New(h), MailboxHigh: 1, Metrics: metrics.New(metrics.Options{NoRuntime: true})})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const msgs = 5
	spawned, moved := make(chan task.TID, 1), make(chan struct{})
	rootTID, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error {
		c.Log().Info("root task speaking")
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
	}))
	if err != nil {
		t.Fatal(err)
	}
	mv := <-spawned
	res, err := m.Migrate(ctx, mv, "h3", Direct)
	if err != nil {
		t.Fatal(err)
	}
	close(moved)
	// The move's identifier is in the logs of the three daemons it
	// touched: the master, the origin and the destination.
	if res.Move == "" {
		t.Fatal("the move's result names no move")
	}
	touched := map[string]bool{}
	for _, r := range h.records() {
		if r.attrs["move"] == res.Move {
			touched[r.attrs["host"]] = true
		}
	}
	if !touched["h1"] || !touched["h2"] || !touched["h3"] {
		t.Errorf("move %s logged by %v, want h1 (master), h2 (origin) and h3 (destination)", res.Move, touched)
	}
	if info, err := m.Wait(ctx, rootTID); err != nil || info.Status != 0 {
		t.Fatalf("root task: %+v %v", info, err)
	}
	// Tasks left running on the other hosts that never take their
	// messages, and messages to them unacknowledged, as the VM halts: a
	// clean halt loses them without a warning.
	sink := fn(t, func(c *task.Ctx, _ int) error {
		_, err := c.Recv(task.AnyTask, 99, nil)
		return err
	})
	sent := make(chan error, 1)
	if _, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error {
		var tids []task.TID
		for _, host := range []string{"h2", "h3"} {
			tid, err := c.Spawn(sink, 1, task.OnHost(host))
			if err != nil {
				sent <- err
				return err
			}
			tids = append(tids, tid...)
		}
		for i := range 8 {
			if err := c.Send(tids[i%len(tids)], 1, i); err != nil {
				sent <- err
				return err
			}
		}
		sent <- nil
		_, err := c.Recv(task.AnyTask, 99, nil)
		return err
	})); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if haltVM {
		m.HaltVM()
	}
	vm.Halt(10 * time.Second)

	recs := h.records()
	var spoke, migrated bool
	for _, r := range recs {
		line := fmt.Sprintf("%v %q %v", r.level, r.msg, r.attrs)
		seen := map[string]bool{}
		for _, k := range r.keys {
			if seen[k] {
				t.Errorf("key %q twice in %s", k, line)
			}
			seen[k] = true
		}
		if r.attrs["host"] == "" {
			t.Errorf("no host in %s", line)
		}
		if r.level >= slog.LevelWarn {
			t.Errorf("warning in a clean life: %s", line)
		}
		if r.msg == "root task speaking" {
			spoke = true
			if r.attrs["tid"] != rootTID.String() || r.attrs["host"] != "h1" {
				t.Errorf("task's line %s, want tid=%v host=h1", line, rootTID)
			}
		}
		if strings.HasPrefix(r.msg, "migrated") {
			migrated = true
		}
	}
	if !spoke || !migrated {
		t.Errorf("the task's line (%v) or the move's (%v) was not logged; %d records", spoke, migrated, len(recs))
	}
}
