package examples_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/examples"
	"github.com/dpvm/dpvm/task"
)

// jacobiWant is the line the jacobi program prints, computed by a serial
// loop: the distributed runs must match it to the last bit.
func jacobiWant(n, workers, iters, k int, tol float64) string {
	it, diff, sum := examples.JacobiSerial(n, iters, k, tol)
	return fmt.Sprintf("jacobi: %d×%d in %d strips, %d iterations, last change %.3g, sum %.17g\n", n, n, workers, it, diff, sum)
}

func TestJacobi(t *testing.T) {
	for _, c := range []struct{ n, w, iters, k int }{{8, 1, 50, 5}, {30, 3, 5000, 10}, {17, 4, 300, 7}, {5, 5, 40, 1}} {
		out := runProgram(t, "jacobi", "-n", fmt.Sprint(c.n), "-workers", fmt.Sprint(c.w),
			"-iters", fmt.Sprint(c.iters), "-k", fmt.Sprint(c.k), "-tol", "1e-4")
		if want := jacobiWant(c.n, c.w, c.iters, c.k, 1e-4); out != want {
			t.Errorf("jacobi %+v:\n%q, want (serial)\n%q", c, out, want)
		}
	}
}

// TestJacobiUnderMigration moves the strips among three hosts while they
// run: the result is still bit-identical to the serial loop.
func TestJacobiUnderMigration(t *testing.T) {
	out, made := runMoving(t, 3, "jacobi", "-n", "32", "-workers", "4", "-iters", "1500", "-k", "10", "-tol", "0")
	if want := jacobiWant(32, 4, 1500, 10, 0); out != want {
		t.Errorf("jacobi under migration:\n%q, want (serial)\n%q", out, want)
	}
	t.Logf("%d moves", made)
	if made == 0 {
		t.Error("no strip was moved while it ran")
	}
}

// lockedBuffer is a log that several daemons write at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestJacobiCheckpointsEveryPeriod runs jacobi on two hosts with a job
// checkpoint every millisecond, a few iterations: every strip is at a
// safe point each iteration or waits in a collective, which is one, so no
// checkpoint fails, and the result is the serial loop's.
func TestJacobiCheckpointsEveryPeriod(t *testing.T) {
	var out bytes.Buffer
	var logs lockedBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	root := buildRoot(t, "jacobi", "-n", "48", "-workers", "4", "-iters", "2000", "-k", "10", "-tol", "0")
	err := daemon.Run(ctx, root, daemon.RunOptions{Hosts: 2, Output: &out,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Job: daemon.JobOptions{CheckpointEvery: time.Millisecond}})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if want := jacobiWant(48, 4, 2000, 10, 0); out.String() != want {
		t.Errorf("jacobi with checkpoints:\n%q, want (serial)\n%q", out.String(), want)
	}
	ok, failed := strings.Count(logs.String(), "job checkpointed"), strings.Count(logs.String(), "job checkpoint failed")
	t.Logf("%d checkpoints, %d failed", ok, failed)
	if ok == 0 || failed > 0 {
		t.Errorf("%d checkpoints taken, %d failed:\n%s", ok, failed, logs.String())
	}
}

// buildRoot builds a registered program's root task from its arguments.
func buildRoot(t *testing.T, name string, args ...string) task.Task {
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
