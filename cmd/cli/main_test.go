package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/task"
)

// commandPaths lists every command of the tree by its full name, and
// whether it holds subcommands.
func commandPaths(t *testing.T) map[string]*cli.Command {
	t.Helper()
	app := newApp(nil, nil)
	paths := map[string]*cli.Command{}
	walkCommands(app.Commands, "dpvm", func(path string, c *cli.Command) { paths[path] = c })
	if len(paths) < 30 {
		t.Fatalf("the command tree has %d commands", len(paths))
	}
	return paths
}

// TestUsageErrorsEveryCommand walks the command tree: a bad flag, a stray
// argument to a command that takes none and an unknown subcommand are each
// one line naming the command that was typed, with exit status 2.
func TestUsageErrorsEveryCommand(t *testing.T) {
	t.Setenv("DPVM_MASTER", "")
	for path, c := range commandPaths(t) {
		words := strings.Fields(path)[1:]
		code, out, errOut := dpvm(t, append(words, "--no-such-flag")...)
		want := "(see '" + path + " --help')"
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, want) ||
			!strings.Contains(errOut, "flag provided but not defined: -no-such-flag") {
			t.Errorf("%s --no-such-flag: status %d, stdout %q, stderr %q; want 2 and one line with %q", path, code, out, errOut, want)
		}
		switch {
		case len(c.Subcommands) > 0:
			code, _, errOut = dpvm(t, append(words, "nosuchcommand")...)
			if code != exitUsage || !strings.Contains(errOut, `unknown command "nosuchcommand"`) || !strings.Contains(errOut, want) {
				t.Errorf("%s nosuchcommand: status %d, stderr %q", path, code, errOut)
			}
			code, out, _ = dpvm(t, words...)
			if code != exitOK || !strings.Contains(out, "COMMANDS:") {
				t.Errorf("%s alone: status %d, want its help; stdout %q", path, code, out)
			}
		case strings.TrimSpace(c.ArgsUsage) == "":
			code, _, errOut = dpvm(t, append(words, "stray")...)
			if code != exitUsage || !strings.Contains(errOut, `unexpected argument "stray"`) || !strings.Contains(errOut, want) {
				t.Errorf("%s stray: status %d, stderr %q", path, code, errOut)
			}
		}
	}
	// The program itself.
	if code, _, errOut := dpvm(t, "nosuchcommand"); code != exitUsage || errOut != "" && !strings.HasPrefix(errOut, `dpvm: unknown command "nosuchcommand"; commands: run, `) {
		t.Errorf("dpvm nosuchcommand: %d %q", code, errOut)
	}
	if code, _, errOut := dpvm(t, "help", "nosuchcommand"); code != exitUsage || !strings.Contains(errOut, "unknown command") {
		t.Errorf("dpvm help nosuchcommand: %d %q", code, errOut)
	}
	if code, _, errOut := dpvm(t, "--no-such-flag"); code != exitUsage || !strings.Contains(errOut, "(see 'dpvm --help')") {
		t.Errorf("dpvm --no-such-flag: %d %q", code, errOut)
	}
}

// TestUsageHintsNameTheCommand checks the two hints that named the wrong
// command: the subcommand's parent is part of its name.
func TestUsageHintsNameTheCommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "migrate", "--bogus"}, "dpvm: flag provided but not defined: -bogus (see 'dpvm bench migrate --help')\n"},
		{[]string{"npb", "cg", "--class"}, "dpvm: flag needs an argument: -class (see 'dpvm npb cg --help')\n"},
		{[]string{"sched", "plan", "--bogus"}, "dpvm: flag provided but not defined: -bogus (see 'dpvm sched plan --help')\n"},
		{[]string{"keygen"}, "dpvm: keygen: --out DIR is required (see 'dpvm keygen --help')\n"},
	} {
		if code, _, errOut := dpvm(t, c.args...); code != exitUsage || errOut != c.want {
			t.Errorf("%v: status %d, stderr %q; want 2, %q", c.args, code, errOut, c.want)
		}
	}
}

func TestLogLevel(t *testing.T) {
	for _, lvl := range []string{"debug", "info", "warn", "error", "WARN"} {
		if code, _, errOut := dpvm(t, "--log-level", lvl, "version"); code != exitOK || errOut != "" {
			t.Errorf("--log-level %s: status %d, stderr %q", lvl, code, errOut)
		}
	}
	want := `dpvm: --log-level "loud": want debug, info, warn or error (see 'dpvm --help')` + "\n"
	if code, out, errOut := dpvm(t, "--log-level", "loud", "version"); code != exitUsage || out != "" || errOut != want {
		t.Errorf("--log-level loud: status %d, stdout %q, stderr %q", code, out, errOut)
	}
	t.Setenv("DPVM_LOG", "chatty")
	if code, _, errOut := dpvm(t, "version"); code != exitUsage || !strings.Contains(errOut, `--log-level "chatty"`) {
		t.Errorf("DPVM_LOG=chatty: status %d, stderr %q", code, errOut)
	}
}

// TestExitStatusTable runs a representative failure (or success) of every
// command and checks its status is the table's: 0 success, 1 the program
// or operation failed, 2 usage error.
func TestExitStatusTable(t *testing.T) {
	vm, keyFile, _ := startVM(t, 2)
	t.Setenv("DPVM_MASTER", vm.Master().Addr())
	t.Setenv("DPVM_CREDENTIAL", keyFile)
	t.Setenv("SLURM_JOB_ID", "") // dpvm slurm outside an allocation
	dir := t.TempDir()
	creds := t.TempDir()
	if err := vm.Cluster.WriteDir(creds); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "snapshot.json")
	if err := os.WriteFile(state, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		cmd  string // the command the row stands for
		args []string
		code int
		want string // in the one line of stderr ("" for none)
	}{
		{"run", []string{"run", "nope"}, 2, `run: unknown program "nope"`},
		{"run", []string{"run", "--master", "", "hello", "-n", "0"}, 2, "-n must be at least 1"},
		{"run", []string{"run", "--hosts", "2", "hello"}, 2, "--hosts sizes an embedded virtual machine"},
		{"daemon", []string{"daemon"}, 2, "daemon: give either --master or --join ADDR"},
		{"keygen", []string{"keygen", "--out", "/dev/null/k"}, 1, "keygen: "},
		{"cert", []string{"cert", "show", filepath.Join(dir, "none.pem")}, 1, "cert show: "},
		{"conf", []string{"conf", "--master", ""}, 2, "conf: no virtual machine named"},
		{"conf", []string{"conf", "--credential", filepath.Join(dir, "none")}, 2, "conf: "},
		{"ps", []string{"ps"}, 0, ""},
		{"spawn", []string{"spawn", "nosuchtype"}, 2, "spawn: "},
		{"kill", []string{"kill", "t9:9"}, 1, "kill: "},
		{"kill", []string{"kill", "bogus"}, 2, "kill: "},
		{"kill", []string{"kill", "j99"}, 1, "j99: job 99: no such job"},
		{"migrate", []string{"migrate", "t9:9", "--to", "h2"}, 1, "dpvm: migrate t9:9 to h2: no such task: it has exited, or never ran"},
		{"checkpoint", []string{"checkpoint", "99"}, 1, "dpvm: checkpoint: job 99: no such job"},
		{"checkpoint", []string{"checkpoint", "x"}, 2, "checkpoint: "},
		{"restart", []string{"restart", filepath.Join(dir, "nothing")}, 1, "outside the shared directory"},
		{"delete", []string{"delete", "nosuchhost"}, 1, "delete: "},
		{"console", []string{"console", "--master", ""}, 2, "console: no virtual machine named"},
		{"sched", []string{"sched", "plan", "--state", state}, 1, "sched plan: "},
		{"sched", []string{"sched", "status"}, 0, ""},
		{"load", []string{"load", "inject", "nosuchhost", "--users", "2"}, 1, "load inject: "},
		{"load", []string{"load", "inject"}, 2, "load inject: name one host"},
		{"sim", []string{"sim", "loadshare", "--policy", "nope"}, 2, ""},
		{"npb", []string{"npb", "mg", "--np", "3", "--master", ""}, 2, "power of two"},
		{"bench", []string{"bench", "migrate", "--sizes", "x"}, 2, ""},
		{"version", []string{"version"}, 0, ""},
		{"completion", []string{"completion", "tcsh"}, 2, `unknown shell "tcsh"`},
		{"man", []string{"man"}, 0, ""},
		{"slurm", []string{"slurm", "nope"}, 2, `slurm: unknown program "nope"`},
		{"slurm", []string{"slurm", "hello"}, 2, "slurm: SLURM_JOB_ID is not set"},
		{"up", []string{"up"}, 2, "up: give one HOSTFILE"},
		{"up", []string{"up", filepath.Join(dir, "nohosts")}, 2, "up: open "},
		{"down", []string{"down", "--state", filepath.Join(dir, "nostate")}, 1, "down: state: "},
		{"add", []string{"add"}, 2, "add: no host named"},
		{"add", []string{"add", "node9", "--ssh", "false", "--remote-dir", dir, "--credentials", creds}, 1, "add: node9: copy its credential to "},
		{"halt", []string{"halt"}, 0, ""},
	}
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.cmd] = true
		code, _, errOut := dpvm(t, c.args...)
		if code != c.code {
			t.Errorf("%v: status %d, want %d (stderr %q)", c.args, code, c.code, errOut)
			continue
		}
		if c.code == 0 {
			if errOut != "" {
				t.Errorf("%v: stderr %q", c.args, errOut)
			}
			continue
		}
		if strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "dpvm: ") || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: stderr %q, want one line with %q", c.args, errOut, c.want)
		}
		// No layer repeats the context another gave.
		if f := strings.Fields(errOut); len(f) > 2 && strings.TrimSuffix(f[1], ":") == strings.TrimSuffix(f[2], ":") {
			t.Errorf("%v: stuttered error %q", c.args, errOut)
		}
	}
	for _, c := range newApp(nil, nil).Commands {
		if !covered[c.Name] {
			t.Errorf("the exit status table has no row for %s", c.Name)
		}
	}
}

func TestVersion(t *testing.T) {
	b := daemon.ThisBuild()
	code, out, errOut := dpvm(t, "version")
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "dpvm "+b.Version+"\n") || !strings.Contains(out, b.Go) ||
		!strings.Contains(out, "revision ") || !strings.Contains(out, b.Registry) {
		t.Fatalf("version: %d %q %q", code, out, errOut)
	}
	if code, out2, _ := dpvm(t, "--version"); code != 0 || out2 != out {
		t.Fatalf("--version: %d %q, want %q", code, out2, out)
	}
	var got daemon.Build
	code, out, _ = dpvm(t, "version", "--json")
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got != b {
		t.Fatalf("version --json: %d %q (%v); want %+v", code, out, err, b)
	}
}

// TestJSONResults checks the JSON of the commands that only act.
func TestJSONResults(t *testing.T) {
	vm, keyFile, _ := startVM(t, 2)
	t.Setenv("DPVM_MASTER", vm.Master().Addr())
	t.Setenv("DPVM_CREDENTIAL", keyFile)
	decode := func(args ...string) map[string]any {
		t.Helper()
		code, out, errOut := dpvm(t, args...)
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("%v: status %d, stdout %q (%v), stderr %q", args, code, out, err, errOut)
		}
		return m
	}
	m := decode("spawn", "examples.pong", "--host", "h2", "--json")
	tid := m["tids"].([]any)[0].(string)
	if m := decode("kill", tid, "--json"); len(m["killed"].([]any)) != 1 || m["killed"].([]any)[0] != tid {
		t.Errorf("kill --json: %v", m)
	}
	if m := decode("load", "inject", "h2", "--users", "3", "--json"); m["host"] != "h2" || m["cleared"] != false || m["overlay"] == nil {
		t.Errorf("load inject --json: %v", m)
	}
	// run on the running machine (DPVM_MASTER): the output on stderr as it
	// comes, the result and the output lines on stdout.
	code, out, errOut := dpvm(t, "run", "--json", "hello", "-n", "2")
	var r runResult
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || r.Program != "hello" || r.Status != 0 || r.Error != "" || len(r.Output) != 3 || r.Result != nil ||
		!strings.Contains(errOut, "2 children said hello") {
		t.Errorf("run --json: %d %q %q", code, out, errOut)
	}
	// It ran on the machine DPVM_MASTER names.
	var ts []daemon.TaskInfo
	code, out, _ = dpvm(t, "ps", "-a", "--json")
	if err := json.Unmarshal([]byte(out), &ts); code != 0 || err != nil || !slices.ContainsFunc(ts, func(ti daemon.TaskInfo) bool { return ti.Type == "examples.hello" }) {
		t.Errorf("run with DPVM_MASTER set did not run on its machine: ps -a: %d %q", code, out)
	}
	code, out, _ = dpvm(t, "run", "--json", "--master", "", "hello", "-n", "2")
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || r.Program != "hello" {
		t.Errorf("run --json on an embedded machine: %d %q", code, out)
	}
	key := filepath.Join(t.TempDir(), "k")
	if m := decode("keygen", "--out", key, "--json"); m["dir"] != key || m["admin"] != filepath.Join(key, "admin.pem") {
		t.Errorf("keygen --json: %v", m)
	}
	if m := decode("delete", "h2", "--json"); len(m["deleted"].([]any)) != 1 {
		t.Errorf("delete --json: %v", m)
	}
	if m := decode("halt", "--json"); m["halted"] != true {
		t.Errorf("halt --json: %v", m)
	}
}

// TestEveryReportingCommandHasJSON: every command that lists, reports or
// acts on a virtual machine has --json; those without say why here.
func TestEveryReportingCommandHasJSON(t *testing.T) {
	without := map[string]string{
		"dpvm daemon":             "runs until stopped; conf and ps report on it",
		"dpvm console":            "interactive; its commands have --json",
		"dpvm completion":         "prints a shell script",
		"dpvm man":                "prints a manual page",
		"dpvm cert host":          "writes a credential file; cert show reports on it",
		"dpvm cert user":          "as cert host",
		"dpvm cert show":          "prints the certificate's fields on one line",
		"dpvm cert revoke":        "appends to a revocation list, a text file",
		"dpvm cert rotate-secret": "rewrites the secret file",
		"dpvm cert upgrade":       "writes a directory as keygen, whose --json has the paths",
		"dpvm slurm":              "a batch job's whole run: its output is the program's, in the job's output file",
	}
	for path, c := range commandPaths(t) {
		if len(c.Subcommands) > 0 {
			continue
		}
		has := findFlag(c.Flags, "json") != nil
		if _, ok := without[path]; ok == has {
			t.Errorf("%s: --json %v, listed as without it %v", path, has, ok)
		}
	}
}

// TestConfShowsBuild: conf shows each host's build, in its table and JSON.
func TestConfShowsBuild(t *testing.T) {
	vm, keyFile, _ := startVM(t, 2)
	args := []string{"--master", vm.Master().Addr(), "--credential", keyFile}
	b := daemon.ThisBuild()
	code, out, errOut := dpvm(t, append([]string{"conf"}, args...)...)
	if code != 0 || strings.Count(out, " "+buildLabel(b)) != 2 || !strings.Contains(out, "BUILD") {
		t.Fatalf("conf: %d %q %q; want two hosts of build %s", code, out, errOut, buildLabel(b))
	}
	var hs []daemon.HostInfo
	code, out, _ = dpvm(t, append([]string{"conf", "--json"}, args...)...)
	if err := json.Unmarshal([]byte(out), &hs); code != 0 || err != nil || len(hs) != 2 || hs[1].Build != b {
		t.Fatalf("conf --json: %d %v %+v", code, err, hs)
	}
	if got := buildLabel(daemon.Build{Version: "v1.2.0", Revision: "0123456789abcdef+dirty", Go: "go1.26", Registry: "abc"}); got != "v1.2.0/0123456789ab+dirty/go1.26/abc" {
		t.Errorf("buildLabel: %q", got)
	}
}

// TestExitStatusOf maps a program's results to the table: a program's own
// status passes through, an interruption is 130.
func TestExitStatusOf(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("lost"), 1},
		{fmt.Errorf("run: %w", context.Canceled), 130},
		{fmt.Errorf("job: %w", &task.ExitError{Status: 3}), 3},
		{&task.ExitError{Status: 300}, 1},
	}
	for _, c := range cases {
		if got := exitStatus(c.err); got != c.want {
			t.Errorf("exitStatus(%v) = %d, want %d", c.err, got, c.want)
		}
	}
	var ec interface{ ExitCode() int }
	if err := exitFor("run hello", context.Canceled); !errors.As(err, &ec) || ec.ExitCode() != 130 || err.Error() != "run hello: interrupted" {
		t.Errorf("exitFor(canceled) = %v", err)
	}
}
