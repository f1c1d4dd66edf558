package examples

import (
	"bytes"
	"context"
	"flag"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/task"
)

// runMoving runs a program on an embedded virtual machine of three
// daemons while a mover keeps migrating its running tasks to other hosts
// (seeded choices, both modes), and returns the output and the number of
// moves made.
func runMoving(t *testing.T, seed uint64, name string, args ...string) (string, int) {
	t.Helper()
	p, ok := task.LookupProgram(name)
	if !ok {
		t.Fatalf("no program %q", name)
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
	}
	var serial int64
	for i := range int64(6000000) {
		if PiSample(i) {
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
		// Ring and pingpong tasks wait in RecvSafe most of the time, so the
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
		root := &Stream{Messages: 5000, Moves: 12, Via: via}
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		err := daemon.Run(ctx, root, daemon.RunOptions{Hosts: 3, Output: &out, SharedDir: t.TempDir()})
		cancel()
		if err != nil || !strings.Contains(out.String(), "received 5000, lost 0, duplicated 0, out of order 0; moves made 12 of 12") {
			t.Errorf("stream --via %s: %v\n%s", via, err, out.String())
		}
	}
}
