package integration

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDynamicSEDOfProcesses is the Dynamic-SED experiment on a virtual
// machine of four daemon processes whose hosts emulate their load (seed
// 001 Table 3, seed 000 principle 1): the pi program runs with a worker on
// every host; once its worker runs on h2, an interactive user arrives
// there and brings load 2 (`dpvm load inject`), so that worker runs 3×
// slower. Without the scheduler the job waits for it; with Dynamic-SED
// (δT 200 ms) the worker migrates away and the job finishes. The result is
// the same either way. The test prints both runs' times.
func TestDynamicSEDOfProcesses(t *testing.T) {
	type run struct {
		seconds    float64
		migrations int
		hits       string
	}
	var runs [2]run
	for i, period := range []string{"0", "200ms"} {
		v := startVM(t, 3, "--emulate", "--load-source", "static", "--sched-period", period)
		began := time.Now()
		job := start(t, "pi", v.env, "run", "--master", v.addr, "pi", "-workers", "4", "-samples", "600000000")
		// Wait until a worker runs on h2 (the job's tasks exist once the
		// root has spawned them), then the user arrives.
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, out, errOut := dpvm(t, v.env, "ps", "--json")
			var ts []struct{ Host, Type string }
			if code != 0 || json.Unmarshal([]byte(out), &ts) != nil {
				t.Fatalf("ps: %d %s %s", code, out, errOut)
			}
			on := false
			for _, ti := range ts {
				on = on || ti.Host == "h2" && strings.Contains(ti.Type, "pi")
			}
			if on {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no pi worker on h2 after 30 s: %s", out)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if code, _, errOut := dpvm(t, v.env, "load", "inject", "h2", "--users", "1", "--load", "2"); code != 0 {
			t.Fatalf("load inject: %d %s", code, errOut)
		}
		if code := job.wait(); code != 0 {
			t.Fatalf("pi (sched period %s): status %d\n%s\n%s", period, code, job.out.String(), job.err.String())
		}
		runs[i].seconds = time.Since(began).Seconds()
		m := regexp.MustCompile(`pi: 600000000 samples on 4 workers: (\d+) hits`).FindStringSubmatch(job.out.String())
		if m == nil {
			t.Fatalf("pi printed no result: %q", job.out.String())
		}
		runs[i].hits = m[1]
		code, out, errOut := dpvm(t, v.env, "sched", "status", "--json")
		var st struct {
			Enabled    bool
			Migrations int
		}
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
			t.Fatalf("sched status: %d %s %s", code, out, errOut)
		}
		runs[i].migrations = st.Migrations
		if st.Enabled != (period != "0") {
			t.Fatalf("sched status with period %s: %s", period, out)
		}
	}
	if runs[0].migrations != 0 || runs[1].migrations < 1 {
		t.Fatalf("migrations: %d without Dynamic-SED, %d with (want 0 and at least 1)", runs[0].migrations, runs[1].migrations)
	}
	if runs[0].hits != runs[1].hits {
		t.Fatalf("pi's result changed: %s hits without Dynamic-SED, %s with", runs[0].hits, runs[1].hits)
	}
	t.Logf("pi on 4 daemon processes, a user arriving on h2: %.2f s without Dynamic-SED, %.2f s with it (%d migration(s)); %s hits both times",
		runs[0].seconds, runs[1].seconds, runs[1].migrations, runs[0].hits)
}
