package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dpvm/dpvm/examples"
)

// TestChaos runs pi on a virtual machine of daemon processes with a job
// checkpoint every 300 ms while a seeded schedule of faults strikes: host
// daemons are killed with SIGKILL, new ones join, tasks of the job are
// migrated. Each fault waits for a checkpoint newer than the last fault's,
// so the schedule depends on the job's progress, not on a clock. The job
// must finish with the hits an uninterrupted run counts; the test prints
// the faults injected and the rollbacks the master made.
func TestChaos(t *testing.T) {
	const samples = 400_000_000
	want := make(chan int64, 1)
	go func() { want <- piHits(samples) }()

	shared := t.TempDir()
	extra := []string{"--shared-dir", shared, "--move-timeout", "2s"}
	v := startVM(t, 3, extra...)
	run := start(t, "pi under chaos", v.env, "run", "--master", v.addr, "--checkpoint-every", "300ms",
		"pi", "-workers", "6", "-samples", fmt.Sprint(samples))
	jobDir := filepath.Join(shared, "job-j1")

	rng := rand.New(rand.NewPCG(7, 1))
	live := append([]*proc(nil), v.hosts...)
	var faults []string
	seq := 0
	for _, kind := range []string{"kill", "join", "migrate", "kill", "migrate"} {
		seq = waitCheckpoint(t, jobDir, seq+1, run)
		if seq < 0 {
			break // the job finished first
		}
		switch kind {
		case "kill":
			i := rng.IntN(len(live))
			p := live[i]
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			p.wait()
			live = append(live[:i], live[i+1:]...)
			faults = append(faults, "SIGKILL "+p.name)
		case "join":
			name := fmt.Sprintf("j%d", len(faults))
			h := start(t, "host "+name, nil,
				append(append([]string{"daemon", "--join", v.addr, "--listen", "127.0.0.1:0",
					"--heartbeat", "100ms", "--dead-after", "2s"}, v.creds.host(name)...), extra...)...)
			h.waitFor(listening, true)
			live = append(live, h)
			faults = append(faults, "joined "+h.name)
		case "migrate":
			tid, to := pickMove(t, v, rng)
			if tid == "" {
				continue
			}
			code, out, errOut := dpvm(t, v.env, "migrate", tid, "--to", to)
			faults = append(faults, fmt.Sprintf("migrate %s to %s: status %d %s%s", tid, to, code,
				strings.TrimSpace(out), strings.TrimSpace(errOut)))
		}
	}
	if code := run.wait(); code != 0 {
		t.Fatalf("pi under chaos: status %d\n%s\n%s\nfaults: %q", code, run.out.String(), run.err.String(), faults)
	}
	m := regexp.MustCompile(`pi: \d+ samples on 6 workers: (\d+) hits`).FindStringSubmatch(run.out.String())
	ref := <-want
	if m == nil || m[1] != fmt.Sprint(ref) {
		t.Fatalf("pi under chaos printed %q, want %d hits\nfaults: %q", run.out.String(), ref, faults)
	}
	rollbacks := strings.Count(v.master.err.String(), "job rolled back")
	kills := 0
	for _, f := range faults {
		if strings.HasPrefix(f, "SIGKILL") {
			kills++
		}
	}
	if kills > 0 && rollbacks == 0 {
		t.Fatalf("%d hosts killed and no rollback\n%s", kills, v.master.err.String())
	}
	t.Logf("pi finished with %s hits, as uninterrupted, through %d faults and %d rollbacks:\n  %s",
		m[1], len(faults), rollbacks, strings.Join(faults, "\n  "))
}

// waitCheckpoint waits until the job has a complete checkpoint of sequence
// number at least seq and returns the newest one's, or -1 if the job ended.
func waitCheckpoint(t *testing.T, jobDir string, seq int, run *proc) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ms, _ := filepath.Glob(filepath.Join(jobDir, "ckpt-*", "MANIFEST"))
		newest := 0
		for _, m := range ms {
			var n int
			if _, err := fmt.Sscanf(filepath.Base(filepath.Dir(m)), "ckpt-%d", &n); err == nil {
				newest = max(newest, n)
			}
		}
		if newest >= seq {
			return newest
		}
		select {
		case <-run.done:
			return -1
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint %d after 60 s\n%s", seq, run.err.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pickMove chooses a task of job 1 and another host for it.
func pickMove(t *testing.T, v *vm, rng *rand.Rand) (tid, to string) {
	t.Helper()
	code, out, _ := dpvm(t, v.env, "ps", "--json")
	var ts []struct {
		TID  string `json:"tid"`
		Host string `json:"host"`
		Job  uint64 `json:"job"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &ts) != nil {
		return "", ""
	}
	code, out, _ = dpvm(t, v.env, "conf", "--json")
	var hs []struct {
		Name string `json:"name"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &hs) != nil {
		return "", ""
	}
	var cand []int
	for i, ti := range ts {
		if ti.Job == 1 {
			cand = append(cand, i)
		}
	}
	if len(cand) == 0 || len(hs) < 2 {
		return "", ""
	}
	ti := ts[cand[rng.IntN(len(cand))]]
	for {
		if h := hs[rng.IntN(len(hs))].Name; h != ti.Host {
			return ti.TID, h
		}
	}
}

// piHits counts the hits of pi's sample stream, on all cores.
func piHits(samples int64) int64 {
	const parts = 8
	var mu sync.Mutex
	var wg sync.WaitGroup
	var total int64
	for p := range int64(parts) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n int64
			for i := p * samples / parts; i < (p+1)*samples/parts; i++ {
				if examples.PiSample(i) {
					n++
				}
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return total
}
