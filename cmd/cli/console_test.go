package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/task"
)

// syncBuffer is a bytes.Buffer safe for the daemons' concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startVM starts an embedded virtual machine of n daemons on loopback and
// writes its admin credential to a file, returned with it.
func startVM(t *testing.T, n int) (*daemon.LocalVM, string, *syncBuffer) {
	t.Helper()
	out := &syncBuffer{}
	vm, err := daemon.StartLocalVM(context.Background(), n, daemon.Config{Output: out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Halt(5 * time.Second) })
	keyFile := filepath.Join(t.TempDir(), "vm.key")
	if err := pki.WriteCredential(keyFile, vm.Cluster.Admin); err != nil {
		t.Fatal(err)
	}
	return vm, keyFile, out
}

// testConsole drives a console connected to a virtual machine line by line.
type testConsole struct {
	t           *testing.T
	con         *console
	out, errOut bytes.Buffer
}

func newTestConsole(t *testing.T, vm *daemon.LocalVM) *testConsole {
	t.Helper()
	tc := &testConsole{t: t}
	tc.con = &console{addr: vm.Master().Addr(), key: vm.Cluster.Admin, timeout: 10 * time.Second, out: &tc.out, errOut: &tc.errOut}
	if err := tc.con.connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.con.close)
	return tc
}

// do runs one line and returns what it printed and whether it leaves.
func (tc *testConsole) do(line string) (out, errOut string, leave bool) {
	tc.out.Reset()
	tc.errOut.Reset()
	leave = tc.con.exec(context.Background(), line)
	return tc.out.String(), tc.errOut.String(), leave
}

// ok runs a line that must succeed without leaving and returns its output.
func (tc *testConsole) ok(line string) string {
	tc.t.Helper()
	out, errOut, leave := tc.do(line)
	if errOut != "" || leave {
		tc.t.Fatalf("%s: leave %v, stderr %q (stdout %q)", line, leave, errOut, out)
	}
	return out
}

// bad runs a line that must fail with one line of error containing want,
// print nothing else and not leave.
func (tc *testConsole) bad(line, want string) {
	tc.t.Helper()
	out, errOut, leave := tc.do(line)
	if leave || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, want) {
		tc.t.Fatalf("%s: leave %v, stdout %q, stderr %q; want one line containing %q", line, leave, out, errOut, want)
	}
}

func (tc *testConsole) hosts() []daemon.HostInfo {
	tc.t.Helper()
	var hs []daemon.HostInfo
	if err := json.Unmarshal([]byte(tc.ok("conf --json")), &hs); err != nil {
		tc.t.Fatal(err)
	}
	return hs
}

func (tc *testConsole) tasks() map[task.TID]daemon.TaskInfo {
	tc.t.Helper()
	var ts []daemon.TaskInfo
	if err := json.Unmarshal([]byte(tc.ok("ps -a --json")), &ts); err != nil {
		tc.t.Fatal(err)
	}
	m := map[task.TID]daemon.TaskInfo{}
	for _, ti := range ts {
		m[ti.TID] = ti
	}
	return m
}

// waitFor polls the console until cond holds, failing after a deadline.
func (tc *testConsole) waitFor(what string, cond func() bool) {
	tc.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			tc.t.Fatalf("gave up waiting for %s", what)
		}
		<-tick.C
	}
}

// spawned parses the TIDs a spawn printed, one a line.
func spawned(t *testing.T, out string, n int) []task.TID {
	t.Helper()
	var tids []task.TID
	for _, l := range strings.Fields(out) {
		tid, err := task.ParseTID(l)
		if err != nil {
			t.Fatalf("spawn printed %q: %v", out, err)
		}
		tids = append(tids, tid)
	}
	if len(tids) != n {
		t.Fatalf("spawn printed %d TIDs, want %d: %q", len(tids), n, out)
	}
	return tids
}

func waitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	timer := time.NewTimer(20 * time.Second)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		t.Fatalf("%s did not happen", what)
	}
}

func TestConsoleSession(t *testing.T) {
	vm, _, _ := startVM(t, 3)
	tc := newTestConsole(t, vm)

	// conf lists the three hosts, the master marked, and how failures
	// are detected.
	conf := tc.ok("conf")
	lines := strings.Split(strings.TrimSpace(conf), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[1], "h1 (master)") ||
		!strings.HasPrefix(lines[4], "failure detection: the hosts probe each other every ") {
		t.Fatalf("conf:\n%s", conf)
	}
	if hs := tc.hosts(); len(hs) != 3 || !hs[0].Master || hs[2].Name != "h3" {
		t.Fatalf("conf --json: %+v", hs)
	}

	// A program: its root task spawns three children; all exit.
	root := spawned(t, tc.ok("spawn hello -- -n 3"), 1)[0]
	var children []daemon.TaskInfo
	tc.waitFor("hello and its children to exit", func() bool {
		ts := tc.tasks()
		children = children[:0]
		for _, ti := range ts {
			if ti.Parent == root {
				children = append(children, ti)
			}
		}
		done := ts[root].State == daemon.Exited && len(children) == 3
		for _, c := range children {
			done = done && c.State == daemon.Exited
		}
		return done
	})
	if ts := tc.tasks(); ts[root].Status != 0 || ts[root].Type != "examples.hello" {
		t.Fatalf("hello root: %+v", ts[root])
	}
	ps := tc.ok("ps -a")
	for _, c := range children {
		if !strings.Contains(ps, c.TID.String()+"  examples.hello.child  "+c.Host+" ") {
			t.Errorf("ps -a does not show %v on %s:\n%s", c.TID, c.Host, ps)
		}
	}

	// A task type on a chosen host, flags after the type: it runs until
	// killed. The two pongs are one job, pongs[0] its root.
	pongs := spawned(t, tc.ok("spawn examples.pong -n 2 --host h2"), 2)
	running := tc.ok("ps")
	for _, p := range pongs {
		if !strings.Contains(running, p.String()+"  examples.pong  h2    running") {
			t.Fatalf("ps does not show %v running on h2:\n%s", p, running)
		}
	}
	// A task type with its state as quoted JSON, and --json output.
	var sp struct{ TIDs []task.TID }
	if err := json.Unmarshal([]byte(tc.ok(`spawn --json examples.pi.worker '{"Lo":0,"Hi":100}' --host h3`)), &sp); err != nil || len(sp.TIDs) != 1 {
		t.Fatalf("spawn --json: %v %v", sp, err)
	}
	tc.waitFor("the pi worker to be listed on h3", func() bool {
		ti, ok := tc.tasks()[sp.TIDs[0]]
		return ok && ti.Type == "examples.pi.worker" && ti.Host == "h3"
	})
	tc.bad(`spawn examples.pi.worker '{"Nope":1}'`, `unknown field "Nope"`)
	tc.bad("spawn nosuchtype", "spawn: ")

	// kill: the pong that is not its job's root, so the job runs on.
	tc.ok("kill " + pongs[1].String())
	tc.waitFor("the killed pong to be listed as killed", func() bool {
		ts := tc.tasks()
		return ts[pongs[1]].State == daemon.Killed && ts[pongs[0]].State == daemon.Running && ts[pongs[0]].Job == ts[pongs[1]].Job
	})
	tc.bad("kill t9:9 nonsense", "kill: ")

	// Bad lines give one line each and the console goes on.
	tc.bad("frobnicate now", `unknown command "frobnicate"`)
	tc.bad("ps --bogus", "ps: flag provided but not defined: -bogus (see 'help ps')")
	tc.bad(`spawn "hello`, "unterminated quote")
	tc.bad("kill", "kill: no TID given")
	tc.bad("help nosuch", `help: unknown command "nosuch"`)
	tc.bad("migrate "+pongs[0].String(), "migrate: no destination: give --to HOST")
	tc.bad("migrate "+pongs[0].String()+" --to h1 --via carrier-pigeon", `migration mode "carrier-pigeon": want direct or indirect`)
	// A pong waits in a Recv with task.Safe, a safe point: it moves.
	if out := tc.ok("migrate " + pongs[0].String() + " --to h1"); !strings.Contains(out, "migrated "+pongs[0].String()+" from h2 to h1 direct") {
		t.Fatalf("migrate: %q", out)
	}
	tc.waitFor("ps shows the moved pong on h1", func() bool {
		return tc.tasks()[pongs[0]].Host == "h1"
	})
	if out, errOut, leave := tc.do("  # only a comment"); out != "" || errOut != "" || leave {
		t.Fatalf("comment: %q %q %v", out, errOut, leave)
	}

	// help lists every command; help COMMAND describes one.
	help := tc.ok("help")
	for _, c := range []string{"conf", "ps", "spawn", "kill", "delete", "migrate", "halt", "help", "quit"} {
		if !strings.Contains(help, "\n  "+c) {
			t.Errorf("help does not list %s:\n%s", c, help)
		}
	}
	if h := tc.ok("help spawn"); !strings.Contains(h, "usage: spawn [flags] TYPE") || !strings.Contains(h, "\n  spawn hello -- -n 8\n") {
		t.Errorf("help spawn:\n%s", h)
	}
	if h := tc.ok("ps --help"); !strings.Contains(h, "usage: ps [flags]") || !strings.Contains(h, "--all, -a") {
		t.Errorf("ps --help:\n%s", h)
	}

	// delete a host: its daemon stops and conf no longer lists it.
	tc.ok("delete h3")
	waitClosed(t, "h3's daemon stopping", vm.Daemons[2].Done())
	tc.waitFor("conf to list two hosts", func() bool { return len(tc.hosts()) == 2 })
	tc.bad("delete h9", "delete: ")

	// halt stops the virtual machine and leaves.
	out, errOut, leave := tc.do("halt")
	if !leave || out != "virtual machine halted\n" || errOut != "" {
		t.Fatalf("halt: leave %v, stdout %q, stderr %q", leave, out, errOut)
	}
	waitClosed(t, "the master halting", vm.Master().Done())
	waitClosed(t, "h2 halting", vm.Daemons[1].Done())
}

func TestConsoleQuit(t *testing.T) {
	vm, _, _ := startVM(t, 1)
	tc := newTestConsole(t, vm)
	for _, l := range []string{"quit", "exit", "  exit  "} {
		if out, errOut, leave := tc.do(l); !leave || out != "" || errOut != "" {
			t.Errorf("%q: leave %v, stdout %q, stderr %q", l, leave, out, errOut)
		}
	}
	if _, _, leave := tc.do("halt --help"); leave {
		t.Error("halt --help left the console")
	}
	select {
	case <-vm.Master().Done():
		t.Fatal("quitting or asking for help halted the virtual machine")
	default:
	}
}

func TestConsoleReconnects(t *testing.T) {
	vm, _, _ := startVM(t, 2)
	tc := newTestConsole(t, vm)
	tc.ok("conf")

	// The connection breaks under the console: the next command notices,
	// says so, connects again and runs.
	tc.con.cl.Close()
	out, errOut, _ := tc.do("conf --json")
	var hs []daemon.HostInfo
	if err := json.Unmarshal([]byte(out), &hs); err != nil || len(hs) != 2 {
		t.Fatalf("conf after the connection broke: %q %v (stderr %q)", out, err, errOut)
	}
	if !strings.Contains(errOut, "connection to the master at "+vm.Master().Addr()+" lost") ||
		!strings.Contains(errOut, "reconnected to the master h1") {
		t.Fatalf("no word of the reconnection: %q", errOut)
	}

	// A connection dropped after a failure is made again by the next
	// command.
	tc.con.drop()
	out, errOut, _ = tc.do("ps")
	if !strings.HasPrefix(out, "TID") || !strings.Contains(errOut, "reconnecting to the master at") {
		t.Fatalf("ps after a drop: stdout %q, stderr %q", out, errOut)
	}

	// With the master gone, a command fails with one line and the console
	// goes on. (A short timeout: connecting to nobody fails sooner.)
	vm.Halt(5 * time.Second)
	tc.con.timeout = 500 * time.Millisecond
	out, errOut, leave := tc.do("conf")
	if leave || out != "" || !strings.Contains(errOut, "conf: connect to "+vm.Master().Addr()) {
		t.Fatalf("conf with the master gone: leave %v, stdout %q, stderr %q", leave, out, errOut)
	}
	if strings.Count(errOut, "\n") != 2 { // the lost connection, then the failure
		t.Fatalf("conf with the master gone printed %q", errOut)
	}
}

// TestConsoleInterrupt checks that ^C cancels the command in progress, here
// one waiting for a master that never answers, and the console goes on.
func TestConsoleInterrupt(t *testing.T) {
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	vm, _, _ := startVM(t, 1)
	tc := newTestConsole(t, vm)
	tc.con.drop()
	tc.con.addr, tc.con.timeout = silent.LocalAddr().String(), time.Minute

	sigs := make(chan os.Signal, 1)
	sigs <- os.Interrupt // typed before the command: not for it
	done := make(chan bool)
	go func() {
		done <- tc.con.execInterruptible(context.Background(), "conf", sigs)
	}()
	// ^C, again and again until the command ends.
	var leave bool
wait:
	for {
		select {
		case sigs <- os.Interrupt:
		case leave = <-done:
			break wait
		}
	}
	if leave {
		t.Fatal("an interrupted command left the console")
	}
	want := "reconnecting to the master at " + tc.con.addr + "\nconf: interrupted\n"
	if tc.out.String() != "" || tc.errOut.String() != want {
		t.Fatalf("stdout %q, stderr %q; want stderr %q", tc.out.String(), tc.errOut.String(), want)
	}
}

// dpvmStdin runs the dpvm command line with the given standard input, as
// run does.
func dpvmStdin(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	status := run(strings.NewReader(stdin), append([]string{"dpvm"}, args...), &out, &errOut)
	return status, out.String(), errOut.String()
}

func TestConsoleCommandScript(t *testing.T) {
	vm, keyFile, _ := startVM(t, 3)
	addr := vm.Master().Addr()

	// A script with errors: each gives one line, the rest runs, quit
	// leaves and the status says something failed.
	script := "conf\nnosuch thing\n\n# a comment\nps --bogus\nps -a\nquit\nconf\n"
	status, out, errOut := dpvmStdin(t, script, "console", "--master", addr, "--credential", keyFile)
	if status != 1 || strings.Count(out, "ID  NAME") != 1 || !strings.Contains(out, "TID  ") {
		t.Fatalf("status %d\nstdout:\n%s\nstderr:\n%s", status, out, errOut)
	}
	if want := "unknown command \"nosuch\" ('help' lists the commands)\nps: flag provided but not defined: -bogus (see 'help ps')\n"; errOut != want {
		t.Fatalf("stderr %q, want %q", errOut, want)
	}

	// Flags after the command, the environment naming the VM, a last line
	// without its newline.
	t.Setenv("DPVM_MASTER", addr)
	t.Setenv("DPVM_CREDENTIAL", keyFile)
	status, out, errOut = dpvmStdin(t, "spawn hello -- -n 2\r\nconf --json", "console", "--timeout", "20s")
	var hs []daemon.HostInfo
	if status != 0 || errOut != "" || len(out) == 0 {
		t.Fatalf("status %d\nstdout:\n%s\nstderr:\n%s", status, out, errOut)
	}
	tidLine, rest, _ := strings.Cut(out, "\n")
	if _, err := task.ParseTID(tidLine); err != nil {
		t.Fatalf("spawn printed %q: %v", tidLine, err)
	}
	if err := json.Unmarshal([]byte(rest), &hs); err != nil || len(hs) != 3 {
		t.Fatalf("conf --json: %v %q", err, rest)
	}

	// halt stops the VM and the console with status 0.
	status, out, errOut = dpvmStdin(t, "halt\nconf\n", "console")
	if status != 0 || out != "virtual machine halted\n" || errOut != "" {
		t.Fatalf("status %d\nstdout:\n%s\nstderr:\n%s", status, out, errOut)
	}
	waitClosed(t, "the master halting", vm.Master().Done())
}

func TestConsoleCommandErrors(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "none.key")
	t.Setenv("DPVM_MASTER", "")
	t.Setenv("DPVM_CREDENTIAL", "")
	cases := []struct {
		args []string
		want string
		code int
	}{
		{[]string{"console"}, "dpvm: console: no virtual machine named: give --master ADDR or set DPVM_MASTER", 2},
		{[]string{"console", "--master", "127.0.0.1:1", "--credential", keyFile}, "dpvm: console: ", 2},
		{[]string{"console", "--master", "127.0.0.1:1", "ps"}, `dpvm: console: unexpected argument "ps" (see 'dpvm console --help')`, 2},
		{[]string{"console", "--bogus"}, "dpvm: flag provided but not defined: -bogus (see 'dpvm console --help')", 2},
	}
	for _, c := range cases {
		code, out, errOut := dpvmStdin(t, "conf\n", c.args...)
		if code != c.code || out != "" || !strings.HasPrefix(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: status %d, stdout %q, stderr %q; want %d and one line starting %q", c.args, code, out, errOut, c.code, c.want)
		}
	}
}

// TestControlCommands checks the one-shot commands, which share their
// actions with the console.
func TestControlCommands(t *testing.T) {
	vm, keyFile, _ := startVM(t, 2)
	vmArgs := []string{"--master", vm.Master().Addr(), "--credential", keyFile}
	cmd := func(args ...string) (int, string, string) {
		return dpvm(t, append(args, vmArgs...)...)
	}
	code, out, errOut := cmd("conf", "--json")
	var hs []daemon.HostInfo
	if code != 0 || json.Unmarshal([]byte(out), &hs) != nil || len(hs) != 2 {
		t.Fatalf("conf: %d %q %q", code, out, errOut)
	}
	code, out, errOut = cmd("spawn", "examples.pong", "--host", "h2")
	tid, err := task.ParseTID(strings.TrimSpace(out))
	if code != 0 || err != nil {
		t.Fatalf("spawn: %d %q %q", code, out, errOut)
	}
	code, out, errOut = cmd("ps")
	if code != 0 || !strings.Contains(out, tid.String()+"  examples.pong  h2    running") {
		t.Fatalf("ps: %d %q %q", code, out, errOut)
	}
	if code, out, errOut = cmd("kill", tid.String()); code != 0 || out != "" || errOut != "" {
		t.Fatalf("kill: %d %q %q", code, out, errOut)
	}
	if code, _, errOut = cmd("kill"); code != 2 || errOut != "dpvm: kill: no TID given\n" {
		t.Fatalf("kill without TID: %d %q", code, errOut)
	}
	if code, _, errOut = cmd("ps", "--bogus"); code != 2 || errOut != "dpvm: flag provided but not defined: -bogus (see 'dpvm ps --help')\n" {
		t.Fatalf("ps --bogus: %d %q", code, errOut)
	}
	if code, out, errOut = cmd("delete", "h2"); code != 0 || errOut != "" {
		t.Fatalf("delete: %d %q %q", code, out, errOut)
	}
	waitClosed(t, "h2 stopping", vm.Daemons[1].Done())
	if code, out, errOut = cmd("halt"); code != 0 || errOut != "" || out != "virtual machine halted\n" {
		t.Fatalf("halt: %d %q %q", code, out, errOut)
	}
	waitClosed(t, "the master halting", vm.Master().Done())
}

// keystrokes is a terminal's input: each Read returns the next burst of
// keys, as a user types them.
type keystrokes struct{ bursts []string }

func (k *keystrokes) Read(p []byte) (int, error) {
	if len(k.bursts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, k.bursts[0])
	if n == len(k.bursts[0]) {
		k.bursts = k.bursts[1:]
	} else {
		k.bursts[0] = k.bursts[0][n:]
	}
	return n, nil
}

func TestConsoleTerminal(t *testing.T) {
	vm, _, _ := startVM(t, 2)
	histFile := filepath.Join(t.TempDir(), "history")
	if err := os.WriteFile(histFile, []byte("conf --json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hist := newHistory(historyMax)
	if err := hist.open(histFile); err != nil {
		t.Fatal(err)
	}
	var screen bytes.Buffer
	keys := &keystrokes{bursts: []string{
		"\x1b[A", "\r", // up: the last session's command
		"ps\r",
		"spaw", "\x03", // ^C drops the line
		"con", "f\r",
		"\x04", // ^D: the end
	}}
	tl := newTermLines(keys, &screen, -1, hist)
	tc := newTestConsole(t, vm)
	tc.con.out, tc.con.errOut = tl, tl
	tc.con.loop(context.Background(), tl, nil)
	hist.close()

	s := strings.ReplaceAll(screen.String(), "\r\n", "\n")
	for _, want := range []string{`"master": true`, "\nTID  ", "^C\n", "h1 (master)"} {
		if !strings.Contains(s, want) {
			t.Errorf("the screen does not show %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "unknown command") || strings.Count(s, "dpvm> ") != 5 {
		t.Errorf("screen:\n%s", s)
	}
	b, err := os.ReadFile(histFile)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "conf --json\nps\nconf\n"; got != want {
		t.Fatalf("history file %q, want %q", got, want)
	}
	if hist.Len() != 3 || hist.At(0) != "conf" || hist.At(2) != "conf --json" {
		t.Fatalf("history %q", hist.lines)
	}
}

func TestHistoryBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history")
	if err := os.WriteFile(path, []byte("a\nb\n\nc\nd\ne\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHistory(2)
	if err := h.open(path); err != nil {
		t.Fatal(err)
	}
	if h.Len() != 2 || h.At(0) != "e" || h.At(1) != "d" {
		t.Fatalf("loaded %q", h.lines)
	}
	for _, l := range []string{"f", "f", "", "   ", "g"} {
		h.Add(l)
	}
	h.close()
	if !slices.Equal(h.lines, []string{"f", "g"}) {
		t.Fatalf("history %q", h.lines)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Five lines were more than twice the bound: the file was cut to the
	// last two, then grew by the new ones.
	if got := string(b); got != "d\ne\nf\ng\n" {
		t.Fatalf("history file %q", got)
	}
	// A history that cannot be kept is reported.
	if err := newHistory(2).open(filepath.Join(path, "sub", "history")); err == nil {
		t.Fatal("opened a history file under a file")
	}
}

func TestSplitWords(t *testing.T) {
	cases := []struct {
		line string
		want []string
		err  error
	}{
		{"", nil, nil},
		{"   \t ", nil, nil},
		{"ps", []string{"ps"}, nil},
		{"  ps   -a\t--json ", []string{"ps", "-a", "--json"}, nil},
		{`spawn examples.pi.worker '{"Lo":0,"Hi":100}'`, []string{"spawn", "examples.pi.worker", `{"Lo":0,"Hi":100}`}, nil},
		{`spawn t "{\"Lo\": 0}"`, []string{"spawn", "t", `{"Lo": 0}`}, nil},
		{`a"b c"d 'e f'g`, []string{"ab cd", "e fg"}, nil},
		{`'' ""`, []string{"", ""}, nil},
		{`a\ b \'c\\`, []string{"a b", `'c\`}, nil},
		{`"\n\\"`, []string{`\n\`}, nil},
		{`'\'`, []string{`\`}, nil},
		{`trailing\`, []string{`trailing\`}, nil},
		{"ps # the tasks", []string{"ps"}, nil},
		{"a#b '#' \"#\" \\#", []string{"a#b", "#", "#", "#"}, nil},
		{"héllo 'wörld ✓'", []string{"héllo", "wörld ✓"}, nil},
		{`spawn 'open`, nil, errUnterminated},
		{`spawn "open\"`, nil, errUnterminated},
		{`"`, nil, errUnterminated},
	}
	for _, c := range cases {
		got, err := splitWords(c.line)
		if !errors.Is(err, c.err) || !slices.Equal(got, c.want) {
			t.Errorf("splitWords(%q) = %q, %v; want %q, %v", c.line, got, err, c.want, c.err)
		}
	}
}

// quoteWord quotes w so that splitWords reads it back as one word.
func quoteWord(w string) string {
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

func FuzzSplitWords(f *testing.F) {
	for _, s := range []string{
		"", "ps -a", `spawn examples.pi.worker '{"Lo":0,"Hi":100}'`, `"a\"b" c\ d`, "x # y", `'unterminated`, "\\", "a\x00b \xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		words, err := splitWords(line)
		if err != nil {
			if !errors.Is(err, errUnterminated) {
				t.Fatalf("splitWords(%q): unexpected error %v", line, err)
			}
			return
		}
		// Quoting every word and splitting again gives the same words.
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = quoteWord(w)
		}
		again, err := splitWords(strings.Join(quoted, " "))
		if err != nil || !slices.Equal(again, words) {
			t.Fatalf("splitWords(%q) = %q; quoted back: %q, %v", line, words, again, err)
		}
		// A line without quotes, escapes or comments splits on blanks.
		if !strings.ContainsAny(line, `'"\#`) {
			if f := strings.FieldsFunc(line, isBlank); !slices.Equal(f, words) && (len(f) != 0 || len(words) != 0) {
				t.Fatalf("splitWords(%q) = %q, want %q", line, words, f)
			}
		}
	})
}

func isBlank(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\v', '\f':
		return true
	}
	return false
}

// BenchmarkConsoleCommand measures one console line, from parsing to the
// printed answer, on an embedded virtual machine of three daemons over
// QUIC on loopback: the connection check and the command's round trips to
// the master (ps also gathers every host's tasks).
func BenchmarkConsoleCommand(b *testing.B) {
	vm, err := daemon.StartLocalVM(context.Background(), 3, daemon.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer vm.Halt(5 * time.Second)
	con := &console{addr: vm.Master().Addr(), key: vm.Cluster.Admin, timeout: 10 * time.Second, out: io.Discard, errOut: io.Discard}
	if err := con.connect(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer con.close()
	if con.exec(context.Background(), "spawn examples.pong -n 6") || con.failed {
		b.Fatal("spawn failed")
	}
	for _, line := range []string{"conf", "ps", "ps -a --json"} {
		b.Run(strings.ReplaceAll(line, " ", "_"), func(b *testing.B) {
			for b.Loop() {
				con.exec(context.Background(), line)
			}
			if con.failed {
				b.Fatalf("%s failed", line)
			}
		})
	}
}
