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

// TestPrintJobCheckpoints: ps shows each job's checkpoint progress after
// its tasks (last complete checkpoint, its age, the tasks that held up a
// failed round) and the job's warning; --json gives each task of a job
// its job's progress as "checkpoint".
func TestPrintJobCheckpoints(t *testing.T) {
	ts := []daemon.TaskInfo{
		{TID: task.NewTID(1, 1), Type: "a", Job: 2, State: daemon.Running},
		{TID: task.NewTID(1, 2), Type: "b", State: daemon.Running},
	}
	jobs := []daemon.JobCheckpointStatus{{Job: 2, EverySeconds: 1, Last: 0, AgeSeconds: 3.5, HeldUpBy: []string{"t1:1"}, HeldUpSeconds: 0.5,
		Failed: "no safe point", Warning: "job 2 has had no complete checkpoint for 3.5s"}}
	var out bytes.Buffer
	if err := printPS(&out, ts, jobs, false); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"LAST CHECKPOINT", "t1:1 (500ms)", "3.5s", "no safe point", "warning: job 2 has had no complete checkpoint for 3.5s"} {
		if !strings.Contains(s, want) {
			t.Errorf("ps lacks %q:\n%s", want, s)
		}
	}
	out.Reset()
	if err := printPS(&out, ts, jobs, true); err != nil {
		t.Fatal(err)
	}
	var js []map[string]any
	if err := json.Unmarshal(out.Bytes(), &js); err != nil || len(js) != 2 || js[0]["tid"] != "t1:1" {
		t.Fatalf("json %s: %v", out.String(), err)
	}
	ck, ok := js[0]["checkpoint"].(map[string]any)
	if !ok || ck["last_checkpoint"] != 0.0 || ck["age_s"] != 3.5 || ck["warning"] == nil || js[1]["checkpoint"] != nil {
		t.Errorf("json checkpoint of the tasks: %s", out.String())
	}
}
