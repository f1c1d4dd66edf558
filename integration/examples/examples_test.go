package examples_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/examples"
	"github.com/dpvm/dpvm/task"
)

// The example programs run on embedded virtual machines, still and while
// their tasks move: tests that need the daemon, which examples never import.

// runProgram builds a registered program from its command-line arguments
// and runs it on an embedded VM, returning its output.
func runProgram(t *testing.T, name string, args ...string) string {
	t.Helper()
	root := buildRoot(t, name, args...)
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
		if examples.PiSample(i) {
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

// TestWatchNothingLost runs the watch program expecting no loss: it starts
// and stops its workers.
func TestWatchNothingLost(t *testing.T) {
	out := runProgram(t, "watch", "-workers", "3")
	if !strings.Contains(out, "watch: 3 workers started") || !strings.HasSuffix(out, "watch: 0 workers lost, 3 stopped\n") {
		t.Errorf("output:\n%s", out)
	}
}

// runMoving runs a program on an embedded virtual machine of three
// daemons while a mover keeps migrating its running tasks to other hosts
// (seeded choices, both modes), and returns the output and the number of
// moves made.
func runMoving(t *testing.T, seed uint64, name string, args ...string) (string, int) {
	t.Helper()
	root := buildRoot(t, name, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var out bytes.Buffer
	vm, err := daemon.StartLocalVM(ctx, 3, daemon.Config{Output: &out, SharedDir: t.TempDir(), MoveTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Halt(10 * time.Second)
	m := vm.Master()
	rootTID, err := m.SpawnTask(root)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	moves := make(chan int, 1)
	go func() { moves <- m.Shuffle(ctx, done, seed, daemon.KeepTask(rootTID)) }()
	info, err := m.Wait(ctx, rootTID)
	close(done)
	made := <-moves
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.ExitError(info); err != nil {
		t.Fatalf("%s %v: %v\noutput:\n%s", name, args, err, out.String())
	}
	return out.String(), made
}

// TestExamplesUnderMigration checks that moving the examples' tasks among
// the hosts while they run leaves every result unchanged.
func TestExamplesUnderMigration(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"pi", []string{"-workers", "4", "-samples", "6000000"}, ""},
		{"ring", []string{"-n", "6", "-laps", "300"}, "ring: token made 300 laps around 6 tasks: 1800 hops\n"},
		{"pingpong", []string{"-n", "20000", "-size", "64"}, "pingpong: 20000 round trips of 64 B verified"},
		{"hello", []string{"-n", "40"}, "t1:1: 40 children said hello:"},
		{"squares", []string{"-n", "20000", "-workers", "4"}, "sum of 20000 squares = 2666466670000\n"},
	}
	var serial int64
	for i := range int64(6000000) {
		if examples.PiSample(i) {
			serial++
		}
	}
	for i, c := range cases {
		out, made := runMoving(t, uint64(i), c.name, c.args...)
		if c.name == "pi" {
			m := piLine.FindStringSubmatch(out)
			if m == nil || m[3] != strconv.FormatInt(serial, 10) {
				t.Errorf("pi under migration: %q, want %d hits", out, serial)
			}
		} else if !strings.HasPrefix(out, c.want) {
			t.Errorf("%s under migration: %q, want %q", c.name, out, c.want)
		}
		t.Logf("%s: %d moves", c.name, made)
		// Ring and pingpong tasks wait in a Recv with task.Safe most of the time, so the
		// mover always gets some; pi's and hello's may finish first on a
		// fast machine.
		if (c.name == "ring" || c.name == "pingpong") && made == 0 {
			t.Errorf("%s: no task was moved while it ran", c.name)
		}
	}
}

// TestStream runs the stream program on three hosts in each mode: every
// message arrives once, in order, through all the moves.
func TestStream(t *testing.T) {
	for _, via := range []string{"direct", "indirect", "mixed"} {
		root := &examples.Stream{Messages: 5000, Moves: 12, Via: via}
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		err := daemon.Run(ctx, root, daemon.RunOptions{Hosts: 3, Output: &out, SharedDir: t.TempDir()})
		cancel()
		if err != nil || !strings.Contains(out.String(), "received 5000, lost 0, duplicated 0, out of order 0; moves made 12 of 12") {
			t.Errorf("stream --via %s: %v\n%s", via, err, out.String())
		}
	}
}
