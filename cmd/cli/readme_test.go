package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/dpvm/dpvm/task"
	"github.com/urfave/cli/v2"
)

// The README tests keep the repository's READMEs true: every dpvm command
// line they show parses against the command tree, every local link points
// at a file (and heading) that exists, the commands the front README says
// print something print it, and the README's own-module recipe builds a
// working dpvm.

// pendingCommands are commands the README shows that are being built on
// other branches; a line naming one is not checked until the command
// exists. Empty this list when they have landed.
var pendingCommands = []string{}

// pendingPaths are link targets being added on other branches, relative to
// the repository's root. Empty this list when they have landed.
var pendingPaths = []string{}

const repoRoot = "../.."

// readmes returns the repository's README files, relative to its root.
func readmes(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasPrefix(d.Name(), "README") && strings.HasSuffix(d.Name(), ".md") {
			rel, err := filepath.Rel(repoRoot, path)
			if err != nil {
				return err
			}
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(out, "README.md") {
		t.Fatalf("no README.md at the repository's root among %v", out)
	}
	return out
}

func readRepo(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// mdParts splits markdown into the lines of its fenced code blocks and its
// prose, with each paragraph of prose joined into one line (inline code
// may span a line break).
func mdParts(md string) (code, prose []string) {
	fenced := false
	var para []string
	flush := func() {
		if len(para) > 0 {
			prose = append(prose, strings.Join(para, " "))
			para = nil
		}
	}
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			flush()
			fenced = !fenced
			continue
		}
		if fenced {
			code = append(code, line)
		} else if strings.TrimSpace(line) == "" {
			flush()
		} else {
			para = append(para, strings.TrimSpace(line))
		}
	}
	flush()
	return code, prose
}

var inlineDpvm = regexp.MustCompile("`((?:go run \\./cmd/)?dpvm [^`]+)`")

// indentedDpvm matches a line of an indented code block that runs dpvm.
var indentedDpvm = regexp.MustCompile(`^(?: {4}|\t)+(?:\$ )?dpvm `)

// shellTail matches where a shell line stops being dpvm's: a pipe into
// another command (a "|" between a synopsis's alternatives is followed by
// a flag or a bracket), a redirection, or a second command.
var shellTail = regexp.MustCompile(` (?:\| [^-\[ ]|>|&&|;)`)

// commandLines returns the dpvm command lines of a README: lines of
// fenced or indented code blocks that start with "dpvm " (after a "$ "
// prompt), and inline code spans that do. A code line is cut where the
// shell takes over (a pipe, a redirection); splitWords (the console's)
// drops its shell comments.
func commandLines(md string) []string {
	code, prose := mdParts(md)
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		} else if !fenced && indentedDpvm.MatchString(line) {
			code = append(code, line)
		}
	}
	var out []string
	for _, line := range code {
		line = strings.TrimPrefix(strings.TrimSpace(line), "$ ")
		line = strings.TrimPrefix(line, "go run ./cmd/")
		if loc := shellTail.FindStringIndex(line); loc != nil {
			line = line[:loc[0]]
		}
		if strings.HasPrefix(line, "dpvm ") {
			out = append(out, line)
		}
	}
	for _, p := range prose {
		for _, m := range inlineDpvm.FindAllStringSubmatch(p, -1) {
			out = append(out, strings.TrimPrefix(m[1], "go run ./cmd/"))
		}
	}
	return out
}

var errPending = errors.New("a pending command")

// checkCommandLine parses the words of a dpvm command line against the
// command tree: each command and subcommand exists, each flag exists on
// its command (or is global), and the program and program flags of
// "dpvm run" exist. Positional arguments are not checked. Usage synopses
// are understood too: brackets around optional words, "|" between
// alternatives ("plan|step" or "plan/step" names two subcommands), an
// upper-case placeholder for a subcommand (KERNEL: the flags that follow
// are checked against the first subcommand), and "…" for the elided rest.
func checkCommandLine(app *cli.App, words []string) error {
	if len(words) == 0 || words[0] != "dpvm" {
		return fmt.Errorf("not a dpvm command line")
	}
	var cmd *cli.Command
	path := "dpvm"
	subs := app.Commands
	flags := app.Flags
	rest := words[1:]
	for len(rest) > 0 {
		tok := strings.Trim(rest[0], "[]")
		rest = rest[1:]
		switch {
		case tok == "" || tok == "|":
		case tok == "…":
			return nil
		case tok == "--":
			return nil // the rest belongs to the program
		case isFlag(tok):
			name, _, hasValue := strings.Cut(strings.TrimLeft(tok, "-"), "=")
			if name == "h" || name == "help" || (cmd == nil && name == "version") {
				continue
			}
			f := findFlag(flags, name)
			if f == nil {
				f = findFlag(app.Flags, name)
			}
			if f == nil {
				return fmt.Errorf("%s has no flag --%s", path, name)
			}
			if tv, ok := f.(interface{ TakesValue() bool }); ok && tv.TakesValue() && !hasValue {
				if len(rest) == 0 {
					return fmt.Errorf("%s --%s needs a value", path, name)
				}
				rest = rest[1:]
			}
		case cmd != nil && runsProgram(app, cmd):
			if isPlaceholder(tok) {
				return nil // a synopsis: PROGRAM [program flags]
			}
			return checkProgram(tok, rest)
		case len(subs) > 0 && isPlaceholder(tok):
			cmd, subs, flags = subs[0], subs[0].Subcommands, subs[0].Flags
			path += " " + tok
		case len(subs) > 0 && strings.ContainsAny(tok, "|/"):
			alts := strings.FieldsFunc(tok, func(r rune) bool { return r == '|' || r == '/' })
			for _, a := range alts {
				if findCommand(subs, a) == nil {
					return fmt.Errorf("%s has no subcommand %q", path, a)
				}
			}
			next := findCommand(subs, alts[0])
			cmd, subs, flags = next, next.Subcommands, next.Flags
			path += " " + next.Name
		default:
			if next := findCommand(subs, tok); next != nil {
				cmd, subs, flags = next, next.Subcommands, next.Flags
				path += " " + next.Name
				continue
			}
			if cmd == nil {
				if slices.Contains(pendingCommands, tok) {
					return errPending
				}
				return fmt.Errorf("dpvm has no command %q", tok)
			}
			if len(subs) > 0 {
				return fmt.Errorf("%s has no subcommand %q", path, tok)
			}
			// A positional argument of cmd.
		}
	}
	if cmd == nil {
		return fmt.Errorf("no command")
	}
	return nil
}

// runsProgram reports whether cmd's first argument is a registered
// program whose flags follow it: "dpvm run" and "dpvm sim vm".
func runsProgram(app *cli.App, cmd *cli.Command) bool {
	if cmd == findCommand(app.Commands, "run") {
		return true
	}
	sim := findCommand(app.Commands, "sim")
	return sim != nil && cmd == findCommand(sim.Subcommands, "vm")
}

// isPlaceholder reports whether a word is an upper-case placeholder of a
// synopsis, such as KERNEL.
func isPlaceholder(w string) bool {
	letter := false
	for _, r := range w {
		switch {
		case unicode.IsUpper(r):
			letter = true
		case unicode.IsDigit(r) || r == '_' || r == '-':
		default:
			return false
		}
	}
	return letter
}

// checkProgram checks that a registered program of that name exists and
// that its flags parse args.
func checkProgram(name string, args []string) error {
	for _, p := range task.Programs() {
		if p.Name != name {
			continue
		}
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		p.Setup(fs)
		if err := fs.Parse(args); err != nil && !errors.Is(err, flag.ErrHelp) {
			return fmt.Errorf("program %s: %w", name, err)
		}
		return nil
	}
	return fmt.Errorf("no program %q is registered", name)
}

func TestCheckCommandLine(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	for _, c := range []struct {
		line string
		ok   bool
	}{
		{"dpvm run --hosts 3 hello", true},
		{"dpvm run pi -workers 8 --help", true},
		{"dpvm kill t2:3 --master x:1", true},
		{"dpvm spawn hello -- -n 8 --anything", true},
		{"dpvm npb cg --class A --np 4", true},
		{"dpvm --log-level debug conf --json", true},
		{"dpvm bogus", false},
		{"dpvm conf --bogus", false},
		{"dpvm npb zz", false},
		{"dpvm run nosuchprogram", false},
		{"dpvm run pi -bogus 1", false},
		{"dpvm sim vm --seeds 10 ring -n 5 -laps 20", true},
		{"dpvm sim vm ring -bogus 1", false},
		{"dpvm sim vm [--seeds N] PROGRAM [program flags]", true},
		{"dpvm run --master", false},
		{"dpvm sched plan|step --json", true},
		{"dpvm npb KERNEL --class S|W|A [--hosts H] [--json]", true},
		{"dpvm sim sed [--trace FILE | --synthetic]", true},
		{"dpvm sim …", true},
		{"dpvm sched plan/bogus", false},
		{"dpvm npb KERNEL [--bogus]", false},
	} {
		words, err := splitWords(c.line)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkCommandLine(app, words); (err == nil) != c.ok {
			t.Errorf("%q: %v, want ok=%v", c.line, err, c.ok)
		}
	}
}

func TestCommandLines(t *testing.T) {
	md := "Run `dpvm conf --json` or:\n\n```\n$ dpvm ps   # the tasks\ndpvm man | man -l -\n```\n\n" +
		"    dpvm sim scale [--routes broadcast|demand] [--json]\n    dpvm completion zsh > ~/.zfunc/_dpvm\n\n" +
		"```\n    dpvm sim sed [--trace FILE | --synthetic]\n```\n"
	want := []string{"dpvm ps   # the tasks", "dpvm man", "dpvm sim sed [--trace FILE | --synthetic]",
		"dpvm sim scale [--routes broadcast|demand] [--json]", "dpvm completion zsh", "dpvm conf --json"}
	if got := commandLines(md); !slices.Equal(got, want) {
		t.Errorf("commandLines:\n got %q\nwant %q", got, want)
	}
}

// TestReadmeLength holds the front README to at most 300 lines: results
// and internals belong in the READMEs beside their code.
func TestReadmeLength(t *testing.T) {
	if n := strings.Count(readRepo(t, "README.md"), "\n"); n > 300 {
		t.Errorf("README.md has %d lines, at most 300 allowed", n)
	}
}

// TestReadmeCommands checks every dpvm command line shown in the
// repository's READMEs against the command tree.
func TestReadmeCommands(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	checked := 0
	for _, rel := range readmes(t) {
		for _, line := range commandLines(readRepo(t, rel)) {
			words, err := splitWords(line)
			if err == nil {
				err = checkCommandLine(app, words)
			}
			switch {
			case errors.Is(err, errPending):
				t.Logf("%s: %q: pending command, not checked", rel, line)
			case err != nil:
				t.Errorf("%s: %q: %v", rel, line, err)
			default:
				checked++
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d command lines found in the READMEs", checked)
	}
}

// proseParagraphs returns the paragraphs of md outside its fenced code
// blocks and its tables, each joined into one line. Headings and list
// items are prose, each list item a paragraph of its own; a table row is
// not, so a row may carry a date.
func proseParagraphs(md string) []string {
	var out, para []string
	flush := func() {
		if len(para) > 0 {
			out = append(out, strings.Join(para, " "))
			para = nil
		}
	}
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "```"):
			flush()
			fenced = !fenced
		case fenced:
		case t == "" || strings.HasPrefix(t, "|"):
			flush()
		default:
			if listItem.MatchString(t) {
				flush()
			}
			para = append(para, t)
		}
	}
	flush()
	return out
}

// listItem matches the first line of a markdown list item.
var listItem = regexp.MustCompile(`^(?:[-*+]|\d+[.)]) `)

var (
	isoDate = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}\b`)
	// A date with its month's name ("28 November"; "Nov 28, 2026", with
	// its year, since "March 3" may be a verb and a number) or a time of
	// day in UTC ("14:52 UTC").
	namedDate = regexp.MustCompile(`\b\d{1,2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?\b|\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.? \d{1,2},? \d{4}\b|\b\d{1,2}:\d{2}(:\d{2})?( ?[–-] ?\d{1,2}:\d{2}(:\d{2})?)? UTC\b`)
	hexWord   = regexp.MustCompile(`\b[0-9a-f]{7,40}\b`)
)

// notCommits are words of hexadecimal digits that name something other
// than a commit.
var notCommits = []string{"ed25519"}

// datedNarrative returns what makes a prose paragraph narrate a run: an
// ISO date, a date with its month's name, a time of day in UTC, or a word of 7 to 40 hexadecimal digits holding both a digit
// and a letter (a commit). It returns "" for a paragraph that does not.
func datedNarrative(p string) string {
	if d := isoDate.FindString(p); d != "" {
		return d
	}
	if d := namedDate.FindString(p); d != "" {
		return d
	}
	for _, w := range hexWord.FindAllString(p, -1) {
		if strings.ContainsAny(w, "0123456789") && strings.ContainsAny(w, "abcdef") && !slices.Contains(notCommits, w) {
			return w
		}
	}
	return ""
}

func TestDatedNarrative(t *testing.T) {
	md := "# Figures\n\nAt the head of the round (90e54e0), the figures moved.\n\n" +
		"Measured on 2026-11-28:\n\n" +
		"| figure | value | date |\n|---|---|---|\n| one-way 8 B | 8.8 µs | 2026-11-25 |\n\n" +
		"```\n$ git log 90e54e0 --since 2026-11-01\n```\n\n" +
		"Keys are ed25519; the seed is 314159265; the build deadbee has no digit.\n\n" +
		"On 28 November the table moved.\n\nRun at 14:52–14:54 UTC on machine B.\n\n" +
		"Migrations fall between 10:00 and 19:00; March 3 tasks along the ring.\n\n" +
		"Taken Nov 28, 2026.\n"
	var got []string
	for _, p := range proseParagraphs(md) {
		if w := datedNarrative(p); w != "" {
			got = append(got, w)
		}
	}
	if want := []string{"90e54e0", "2026-11-28", "28 November", "14:52–14:54 UTC", "Nov 28, 2026"}; !slices.Equal(got, want) {
		t.Errorf("dated paragraphs found %q, want %q", got, want)
	}
}

var (
	// A figure with its unit: a number or a range of numbers followed by a
	// unit of time, size, rate or ratio ("8.8 µs", "6.4–7.5 KiB", "12%").
	measuredFigure = regexp.MustCompile(`(?:^|[^\w.])\d[\d.,]*(?: ?[–-] ?\d[\d.,]*)? ?(?:ns|µs|ms|s|KiB|MiB|GiB|kB|MB|GB|MB/s|GB/s|%|×|k/s|M/s|msg/s)(?:[^\w/]|$)`)
	// What a measurement carries: the machine it ran on ("machine A"), the
	// load it ran at ("load 7–15", "load average 3–35") or its verdict
	// against a target ("Met.", "Missed there", "(met, on the medians)").
	measurementMark = regexp.MustCompile(`\b[Mm]achine [A-Z]\b|\bload (?:average )?\d|\b(?:Met|Missed)\b|\((?:met|missed)\b`)
)

// measuredProse returns what makes a prose paragraph report a measurement:
// a figure with its unit together with the machine, the load or a verdict
// against a target. Those are a table row's columns; a figure alone (a
// default, a limit, a parameter) is not a measurement and passes, and so
// does a machine or a verdict named without a figure. It returns "" for a
// paragraph that reports none.
func measuredProse(p string) string {
	f := measuredFigure.FindString(p)
	m := measurementMark.FindString(p)
	if f == "" || m == "" {
		return ""
	}
	return strings.TrimLeft(f, " (") + " … " + m
}

func TestMeasuredProse(t *testing.T) {
	for _, c := range []struct {
		p    string
		want bool
	}{
		{"- **Memory per idle task** ≤ 16 KiB: 6.4–7.5 KiB on its host. Met.", true},
		{"Spawning takes 4.3–5.0 s at load 7–15.", true},
		{"quic-go is CPU-bound at 0.3–0.4 GB/s on one connection on machine A.", true},
		{"Target: every kernel faster (met, on the medians) by 1.2×.", true},
		{"Runs on a loaded machine (load average 3–35) scatter by 13%.", true},
		{"- **Flow control**: at most 8 MiB per receiver (`Window`) may be unacknowledged.", false},
		{"The defaults are δT = 3 min and a heartbeat of 1 s; missed heartbeats count.", false},
		{"On machine A (see Machines), memory touched again faults in slowly.", false},
		{"The default list takes 10–20 s; see the table for machine and date.", false},
		{"A task that missed its checkpoint is retried; sizes 1 MiB and 64 MiB.", false},
	} {
		if got := measuredProse(c.p); (got != "") != c.want {
			t.Errorf("measuredProse(%q) = %q, want a measurement: %v", c.p, got, c.want)
		}
	}
}

// TestReadmesAreReference checks that no README narrates: no prose
// paragraph cites a commit or a date, nor reports a measurement (a figure
// with the machine, the load or the verdict it was measured with). A
// figure's command, machine and date go in a table row beside it; the
// story of how it moved goes in the commit message that moved it.
func TestReadmesAreReference(t *testing.T) {
	checked := 0
	for _, rel := range readmes(t) {
		checked++
		for _, p := range proseParagraphs(readRepo(t, rel)) {
			short := p
			if r := []rune(p); len(r) > 100 {
				short = string(r[:100]) + "…"
			}
			if w := datedNarrative(p); w != "" {
				t.Errorf("%s: a prose paragraph cites %q (put dated figures in a table row): %s", rel, w, short)
			}
			if w := measuredProse(p); w != "" {
				t.Errorf("%s: a prose paragraph reports a measurement, %q (put it in a table row with its command, machine and date): %s", rel, w, short)
			}
		}
	}
	if checked < 10 {
		t.Errorf("only %d READMEs checked", checked)
	}
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// slug is the anchor GitHub gives a heading.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors returns the slugs of a markdown file's headings.
func anchors(md string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced && strings.HasPrefix(line, "#") {
			out = append(out, slug(strings.TrimLeft(line, "#")))
		}
	}
	return out
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Dynamic-SED's cost when nothing migrates (`dpvm bench npb-load --only-idle`)": "dynamic-seds-cost-when-nothing-migrates-dpvm-bench-npb-load---only-idle",
		"Job checkpoints on disk (`ckpt/jobset`)":                                      "job-checkpoints-on-disk-ckptjobset",
		"dpvm beside PVM 3.4 and Open MPI":                                             "dpvm-beside-pvm-34-and-open-mpi",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestReadmeLinks checks that every local link of every README points at
// a file or directory that exists and, with a #fragment into a markdown
// file, at one of its headings.
func TestReadmeLinks(t *testing.T) {
	for _, rel := range readmes(t) {
		md := readRepo(t, rel)
		_, prose := mdParts(md)
		for _, p := range prose {
			for _, m := range mdLink.FindAllStringSubmatch(p, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, frag, _ := strings.Cut(target, "#")
				dest := rel
				if file != "" {
					dest = filepath.Join(filepath.Dir(rel), file)
				}
				if slices.Contains(pendingPaths, filepath.Clean(dest)) {
					continue
				}
				if _, err := os.Stat(filepath.Join(repoRoot, dest)); err != nil {
					t.Errorf("%s: link %s: %v", rel, target, err)
					continue
				}
				if frag != "" && strings.HasSuffix(dest, ".md") && !slices.Contains(anchors(readRepo(t, dest)), frag) {
					t.Errorf("%s: link %s: %s has no heading #%s", rel, target, dest, frag)
				}
			}
		}
	}
}

var printsClaim = regexp.MustCompile("`go run \\./cmd/dpvm ([^`]+)` prints `([^`]+)`")

// TestReadmePrints runs each command the README says prints something, as
// "`go run ./cmd/dpvm ARGS` prints `TEXT`", and checks it does.
func TestReadmePrints(t *testing.T) {
	_, prose := mdParts(readRepo(t, "README.md"))
	n := 0
	for _, p := range prose {
		for _, m := range printsClaim.FindAllStringSubmatch(p, -1) {
			n++
			words, err := splitWords("dpvm " + m[1])
			if err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			if code := Run(words, &out, &errOut); code != 0 || !strings.Contains(out.String(), m[2]) {
				t.Errorf("%s: exit %d, printed %q (stderr %q), want %q", m[1], code, out.String(), errOut.String(), m[2])
			}
		}
	}
	if n == 0 {
		t.Error("the README claims no output of any command")
	}
}

// TestReadmeFirstRun runs the first command of the README's set-up (the
// first line of its first sh block) and checks that it prints the block
// the README shows after "prints:".
func TestReadmeFirstRun(t *testing.T) {
	md := readRepo(t, "README.md")
	_, after, ok := strings.Cut(md, "```sh\n")
	if !ok {
		t.Fatal("the README has no sh block")
	}
	first, _, _ := strings.Cut(after, "\n")
	words, err := splitWords(strings.TrimPrefix(first, "go run ./cmd/"))
	if err != nil || len(words) < 2 || words[0] != "dpvm" {
		t.Fatalf("the README's first command %q is not a dpvm command (%v)", first, err)
	}
	_, shown, ok := strings.Cut(after, "prints:\n\n```\n")
	if !ok {
		t.Fatal("the README shows no output after \"prints:\"")
	}
	shown, _, _ = strings.Cut(shown, "```")
	var out, errOut bytes.Buffer
	if code := Run(words, &out, &errOut); code != 0 || out.String() != shown {
		t.Errorf("%s: exit %d, printed\n%s(stderr %q)\nthe README shows\n%s", first, code, out.String(), errOut.String(), shown)
	}
}

// ownModuleTasks is the task package the README's own-module recipe
// imports as example.com/mysolver/tasks: a root task that spawns a child
// on host h2 and prints the host it ran on.
const ownModuleTasks = `package tasks

import (
	"flag"

	"github.com/dpvm/dpvm/task"
)

type Mine struct{ Child bool }

func init() {
	task.Register("mysolver.mine", &Mine{})
	task.RegisterProgram(task.Program{
		Name:    "mine",
		Summary: "a child on h2 says where it ran",
		Setup: func(*flag.FlagSet) func([]string) (task.Task, error) {
			return func([]string) (task.Task, error) { return &Mine{}, nil }
		},
	})
}

func (m *Mine) Run(c *task.Ctx) error {
	if m.Child {
		return c.Send(c.Parent(), 1, c.HostName())
	}
	if _, err := c.Spawn(&Mine{Child: true}, 1, task.OnHost("h2")); err != nil {
		return err
	}
	var host string
	if _, err := c.Recv(task.AnyTask, 1, &host); err != nil {
		return err
	}
	c.Printf("child ran on %s", host)
	return nil
}
`

// fencedAfter returns the fenced code block of md whose first line is
// first, without that line.
func fencedAfter(t *testing.T, md, first string) string {
	t.Helper()
	_, after, ok := strings.Cut(md, "```\n"+first+"\n")
	if !ok {
		_, after, ok = strings.Cut(md, "```go\n"+first+"\n")
	}
	if !ok {
		t.Fatalf("the README has no code block starting %q", first)
	}
	block, _, _ := strings.Cut(after, "```")
	return block
}

// TestReadmeOwnModule builds the README's own-module recipe (its go.mod
// and main.go, with the replace line pointing at this checkout) in a
// temporary module outside the tree, and runs its program on an embedded
// 2-host virtual machine.
func TestReadmeOwnModule(t *testing.T) {
	md := readRepo(t, "README.md")
	gomod := fencedAfter(t, md, "// go.mod")
	mainGo := fencedAfter(t, md, "// main.go")
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(gomod, "/path/to/dpvm") {
		t.Fatal("the README's go.mod has no replace line to /path/to/dpvm")
	}
	gomod = strings.ReplaceAll(gomod, "/path/to/dpvm", root)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":         gomod,
		"go.sum":         string(sum),
		"main.go":        mainGo,
		"tasks/tasks.go": ownModuleTasks,
	} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "dpvm")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = dir
	// The module cache holds every dependency (CI runs go mod download);
	// -mod=mod lets go add their requirements, as go mod tidy would.
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of the README's own module: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "run", "--hosts", "2", "mine").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "child ran on h2") {
		t.Fatalf("dpvm run --hosts 2 mine: %v\n%s", err, out)
	}
}
