package examples

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/task"
)

// runProgram builds a registered program from its command-line arguments
// and runs it on an embedded VM, returning its output.
func runProgram(t *testing.T, name string, args ...string) string {
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
	var out bytes.Buffer
	if err := daemon.Run(context.Background(), root, daemon.RunOptions{Output: &out}); err != nil {
		t.Fatalf("%s %v: %v\noutput:\n%s", name, args, err, out.String())
	}
	return out.String()
}

func TestHello(t *testing.T) {
	out := runProgram(t, "hello", "-n", "6")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 7 || lines[0] != "t1:1: 6 children said hello:" {
		t.Fatalf("output:\n%s", out)
	}
	for i, l := range lines[1:] {
		want := fmt.Sprintf("  hello from t1:%d on h1", i+2)
		if l != want {
			t.Errorf("line %d = %q, want %q", i+1, l, want)
		}
	}
}

func TestPingPong(t *testing.T) {
	for _, size := range []string{"0", "8", "1024", "65536"} {
		out := runProgram(t, "pingpong", "-n", "200", "-size", size)
		if !strings.HasPrefix(out, "pingpong: 200 round trips of "+size+" B verified") {
			t.Errorf("size %s: output %q", size, out)
		}
	}
}

func TestRing(t *testing.T) {
	for _, c := range []struct{ n, laps int }{{1, 1}, {1, 3}, {2, 5}, {7, 4}, {32, 2}} {
		out := runProgram(t, "ring", "-n", strconv.Itoa(c.n), "-laps", strconv.Itoa(c.laps))
		want := fmt.Sprintf("ring: token made %d laps around %d tasks: %d hops\n", c.laps, c.n, c.n*c.laps)
		if out != want {
			t.Errorf("ring %d×%d: %q, want %q", c.n, c.laps, out, want)
		}
	}
}

var piLine = regexp.MustCompile(`^pi: (\d+) samples on (\d+) workers: (\d+) hits, π ≈ ([0-9.]+)`)

// TestPi checks the estimate is close to π and, because the samples form
// one stream split among the workers, identical for any number of workers
// and equal to a serial count.
func TestPi(t *testing.T) {
	const samples = 200_000
	var serial int64
	for i := range int64(samples) {
		if PiSample(i) {
			serial++
		}
	}
	for _, w := range []string{"1", "3", "8"} {
		out := runProgram(t, "pi", "-workers", w, "-samples", strconv.Itoa(samples))
		m := piLine.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("workers %s: output %q", w, out)
		}
		hits, _ := strconv.ParseInt(m[3], 10, 64)
		if hits != serial {
			t.Errorf("workers %s: %d hits, serial count %d", w, hits, serial)
		}
		est, _ := strconv.ParseFloat(m[4], 64)
		if math.Abs(est-math.Pi) > 0.01 {
			t.Errorf("workers %s: estimate %v too far from π", w, est)
		}
	}
}

func TestProgramFlagErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"hello", []string{"-n", "0"}},
		{"pingpong", []string{"-n", "0"}},
		{"ring", []string{"-laps", "0"}},
		{"pi", []string{"-workers", "-1"}},
	} {
		p, _ := task.LookupProgram(c.name)
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		build := p.Setup(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if _, err := build(fs.Args()); err == nil {
			t.Errorf("%s %v accepted", c.name, c.args)
		}
	}
}

func TestSquares(t *testing.T) {
	for _, c := range []struct{ n, w int }{{0, 1}, {100, 4}, {1000, 3}} {
		out := runProgram(t, "squares", "-n", strconv.Itoa(c.n), "-workers", strconv.Itoa(c.w))
		var want int64
		for i := range int64(c.n) {
			want += i * i
		}
		if exp := fmt.Sprintf("sum of %d squares = %d\n", c.n, want); out != exp {
			t.Errorf("squares %d/%d: %q, want %q", c.n, c.w, out, exp)
		}
	}
}

// TestReadmeWalkthrough keeps the README's example program identical to
// examples/squares.go, which the test above runs.
func TestReadmeWalkthrough(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("squares.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, append([]byte("```go\n"), src...)) {
		t.Error("README.md's walk-through differs from examples/squares.go; copy the file into the README")
	}
}

// TestWatchNothingLost runs the watch program expecting no loss: it starts
// and stops its workers.
func TestWatchNothingLost(t *testing.T) {
	out := runProgram(t, "watch", "-workers", "3")
	if !strings.Contains(out, "watch: 3 workers started") || !strings.HasSuffix(out, "watch: 0 workers lost, 3 stopped\n") {
		t.Errorf("output:\n%s", out)
	}
}
