package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon"
)

// newJobConsole is a console whose output buffers take the writes of the
// jobs it starts.
func newJobConsole(t *testing.T, vm *daemon.LocalVM) (*console, *syncBuffer, *syncBuffer) {
	t.Helper()
	out, errOut := &syncBuffer{}, &syncBuffer{}
	con := &console{addr: vm.Master().Addr(), key: vm.Key, timeout: 10 * time.Second, out: out, errOut: errOut}
	if err := con.connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(con.close)
	return con, out, errOut
}

// TestConsoleHasEveryCommand: every command of the command line that acts
// on a running virtual machine is a console command of the same name.
func TestConsoleHasEveryCommand(t *testing.T) {
	not := map[string]string{
		"dpvm console": "is the console",
		"dpvm daemon":  "starts a daemon (its --master is a flag of another meaning)",
		"dpvm npb ep":  "a benchmark's report; the console runs the same kernels with 'run npb-ep'",
		"dpvm npb cg":  "as npb ep",
		"dpvm npb mg":  "as npb ep",
		"dpvm npb ft":  "as npb ep",
		"dpvm npb is":  "as npb ep",
	}
	for path, c := range commandPaths(t) {
		if findFlag(c.Flags, "master") == nil || not[path] != "" {
			continue
		}
		if _, n, err := lookupConsoleCommand(strings.Fields(path)[1:]); err != nil || n != len(strings.Fields(path))-1 {
			t.Errorf("the console has no %s: %v", strings.TrimPrefix(path, "dpvm "), err)
		}
	}
	for _, e := range consoleCommands {
		if _, ok := commandPaths(t)["dpvm "+e.path]; !ok {
			t.Errorf("the console's %s is no command of the command line", e.path)
		}
	}
}

// TestConsoleRunShowsOutput: a job started with run prints its output in
// the console while the console goes on.
func TestConsoleRunShowsOutput(t *testing.T) {
	vm, _, master := startVM(t, 2)
	con, out, errOut := newJobConsole(t, vm)
	if leave := con.exec(context.Background(), "run hello -n 2"); leave || con.failed {
		t.Fatalf("run: leave %v, stderr %q", leave, errOut.String())
	}
	if leave := con.exec(context.Background(), "conf"); leave || con.failed {
		t.Fatalf("conf while the job runs: stderr %q", errOut.String())
	}
	con.jobs.wait()
	if !strings.Contains(out.String(), "2 children said hello") {
		t.Errorf("the job's output is not in the console:\n%s", out.String())
	}
	if strings.Contains(master.String(), "children said hello") {
		t.Errorf("the job's output went to the master too:\n%s", master.String())
	}
	e := errOut.String()
	if !strings.Contains(e, "[1] run hello: started") || !strings.Contains(e, "[1] run hello: done (job j") || con.jobs.failed.Load() {
		t.Errorf("the job's start and end are not reported:\n%s", e)
	}

	// A failing job is reported as such, and fails a script.
	con.exec(context.Background(), "run hello -n 0")
	if !con.failed || !strings.Contains(errOut.String(), "run hello: -n must be at least 1") {
		t.Errorf("run hello -n 0: %q", errOut.String())
	}
	con.failed = false
	con.exec(context.Background(), "run nope")
	if !con.failed || !strings.Contains(errOut.String(), `run: unknown program "nope"`) {
		t.Errorf("run nope: %q", errOut.String())
	}
	// The program's help.
	con.failed = false
	con.exec(context.Background(), "run hello --help")
	if con.failed || !strings.Contains(out.String(), "Usage: dpvm run [run flags] hello") {
		t.Errorf("run hello --help: %q %q", out.String(), errOut.String())
	}
}

// TestConsoleScriptWaitsForJobs: a console reading a script shows its
// jobs' output to their end before it leaves.
func TestConsoleScriptWaitsForJobs(t *testing.T) {
	vm, keyFile, _ := startVM(t, 2)
	code, out, errOut := dpvmStdin(t, "run ring -n 3 -laps 2\nps\n", "console", "--master", vm.Master().Addr(), "--cluster-key", keyFile)
	if code != 0 || !strings.Contains(out, "ring:") || !strings.Contains(errOut, "run ring: done") {
		t.Fatalf("status %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

func TestConsoleQuitWithJobs(t *testing.T) {
	vm, _, _ := startVM(t, 1)
	con, _, errOut := newJobConsole(t, vm)
	con.interactive = true
	_, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := con.jobs.add("run forever", cancel)
	if con.exec(context.Background(), "quit") {
		t.Fatal("the first quit with a job running left")
	}
	if !strings.Contains(errOut.String(), "[1] run forever") {
		t.Fatalf("quit did not name the running job: %q", errOut.String())
	}
	if !con.exec(context.Background(), "quit") {
		t.Fatal("the second quit did not leave")
	}
	con.jobs.done(n)
}

func TestConsoleTwoWordCommands(t *testing.T) {
	vm, _, _ := startVM(t, 2)
	tc := newTestConsole(t, vm)
	var st daemon.SchedStatus
	if err := json.Unmarshal([]byte(tc.ok("sched status --json")), &st); err != nil || st.Enabled {
		t.Fatalf("sched status --json: %+v %v", st, err)
	}
	var inj map[string]any
	if err := json.Unmarshal([]byte(tc.ok("load inject h2 --users 3 --json")), &inj); err != nil || inj["host"] != "h2" {
		t.Fatalf("load inject --json: %v %v", inj, err)
	}
	tc.waitFor("h2 to report 3 users", func() bool {
		for _, h := range tc.hosts() {
			if h.Name == "h2" && h.Users == 3 {
				return true
			}
		}
		return false
	})
	tc.ok("load inject h2 --clear")
	tc.bad("sched", "sched: name a command: status")
	tc.bad("sched bogus", `sched: unknown command "bogus"`)
	tc.bad("load inject", "load inject: name one host")
	tc.bad("sched status --bogus", "sched status: flag provided but not defined: -bogus (see 'help sched status')")
	if out := tc.ok("help sched"); !strings.Contains(out, "sched status [--json]") {
		t.Errorf("help sched: %q", out)
	}
	if out := tc.ok("help sched status"); !strings.HasPrefix(out, "sched status: show the running master's") {
		t.Errorf("help sched status: %q", out)
	}
	if out := tc.ok("help"); !strings.Contains(out, "load inject HOST") || !strings.Contains(out, "restart DIR") || !strings.Contains(out, "run PROGRAM") {
		t.Errorf("help:\n%s", out)
	}
}

func TestConsoleCompletion(t *testing.T) {
	vm, _, _ := startVM(t, 2)
	tc := newTestConsole(t, vm)
	pong := spawned(t, tc.ok("spawn examples.pong --host h2"), 1)[0]
	cp := newCompleter(tc.con, &tc.out)
	cases := []struct {
		line     string
		want     string   // the line after Tab
		listed   []string // the candidates listed, when several
		notFound bool
	}{
		{"mig", "migrate ", nil, false},
		{"sched st", "sched status ", nil, false},
		{"s", "s", []string{"spawn", "sched"}, false},
		{"help lo", "help load ", nil, false},
		{"load ", "load inject ", nil, false},
		{"migrate --v", "migrate --via ", nil, false},
		{"migrate --via d", "migrate --via direct ", nil, false},
		{"kill t", "kill " + pong.String() + " ", nil, false},
		{"migrate " + pong.String() + " --to h", "migrate " + pong.String() + " --to h", []string{"h1", "h2"}, false},
		{"delete h2", "delete h2 ", nil, false},
		{"load inject h1", "load inject h1 ", nil, false},
		{"run hel", "run hello ", nil, false},
		{"spawn examples.po", "spawn examples.pong ", nil, false},
		{"ps --a", "ps --all ", nil, false},
		{"frobnicate ", "frobnicate ", nil, true},
	}
	for _, c := range cases {
		got, pos, list := cp.complete(c.line, len(c.line))
		if got != c.want || pos != len(c.want) {
			t.Errorf("%q: %q at %d, want %q", c.line, got, pos, c.want)
		}
		for _, l := range c.listed {
			if !strings.Contains(strings.Join(list, " "), l) {
				t.Errorf("%q: candidates %q lack %q", c.line, list, l)
			}
		}
		if c.notFound && len(list) != 0 {
			t.Errorf("%q: candidates %q", c.line, list)
		}
	}
	// Completing in the middle of a line keeps what follows the cursor.
	if got, pos, _ := cp.complete("mig --to h2", 3); got != "migrate  --to h2" || pos != len("migrate ") {
		t.Errorf("mid-line: %q at %d", got, pos)
	}
}

// TestConsoleKeys types Home, End and Tab, in the forms terminals send
// them, into the console's line editor.
func TestConsoleKeys(t *testing.T) {
	vm, _, _ := startVM(t, 2)
	var screen syncBuffer
	keys := &keystrokes{bursts: []string{
		"onf", "\x1b[1~", "c", "\x1bOF", " --json\r", // Home (ESC [ 1 ~), End (ESC O F)
		"ps -", "\x1b", "[7~", "\x1b[4~", "a\r", // Home split over two reads, End: "ps -a"
		"sched st\t\r", // Tab: "sched status"
		"\x04",
	}}
	tl := newTermLines(keys, &screen, -1, newHistory(10))
	tc := newTestConsole(t, vm)
	tc.con.out, tc.con.errOut, tc.con.interactive = tl, tl, true
	tl.setCompleter(newCompleter(tc.con, tl))
	tc.con.loop(context.Background(), tl, nil)
	s := screen.String()
	for _, want := range []string{`"master": true`, "TID  ", "the scheduler is off"} {
		if !strings.Contains(s, want) {
			t.Errorf("the screen does not show %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "unknown command") || strings.Contains(s, "flag provided") {
		t.Errorf("a line was mangled:\n%s", s)
	}
}

func TestRewriteKeys(t *testing.T) {
	cases := []struct {
		in           string
		final        bool
		out, pending string
	}{
		{"abc", false, "abc", ""},
		{"\x1bOHx\x1bOF", false, "\x1b[Hx\x1b[F", ""},
		{"\x1b[1~\x1b[4~\x1b[7~\x1b[8~", false, "\x1b[H\x1b[F\x1b[H\x1b[F", ""},
		{"a\x1b[1", false, "a", "\x1b[1"},
		{"a\x1b", false, "a", "\x1b"},
		{"a\x1b[1", true, "a\x1b[1", ""},
		{"\x1b[A\x1b[1;3C\x1b[3~", false, "\x1b[A\x1b[1;3C\x1b[3~", ""},
	}
	for _, c := range cases {
		out, pending := rewriteKeys([]byte(c.in), c.final)
		if string(out) != c.out || string(pending) != c.pending {
			t.Errorf("%q (final %v): %q, pending %q; want %q, %q", c.in, c.final, out, pending, c.out, c.pending)
		}
	}
}
