package daemon

import (
	"context"
	"flag"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/dpvm/dpvm/examples" // the programs run here
	"github.com/dpvm/dpvm/task"
)

// buildProgram returns the root task of a registered program.
func buildProgram(t *testing.T, name string, args ...string) task.Task {
	t.Helper()
	p, ok := task.LookupProgram(name)
	if !ok {
		t.Fatalf("program %q is not registered", name)
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	build := p.Setup(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	root, err := build(fs.Args())
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// runJobs runs copies jobs of the program at once on one daemon and
// returns their output lines, with TIDs and timings blanked out, sorted.
func runJobs(t *testing.T, copies int, name string, args ...string) []string {
	t.Helper()
	var out syncBuffer
	d := New(Config{Output: &out})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Halt(ctx)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var roots []task.TID
	for range copies {
		_, root, err := d.StartJob(ctx, buildProgram(t, name, args...), JobOptions{})
		if err != nil {
			t.Fatalf("%s: start job: %v", name, err)
		}
		roots = append(roots, root)
	}
	for _, r := range roots {
		info, err := d.Wait(ctx, r)
		if err != nil {
			t.Fatalf("%s: wait for %v: %v", name, r, err)
		}
		if err := exitError(info); err != nil {
			t.Errorf("%s: %v\noutput:\n%s", name, err, out.String())
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for i, l := range lines {
		l = tidPattern.ReplaceAllString(l, "T")
		lines[i] = timePattern.ReplaceAllString(l, "X µs")
	}
	slices.Sort(lines)
	return lines
}

var (
	tidPattern  = regexp.MustCompile(`t\d+:\d+`)
	timePattern = regexp.MustCompile(`[0-9.]+ µs`)
)

// TestExamplesTwiceAtOnce runs two copies of each example at once on one
// virtual machine: each copy must print what a copy running alone prints.
// Group names are scoped to their job, so the copies' groups, reductions
// and barriers never mix.
func TestExamplesTwiceAtOnce(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"hello", []string{"-n", "5"}},
		{"pingpong", []string{"-n", "50", "-size", "64"}},
		{"ring", []string{"-n", "5", "-laps", "3"}},
		{"pi", []string{"-workers", "3", "-samples", "20000"}},
		{"squares", []string{"-n", "2000", "-workers", "4"}},
		{"watch", []string{"-workers", "3"}},
		{"jacobi", []string{"-n", "20", "-workers", "4", "-iters", "200"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			alone := runJobs(t, 1, c.name, c.args...)
			var want []string
			for _, l := range alone {
				want = append(want, l, l)
			}
			if got := runJobs(t, 2, c.name, c.args...); !slices.Equal(got, want) {
				t.Errorf("two copies at once printed\n%s\nwant each line of a lone run twice:\n%s",
					strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
