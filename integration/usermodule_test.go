package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// userProgram is a user's own module: a task package and a main that runs
// the whole dpvm command line with it registered, as the README shows.
var userProgram = map[string]string{
	"go.mod": `module example.com/mysolver

go 1.26.0

require github.com/dpvm/dpvm v0.0.0

replace github.com/dpvm/dpvm => REPO
`,
	"main.go": `package main

import (
	"github.com/dpvm/dpvm/cmd/cli"

	_ "example.com/mysolver/tasks" // registers the program's task types
)

func main() { cli.Main() }
`,
	"tasks/tasks.go": `// Package tasks is a user's parallel program: a root spawns workers, each
// squares its number and sends it back.
package tasks

import (
	"flag"

	"github.com/dpvm/dpvm/task"
)

const tagResult = 1

// Root spawns N workers and adds up their answers.
type Root struct{ N int }

// Worker squares X for its parent.
type Worker struct{ X int }

func init() {
	task.Register("mysolver.root", &Root{})
	task.Register("mysolver.worker", &Worker{})
	task.RegisterProgram(task.Program{
		Name:    "sumsq",
		Summary: "sum of squares by workers",
		Setup: func(fs *flag.FlagSet) func([]string) (task.Task, error) {
			n := fs.Int("n", 10, "workers")
			return func([]string) (task.Task, error) { return &Root{N: *n}, nil }
		},
	})
}

// Run implements task.Task.
func (r *Root) Run(c *task.Ctx) error {
	for i := 1; i <= r.N; i++ {
		if _, err := c.Spawn(&Worker{X: i}, 1); err != nil {
			return err
		}
	}
	sum := 0
	for range r.N {
		var v int
		if _, err := c.Recv(task.AnyTask, tagResult, &v); err != nil {
			return err
		}
		sum += v
	}
	c.Printf("sumsq: %d", sum)
	return nil
}

// Run implements task.Task.
func (w *Worker) Run(c *task.Ctx) error {
	c.Printf("worker %d on %s", w.X, c.HostName())
	return c.Send(c.Parent(), tagResult, w.X*w.X)
}
`,
}

// TestUserModule builds a program in a module of its own outside this tree
// (requiring this module through a replace line), and runs it on a VM of
// two daemons of that binary. A daemon of another build (the stock dpvm,
// which lacks the program's task types) is refused by its master.
func TestUserModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a second binary")
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, text := range userProgram {
		p := filepath.Join(dir, name)
		mkdir(t, filepath.Dir(p))
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(text, "REPO", repo)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "mysolver")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = dir
	// Everything the module needs is in the module cache already; -mod=mod
	// lets go add the requirements, as go mod tidy would.
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of the user's module: %v\n%s", err, out)
	}
	key := filepath.Join(dir, "vm.key")
	if code, _, errOut := dpvm(t, nil, "keygen", "--out", key); code != 0 {
		t.Fatal(errOut)
	}
	common := []string{"--listen", "127.0.0.1:0", "--cluster-key", key}
	master := startCmd(t, "master", exec.Command(bin, append([]string{"daemon", "--master"}, common...)...))
	addr := master.waitFor(listening, true)[1]
	host := startCmd(t, "host", exec.Command(bin, append([]string{"daemon", "--join", addr, "--name", "node2"}, common...)...))
	host.waitFor(listening, true)

	run := startCmd(t, "mysolver run", exec.Command(bin, "run", "--master", addr, "--cluster-key", key, "sumsq", "-n", "6"))
	if code := run.wait(); code != 0 || !strings.Contains(run.out.String(), "sumsq: 91") ||
		!regexp.MustCompile(`worker \d on node2`).MatchString(run.out.String()) {
		t.Fatalf("the user's program on its own binary: %d\n%s\n%s", code, run.out.String(), run.err.String())
	}
	// The stock binary knows other task types: it may not join.
	stock := start(t, "stock dpvm", nil, append([]string{"daemon", "--join", addr, "--name", "node3"}, common...)...)
	if code := stock.wait(); code == 0 || !strings.Contains(stock.err.String(), "another build") {
		t.Fatalf("a daemon of another build joined: %d\n%s", code, stock.err.String())
	}
	halt := startCmd(t, "halt", exec.Command(bin, "halt", "--master", addr, "--cluster-key", key))
	if code := halt.wait(); code != 0 {
		t.Fatalf("halt: %s", halt.err.String())
	}
}
