package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	vmsim "github.com/dpvm/dpvm/daemon/sim"
)

// TestSimScaleJSON: `dpvm sim scale --json` prints one object with the
// four phases, the master's messages counted as the protocols send them
// and their bytes as the daemon encodes them; the same flags give the
// same counts and trace again. The table prints every phase.
func TestSimScaleJSON(t *testing.T) {
	args := []string{"sim", "scale", "--json", "--hosts", "30", "--tasks", "200", "--moves", "5", "--idle", "2s", "--seed", "3", "--routes", "broadcast"}
	run := func() vmsim.ScaleResult {
		code, out, errOut := dpvm(t, args...)
		var r vmsim.ScaleResult
		if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil {
			t.Fatalf("status %d, %v\nstdout:\n%s\nstderr:\n%s", code, err, out, errOut)
		}
		return r
	}
	r := run()
	if r.Hosts != 30 || r.Tasks != 200 || r.Moves != 5 || r.IdleMS != 2000 || r.Seed != 3 || len(r.Phases) != 4 ||
		!regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(r.TraceHash) || r.Events == 0 {
		t.Fatalf("%+v", r)
	}
	join, spawn, idle, mv := r.Phases[0], r.Phases[1], r.Phases[2], r.Phases[3]
	if join.Name != "join" || join.MsgsIn != 30 || join.MsgsOut != 30+30*29/2 || join.BytesInPer < 50 {
		t.Errorf("join %+v", join)
	}
	if spawn.Name != "spawn" || spawn.Per != "spawn" || spawn.MsgsInPer != 2 || spawn.MsgsOutPer != 2 || spawn.BytesInPer < 50 {
		t.Errorf("spawn %+v", spawn)
	}
	if idle.Name != "idle" || idle.Per != "second" || idle.Count != 2 || idle.MsgsIn != 2*30 || idle.BytesIn != 2*30*53 {
		t.Errorf("idle %+v: want 2 pings of 53 bytes per host", idle)
	}
	if mv.Name != "move" || mv.MsgsOutPer != 5+30 || mv.MsgsInPer != 5 || mv.BytesOut <= 5*30*20 {
		t.Errorf("move %+v", mv)
	}
	if again := run(); again.TraceHash != r.TraceHash || again.Phases[3].BytesOut != mv.BytesOut {
		t.Errorf("same flags: trace %s, then %s", r.TraceHash, again.TraceHash)
	}
	code, out, _ := dpvm(t, "sim", "scale", "--hosts", "10", "--tasks", "20", "--moves", "2", "--idle", "1s")
	for _, want := range []string{"phase", "join", "spawn", "idle", "move", "event.route", "simulator:"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("table: status %d, no %q\n%s", code, want, out)
		}
	}
}

// TestSimScaleUsage: flags out of bounds and arguments are usage errors.
func TestSimScaleUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--hosts", "0"}, {"--tasks", "-1"}, {"--hosts", "1", "--moves", "1"}, {"--idle", "-1s"}, {"extra"},
	} {
		if code, _, errOut := dpvm(t, append([]string{"sim", "scale"}, args...)...); code != exitUsage || !strings.Contains(errOut, "sim scale") {
			t.Errorf("%v: status %d (want %d)\n%s", args, code, exitUsage, errOut)
		}
	}
}
