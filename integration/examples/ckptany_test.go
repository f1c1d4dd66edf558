package examples_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/examples"
	"github.com/dpvm/dpvm/examples/pvm"
	"github.com/dpvm/dpvm/task"
)

// ckRun is what runCheckpointed saw: the output, the root's TID, the
// checkpoint rounds that completed and the errors of those that failed.
type ckRun struct {
	out    string
	root   task.TID
	rounds int
	errs   []error
}

// runCheckpointed runs a program as a job on an embedded virtual machine
// of three daemons while a seeded loop takes job checkpoints one after
// another from the job's start, a random pause of up to 2 ms between
// them, until the job ends.
// It fails the test when the job fails.
func runCheckpointed(t *testing.T, seed uint64, name string, args ...string) ckRun {
	t.Helper()
	root := buildRoot(t, name, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var out lockedBuffer
	vm, err := daemon.StartLocalVM(ctx, 3, daemon.Config{Output: &out, SharedDir: t.TempDir(), MoveTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Halt(10 * time.Second)
	m := vm.Master()
	job, rootTID, err := m.StartJob(ctx, root, daemon.JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	res := make(chan ckRun, 1)
	go func() {
		rng := rand.New(rand.NewPCG(seed, 0xc4))
		var r ckRun
		defer func() { res <- r }()
		for first := true; ; first = false {
			if !first {
				select {
				case <-done:
					return
				case <-time.After(time.Duration(rng.IntN(2000)) * time.Microsecond):
				}
			}
			_, err := m.CheckpointJob(ctx, job, "")
			switch {
			case err == nil:
				r.rounds++
			case errors.Is(err, daemon.ErrNoJob):
				return // the job is over
			default:
				r.errs = append(r.errs, err)
			}
		}
	}()
	info, err := m.WaitJob(ctx, job)
	close(done)
	r := <-res
	r.out, r.root = out.String(), rootTID
	if err != nil {
		t.Fatalf("%s %v: %v\noutput:\n%s", name, args, err, r.out)
	}
	if err := daemon.ExitError(info); err != nil {
		t.Fatalf("%s %v: %v\noutput:\n%s", name, args, err, r.out)
	}
	return r
}

// heldUpBy matches the tasks a failed checkpoint round names as late.
var heldUpBy = regexp.MustCompile(`\[([^\]]*)\] of job \d+ within [^:]+: task reached no safe point in time`)

// gotExpecting is a result line of PVM's master1: what a slave sent and
// what the master expected.
var gotExpecting = regexp.MustCompile(`^I got ([0-9.]+) from \d+; \(expecting ([0-9.]+)\)$`)

// TestEveryExampleCheckpointsAtAnyMoment runs every registered example
// program on three hosts while job checkpoints are taken back to back at
// seeded moments, and checks the output is what the program prints
// undisturbed. Every task waits only at safe points (or for a message a
// running peer is about to send) — NPB's workers of every kernel in the
// team's safe collectives, its root for its workers — so every round
// completes. stream moves its own tasks: a round may find one moving, or
// its root waiting for a move the round holds up.
func TestEveryExampleCheckpointsAtAnyMoment(t *testing.T) {
	var serialPi int64
	for i := range int64(2000000) {
		if examples.PiSample(i) {
			serialPi++
		}
	}
	golden := func(c pvm.Capture) func(t *testing.T, out string) {
		return func(t *testing.T, out string) {
			if got, want := pvm.Normalise(out, false), pvmGolden(t, c); got != want {
				t.Errorf("printed (normalised):\n%s\nPVM printed:\n%s", got, want)
			}
		}
	}
	contains := func(want string) func(t *testing.T, out string) {
		return func(t *testing.T, out string) {
			if !strings.Contains(out, want) {
				t.Errorf("output %q does not contain %q", out, want)
			}
		}
	}
	type example struct {
		args  []string
		check func(t *testing.T, out string)
	}
	cases := map[string]example{
		"pi": {[]string{"-workers", "4", "-samples", "2000000"}, func(t *testing.T, out string) {
			if m := piLine.FindStringSubmatch(out); m == nil || m[3] != strconv.FormatInt(serialPi, 10) {
				t.Errorf("%q, want %d hits", out, serialPi)
			}
		}},
		"ring":     {[]string{"-n", "6", "-laps", "200"}, contains("ring: token made 200 laps around 6 tasks: 1200 hops\n")},
		"pingpong": {[]string{"-n", "5000", "-size", "64"}, contains("pingpong: 5000 round trips of 64 B verified")},
		"hello":    {[]string{"-n", "100"}, contains(": 100 children said hello:")},
		"squares":  {[]string{"-n", "20000", "-workers", "4"}, contains("sum of 20000 squares = 2666466670000\n")},
		"stream":   {[]string{"-messages", "3000", "-moves", "4"}, contains("received 3000, lost 0, duplicated 0, out of order 0;")},
		"watch":    {[]string{"-workers", "3"}, contains("watch: 0 workers lost, 3 stopped\n")},
		"jacobi": {[]string{"-n", "48", "-workers", "4", "-iters", "1000", "-k", "10", "-tol", "0"}, func(t *testing.T, out string) {
			if want := jacobiWant(48, 4, 1000, 10, 0); out != want {
				t.Errorf("%q, want (serial) %q", out, want)
			}
		}},
		"jacobi2d": {[]string{"-n", "32", "-tasks", "4", "-iters", "1000", "-k", "10", "-tol", "0"}, func(t *testing.T, out string) {
			if want := jacobi2DWant(32, 2, 2, 1000, 10, 0); out != want {
				t.Errorf("%q, want (serial) %q", out, want)
			}
		}},
		"pvm.master1": {nil, func(t *testing.T, out string) {
			n := 0
			for _, l := range strings.Split(pvm.Normalise(out, false), "\n") {
				if m := gotExpecting.FindStringSubmatch(l); m != nil {
					n++
					if m[1] != m[2] {
						t.Errorf("master1: %q", l)
					}
				}
			}
			if n != 9 { // three slaves per host
				t.Errorf("master1 printed %d results, want 9:\n%s", n, out)
			}
		}},
	}
	for _, k := range []string{"ep", "cg", "mg", "ft", "is"} {
		cases["npb-"+k] = example{[]string{"-class", "S", "-np", "4"}, contains("SUCCESSFUL")}
	}
	for _, c := range pvm.Captures {
		if _, ok := cases[c.Program]; !ok {
			cases[c.Program] = example{c.Args, golden(c)}
		}
	}
	for i, p := range task.Programs() {
		c, ok := cases[p.Name]
		if !ok {
			t.Errorf("program %q has no case here", p.Name)
			continue
		}
		t.Run(p.Name, func(t *testing.T) {
			r := runCheckpointed(t, uint64(i), p.Name, c.args...)
			c.check(t, r.out)
			t.Logf("%s: %d checkpoints, %d rounds failed", p.Name, r.rounds, len(r.errs))
			for _, err := range r.errs {
				late := heldUpBy.FindStringSubmatch(err.Error())
				switch {
				case p.Name == "stream" && (strings.Contains(err.Error(), "task is already moving") ||
					late != nil && slices.Equal(strings.Fields(late[1]), []string{r.root.String()})):
					// The stream program moves its own tasks: a round
					// that finds one moving is refused, and one that
					// holds up a move finds the root waiting for it.
				default:
					t.Errorf("checkpoint round failed: %v", err)
				}
			}
		})
	}
}
