package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCompletionScripts checks each shell's script: it is produced, names
// every command, and parses in its shell where the shell is installed
// (bash always is).
func TestCompletionScripts(t *testing.T) {
	paths := commandPaths(t)
	for _, sh := range []string{"bash", "zsh", "fish"} {
		code, script, errOut := dpvm(t, "completion", sh)
		if code != 0 || errOut != "" || !strings.Contains(script, "dpvm completion "+sh) {
			t.Fatalf("completion %s: %d %q", sh, code, errOut)
		}
		for path := range paths {
			for _, w := range strings.Fields(path)[1:] {
				if !strings.Contains(script, w) {
					t.Errorf("the %s script does not mention %q (of %s)", sh, w, path)
				}
			}
		}
		file := filepath.Join(t.TempDir(), "dpvm."+sh)
		if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
		bin, err := exec.LookPath(sh)
		if err != nil {
			if sh == "bash" {
				t.Fatal("bash is not installed")
			}
			t.Logf("%s is not installed: its script is not parsed", sh)
			continue
		}
		if out, err := exec.Command(bin, "-n", file).CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v\n%s", sh, err, out)
		}
	}
}

// TestBashCompletes runs the bash script's completion function on command
// lines as bash would, and checks what it offers.
func TestBashCompletes(t *testing.T) {
	_, script, _ := dpvm(t, "completion", "bash")
	file := filepath.Join(t.TempDir(), "dpvm.bash")
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		words []string // the last is the word being completed
		want  string
	}{
		{[]string{"dpvm", "sch"}, "sched"},
		{[]string{"dpvm", "sched", ""}, "plan step status"},
		{[]string{"dpvm", "bench", "migrate", "--js"}, "--json"},
		{[]string{"dpvm", "--log-level", ""}, "debug info warn error"},
		{[]string{"dpvm", "migrate", "t1:2", "--via", "ind"}, "indirect"},
		{[]string{"dpvm", "run", "hel"}, "hello"},
		{[]string{"dpvm", "completion", "f"}, "fish"},
		{[]string{"dpvm", "npb", "cg", "--cl"}, "--class --cluster-key"},
	}
	for _, c := range cases {
		var sb strings.Builder
		sb.WriteString("source " + file + "\nCOMP_WORDS=(")
		for _, w := range c.words {
			sb.WriteString(shellQuote(w) + " ")
		}
		sb.WriteString(")\nCOMP_CWORD=" + strconv.Itoa(len(c.words)-1) + "\n_dpvm\necho \"${COMPREPLY[*]}\"\n")
		out, err := exec.Command("bash", "-c", sb.String()).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != c.want {
			t.Errorf("%q: %q (%v), want %q", c.words, out, err, c.want)
		}
	}
}

// TestZshCompletes runs the zsh script's completion function with the
// completion system's builtins replaced by ones that print their
// candidates.
func TestZshCompletes(t *testing.T) {
	zsh, err := exec.LookPath("zsh")
	if err != nil {
		t.Log("zsh is not installed: its script is checked by TestCompletionScripts only")
		return
	}
	_, script, _ := dpvm(t, "completion", "zsh")
	file := filepath.Join(t.TempDir(), "_dpvm")
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	stubs := `compdef() { :; }
_describe() { print -l -- "${(@P)4}" | cut -d: -f1 | tr '\n' ' '; echo; }
compadd() { print -- "${(@P)2}"; }
_files() { echo FILES; }
source ` + file + "\n"
	cases := []struct {
		words []string
		want  string
	}{
		{[]string{"dpvm", "sched", ""}, "plan step status"},
		{[]string{"dpvm", "--log-level", ""}, "debug info warn error"},
		{[]string{"dpvm", "run", ""}, "hello"},
		{[]string{"dpvm", "restart", ""}, "FILES"},
		{[]string{"dpvm", "load", "inject", "--"}, "--users"},
	}
	for _, c := range cases {
		var sb strings.Builder
		sb.WriteString(stubs + "words=(")
		for _, w := range c.words {
			sb.WriteString(shellQuote(w) + " ")
		}
		sb.WriteString(")\nCURRENT=" + strconv.Itoa(len(c.words)) + "\n_dpvm\n")
		out, err := exec.Command(zsh, "-f", "-c", sb.String()).CombinedOutput()
		if err != nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%q: %q (%v), want it to contain %q", c.words, out, err, c.want)
		}
	}
}

// TestFishCompletes asks fish for the completions of command lines.
func TestFishCompletes(t *testing.T) {
	fish, err := exec.LookPath("fish")
	if err != nil {
		t.Log("fish is not installed: its script is checked by TestCompletionScripts only")
		return
	}
	_, script, _ := dpvm(t, "completion", "fish")
	file := filepath.Join(t.TempDir(), "dpvm.fish")
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ line, want string }{
		{"dpvm sched ", "status"},
		{"dpvm bench migrate --js", "--json"},
		{"dpvm migrate --via ", "indirect"},
		{"dpvm run hel", "hello"},
	}
	for _, c := range cases {
		out, err := exec.Command(fish, "--no-config", "-c", "source "+file+"; complete -C "+shellQuote(c.line)).CombinedOutput()
		if err != nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%q: %q (%v), want it to contain %q", c.line, out, err, c.want)
		}
	}
	// A subcommand is not offered where its name means another command.
	out, _ := exec.Command(fish, "--no-config", "-c", "source "+file+"; complete -C 'dpvm migrate '").CombinedOutput()
	if strings.Contains(string(out), "pingpong") {
		t.Errorf("dpvm migrate offers bench's subcommands: %q", out)
	}
}

func TestManPage(t *testing.T) {
	code, page, errOut := dpvm(t, "man")
	if code != 0 || errOut != "" || !strings.HasPrefix(page, ".nh\n.TH dpvm 1") {
		t.Fatalf("man: %d %q %.200q", code, errOut, page)
	}
	for path, c := range commandPaths(t) {
		if !strings.Contains(page, c.Name) || !strings.Contains(page, strings.ReplaceAll(firstLine(c.Usage), "-", `\-`)) &&
			!strings.Contains(page, firstLine(c.Usage)) {
			t.Errorf("the man page lacks %s (%q)", path, firstLine(c.Usage))
		}
	}
	if man, err := exec.LookPath("man"); err == nil {
		file := filepath.Join(t.TempDir(), "dpvm.1")
		if err := os.WriteFile(file, []byte(page), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(man, "-l", file)
		cmd.Env = append(os.Environ(), "MANPAGER=cat", "MANWIDTH=100")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "completion") {
			t.Errorf("man -l: %v\n%.500s", err, out)
		}
	}
}
