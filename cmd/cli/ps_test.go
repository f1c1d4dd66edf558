package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/task"
)

// TestPrintTasksByJob: ps lists the tasks of each job together, in job
// order, tasks of no job last, with the time since each running task's
// last safe point; --json carries it as since_safe_point_ms.
func TestPrintTasksByJob(t *testing.T) {
	ts := []daemon.TaskInfo{
		{TID: task.NewTID(1, 1), Type: "a", Job: 2, State: daemon.Running, SinceSafePointMS: 1500},
		{TID: task.NewTID(1, 2), Type: "b", State: daemon.Running},
		{TID: task.NewTID(1, 3), Type: "c", Job: 1, State: daemon.Running},
		{TID: task.NewTID(2, 1), Type: "d", Job: 2, State: daemon.Running, SinceSafePointMS: 2},
	}
	var out bytes.Buffer
	if err := printTasks(&out, ts, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var order []string
	for _, l := range lines[1:] {
		order = append(order, strings.Fields(l)[0])
	}
	if got := strings.Join(order, " "); got != "t1:3 t1:1 t2:1 t1:2" {
		t.Errorf("order %q, want tasks of j1, then j2, then of no job\n%s", got, out.String())
	}
	if !strings.Contains(lines[0], "SAFE POINT") || !strings.Contains(lines[2], "1.5s ago") || !strings.Contains(lines[4], "waiting") {
		t.Errorf("safe point column:\n%s", out.String())
	}
	out.Reset()
	if err := printTasks(&out, ts[:1], true); err != nil {
		t.Fatal(err)
	}
	var js []map[string]any
	if err := json.Unmarshal(out.Bytes(), &js); err != nil || len(js) != 1 || js[0]["since_safe_point_ms"] != 1500.0 {
		t.Errorf("json %s: %v", out.String(), err)
	}
}
