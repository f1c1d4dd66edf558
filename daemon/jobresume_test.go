package daemon

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// TestJobResumeRetriesDecidedByTheMasterNode: a host with tasks of a job
// crashes as the job's checkpoint round commits, before its resume. The
// round completes; the crashed host's resume fails, and the master asks it
// again as the master node decides (EvResumed → FxResume), up to the
// node's bound of five attempts in all and never more; the master's own
// host resumes at the first.
func TestJobResumeRetriesDecidedByTheMasterNode(t *testing.T) {
	shared := t.TempDir()
	var mu sync.Mutex
	attempts := map[int]int{} // resume attempts performed, by attempt number
	settled := false          // the node asked no more after attempt 5's outcome
	var vm *LocalVM
	var crashed sync.Once
	hook := func(point string) {
		var n int
		if _, err := fmt.Sscanf(point, "ckpt:resume %d", &n); err == nil {
			mu.Lock()
			attempts[n]++
			mu.Unlock()
			return
		}
		if _, err := fmt.Sscanf(point, "ckpt:resumed %d", &n); err == nil {
			mu.Lock()
			settled = settled || (attempts[5] > 0 && n == 0)
			mu.Unlock()
			return
		}
		if point == "ckpt:commit" {
			crashed.Do(func() { vm.Daemons[1].crash() })
		}
	}
	// The crashed host is not deemed lost within the test: the node's bound
	// alone ends the retries.
	vm = startVM(t, 2, Config{SharedDir: shared, MoveTimeout: time.Second, MoveStepTimeout: 200 * time.Millisecond, Heartbeat: time.Second, DeadAfter: time.Minute, FaultHook: hook})
	m, h2 := vm.Master(), vm.Daemons[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := m.newJob("ring2", "daemon.test.ringroot", JobOptions{})
	tids, err := m.startLocal(ctx, 0, js.id, task.SpawnRequest{Type: "daemon.test.ringroot", Count: 1,
		State: mustState(t, &ringRoot{N: 2, Laps: 4})})
	if err != nil {
		t.Fatal(err)
	}
	m.jobRunning(js, tids[0])
	waitRingMid(t)
	if _, err := m.CheckpointJob(ctx, js.id, ""); err != nil {
		t.Fatalf("the round, committed before the host's crash: %v", err)
	}
	get := func() map[int]int {
		mu.Lock()
		defer mu.Unlock()
		if !settled {
			return nil
		}
		out := map[int]int{}
		for k, v := range attempts {
			out[k] = v
		}
		return out
	}
	deadline := time.Now().Add(30 * time.Second)
	for get() == nil {
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("resume attempts %v: the crashed host's fifth attempt was not answered within 30 s", attempts)
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := get()
	if got[1] != 2 {
		t.Errorf("first attempts %d, want 2 (the master's host and the crashed one): %v", got[1], got)
	}
	for n := 2; n <= 5; n++ {
		if got[n] != 1 {
			t.Errorf("attempt %d made %d times, want once (the crashed host %s alone): %v", n, got[n], h2.Name(), got)
		}
	}
	if got[6] != 0 {
		t.Errorf("a sixth attempt, past the master node's bound: %v", got)
	}
}
