// Package transcript replays the golden transcripts of routing's pure
// machines (routing/master, routing/move, routing/route, routing/swim):
// scripted commands under a package's testdata whose expected output is
// kept beside each.
//
// A script is a sequence of blocks: a command line, a line "----", the
// output the command produces, and a blank line. Lines starting with '#'
// are comments, kept with the command after them.
package transcript

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
)

// Run replays the script at path, each command through run, and reports
// every output that differs from the script's; with rewrite it writes the
// script again with the outputs run gave instead.
func Run(t testing.TB, path string, rewrite bool, run func(cmd string) string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	line := 0
	var comments []string
	for sc.Scan() {
		line++
		l := sc.Text()
		if l == "" {
			continue
		}
		if strings.HasPrefix(l, "#") {
			comments = append(comments, l)
			continue
		}
		at := line
		if !sc.Scan() || sc.Text() != "----" {
			t.Fatalf("%s:%d: want ---- after the command", path, line)
		}
		line++
		var want []string
		for sc.Scan() {
			line++
			if sc.Text() == "" {
				break
			}
			want = append(want, sc.Text())
		}
		got := run(l)
		if !rewrite && got != strings.Join(want, "\n") {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", path, at, l, got, strings.Join(want, "\n"))
		}
		for _, c := range comments {
			fmt.Fprintln(&out, c)
		}
		comments = nil
		fmt.Fprintf(&out, "%s\n----\n%s\n\n", l, got)
	}
	if rewrite {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
