package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/dpvm/dpvm/daemon/sim/simtest" // registers simtest-forgetful
)

// simVMOut is the part of `sim vm --json` the tests read.
type simVMOut struct {
	Program   string   `json:"program"`
	Args      []string `json:"args"`
	Hosts     int      `json:"hosts"`
	Faults    string   `json:"faults"`
	FirstSeed uint64   `json:"first_seed"`
	Failed    int      `json:"failed"`
	Reference struct {
		OK     bool   `json:"ok"`
		Result string `json:"result"`
	} `json:"reference"`
	Seeds []struct {
		Seed      uint64   `json:"seed"`
		OK        bool     `json:"ok"`
		Result    string   `json:"result"`
		TraceHash string   `json:"trace_hash"`
		Error     string   `json:"error"`
		Taken     []string `json:"taken"`
		Replay    string   `json:"replay"`
		// --shrink
		ShrunkFaults string `json:"shrunk_faults"`
		ShrunkReplay string `json:"shrunk_replay"`
	} `json:"seeds"`
}

func simVM(t *testing.T, args ...string) (int, simVMOut, string) {
	t.Helper()
	code, out, errOut := dpvm(t, append([]string{"sim", "vm", "--json"}, args...)...)
	var r simVMOut
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: status %d, %v\nstdout:\n%s\nstderr:\n%s", args, code, err, out, errOut)
	}
	return code, r, errOut
}

// TestSimVMJSON: `dpvm sim vm --json` prints one object whose seeds each
// have seed, ok, result and trace_hash; the same seeds give the same
// hashes again, and every seed the fault-free result.
func TestSimVMJSON(t *testing.T) {
	args := []string{"--seeds", "4", "--first-seed", "7", "--hosts", "3", "--faults", "loss,dup,move", "ring", "-n", "4", "-laps", "3"}
	code, r, errOut := simVM(t, args...)
	if code != 0 || r.Program != "ring" || strings.Join(r.Args, " ") != "-n 4 -laps 3" || r.Hosts != 3 ||
		r.Faults != "loss,dup,move" || r.FirstSeed != 7 || r.Failed != 0 || !r.Reference.OK || len(r.Seeds) != 4 {
		t.Fatalf("status %d: %+v\nstderr:\n%s", code, r, errOut)
	}
	hex := regexp.MustCompile(`^[0-9a-f]{64}$`)
	for i, s := range r.Seeds {
		if s.Seed != 7+uint64(i) || !s.OK || s.Result != r.Reference.Result || !hex.MatchString(s.TraceHash) || s.Replay != "" {
			t.Errorf("seed %d: %+v (fault-free %s)", i, s, r.Reference.Result)
		}
	}
	_, again, _ := simVM(t, args...)
	for i, s := range again.Seeds {
		if s.TraceHash != r.Seeds[i].TraceHash {
			t.Errorf("seed %d: trace %s, then %s", s.Seed, r.Seeds[i].TraceHash, s.TraceHash)
		}
	}
	// The table: a line per seed and the count.
	code, out, _ := dpvm(t, append([]string{"sim", "vm"}, args...)...)
	if code != 0 || strings.Count(out, " ok ") != 4 || !strings.HasSuffix(out, "4 seeds, 0 failed\n") {
		t.Errorf("table: status %d\n%s", code, out)
	}
}

// TestSimVMCatchesABrokenProgram: a program that forgets a field across a
// move fails some seed; sim vm exits 1, prints the seed with the moves it
// took and the command that replays it, and that command fails the same
// way with the same trace.
func TestSimVMCatchesABrokenProgram(t *testing.T) {
	code, r, _ := simVM(t, "--seeds", "12", "--faults", "move", simtest.Forgetful)
	if code != exitFailed || r.Failed == 0 {
		t.Fatalf("status %d, %d failed: %+v", code, r.Failed, r)
	}
	for _, s := range r.Seeds {
		if s.OK {
			continue
		}
		want := "dpvm sim vm --first-seed " + jsonNum(s.Seed) + " --seeds 1 --hosts 4 --faults move " + simtest.Forgetful
		if s.Replay != want || !strings.Contains(s.Error, "differs from the fault-free run") || len(s.Taken) == 0 {
			t.Fatalf("seed %d: %+v, want replay %q", s.Seed, s, want)
		}
		code2, again, _ := simVM(t, strings.Fields(strings.TrimPrefix(want, "dpvm sim vm "))...)
		if code2 != exitFailed || len(again.Seeds) != 1 || again.Seeds[0].TraceHash != s.TraceHash || again.Seeds[0].OK {
			t.Errorf("replay: status %d, %+v; first trace %s", code2, again.Seeds, s.TraceHash)
		}
		code3, out, _ := dpvm(t, strings.Fields(want)[1:]...)
		if code3 != exitFailed || !strings.Contains(out, "replay: "+want) || !strings.Contains(out, "faults and moves taken:") {
			t.Errorf("table: status %d\n%s", code3, out)
		}
		return
	}
}

func jsonNum(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestSimVMShrink: --shrink names fewer kinds of fault under which a
// failed seed still fails, moves among them, with a command that fails
// the same way again.
func TestSimVMShrink(t *testing.T) {
	code, r, _ := simVM(t, "--seeds", "12", "--shrink", simtest.Forgetful)
	if code != exitFailed || r.Failed == 0 {
		t.Fatalf("status %d: %+v", code, r)
	}
	for _, s := range r.Seeds {
		if s.OK {
			continue
		}
		if !strings.Contains(s.ShrunkFaults, "move") || s.ShrunkFaults == "default" ||
			s.ShrunkReplay != "dpvm sim vm --first-seed "+jsonNum(s.Seed)+" --seeds 1 --hosts 4 --faults "+s.ShrunkFaults+" "+simtest.Forgetful {
			t.Fatalf("seed %d: shrunk to %q: %q", s.Seed, s.ShrunkFaults, s.ShrunkReplay)
		}
		code2, again, _ := simVM(t, strings.Fields(strings.TrimPrefix(s.ShrunkReplay, "dpvm sim vm "))...)
		if code2 != exitFailed || again.Seeds[0].OK {
			t.Errorf("%s: status %d, %+v", s.ShrunkReplay, code2, again.Seeds)
		}
		return
	}
}

// TestSimVMUsage: bad flags and unknown programs are usage errors.
func TestSimVMUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string // what the error names
	}{
		{[]string{"sim", "vm"}, "no program named"},
		{[]string{"sim", "vm", "no-such-program"}, `unknown program "no-such-program"; known programs: `},
		{[]string{"sim", "vm", "--faults", "meteor", "ring"}, "--faults"},
		{[]string{"sim", "vm", "--seeds", "0", "ring"}, "--seeds 0"},
		{[]string{"sim", "vm", "--hosts", "0", "ring"}, "--hosts 0"},
		{[]string{"sim", "vm", "ring", "-laps", "zero"}, "see 'dpvm run ring --help'"},
		{[]string{"sim", "vm", "--trace", "x", "--seeds", "2", "ring"}, "--trace needs --seeds 1"},
	} {
		if code, out, errOut := dpvm(t, c.args...); code != exitUsage || !strings.Contains(errOut, "sim vm") || !strings.Contains(errOut, c.says) {
			t.Errorf("%v: status %d, want %d saying %q\nstdout:\n%s\nstderr:\n%s", c.args, code, exitUsage, c.says, out, errOut)
		}
	}
}

// TestSimVMRoutes: `sim vm` runs the seeds with routes on demand by
// default, the same as `--routes demand`, and `--routes broadcast` with
// routes broadcast (every seed the fault-free result, and other traces
// than on demand); a protocol that is neither is a usage error.
func TestSimVMRoutes(t *testing.T) {
	args := []string{"--seeds", "3", "--hosts", "4", "--faults", "all", "ring", "-n", "5", "-laps", "5"}
	code, bc, errOut := simVM(t, append([]string{"--routes", "broadcast"}, args...)...)
	if code != 0 || bc.Failed != 0 {
		t.Fatalf("broadcast: status %d: %+v\nstderr:\n%s", code, bc, errOut)
	}
	code, od, errOut := simVM(t, append([]string{"--routes", "demand"}, args...)...)
	if code != 0 || od.Failed != 0 || len(od.Seeds) != 3 {
		t.Fatalf("demand: status %d: %+v\nstderr:\n%s", code, od, errOut)
	}
	code, def, errOut := simVM(t, args...)
	if code != 0 || def.Failed != 0 || len(def.Seeds) != 3 {
		t.Fatalf("default: status %d: %+v\nstderr:\n%s", code, def, errOut)
	}
	differ := false
	for i, s := range od.Seeds {
		if def.Seeds[i].TraceHash != s.TraceHash {
			t.Errorf("seed %d: the default's trace %s, --routes demand's %s", s.Seed, def.Seeds[i].TraceHash, s.TraceHash)
		}
		if !s.OK || s.Result != od.Reference.Result {
			t.Errorf("demand seed %d: %+v", s.Seed, s)
		}
		differ = differ || s.TraceHash != bc.Seeds[i].TraceHash
	}
	if !differ {
		t.Error("--routes demand gave the broadcast's traces")
	}
	if code, _, errOut := dpvm(t, "sim", "vm", "--routes", "rumour", "ring"); code != exitUsage || !strings.Contains(errOut, "--routes") {
		t.Errorf("--routes rumour: status %d, stderr %q; want a usage error", code, errOut)
	}
}
