package cli

import (
	"flag"
	"strings"
	"testing"

	"github.com/dpvm/dpvm/task"
)

// jobEndRoot spawns one jobEndChild of the given Mode and tells it to go
// on, then returns at once; with Kill it asks that its job's remaining
// tasks be killed when it returns (task.JobEnder).
type jobEndRoot struct {
	Mode string
	Kill bool
}

// jobEndChild waits for its parent's word, then exits: "ok" cleanly after
// a line of output, "fail" with status 2; "stay" never hears a word.
type jobEndChild struct{ Mode string }

func init() {
	task.Register("cli.test.jobend", &jobEndRoot{})
	task.Register("cli.test.jobchild", &jobEndChild{})
	task.RegisterProgram(task.Program{
		Name:    "test-jobend",
		Summary: "a root that returns while its child runs (tests only)",
		Setup: func(fs *flag.FlagSet) func([]string) (task.Task, error) {
			mode := fs.String("child", "ok", "ok, fail or stay")
			kill := fs.Bool("kill", false, "kill the job's other tasks when the root returns")
			return func([]string) (task.Task, error) { return &jobEndRoot{Mode: *mode, Kill: *kill}, nil }
		},
	})
}

func (r *jobEndRoot) JobEnd() task.JobEnd {
	if r.Kill {
		return task.KillTasks
	}
	return task.WaitForTasks
}

func (r *jobEndRoot) Run(c *task.Ctx) error {
	tids, err := c.Spawn(&jobEndChild{Mode: r.Mode}, 1)
	if err != nil {
		return err
	}
	if r.Mode != "stay" {
		return c.Send(tids[0], 1, nil)
	}
	return nil
}

func (ch *jobEndChild) Run(c *task.Ctx) error {
	if ch.Mode == "stay" {
		_, err := c.Recv(c.Parent(), 2, nil, task.Safe())
		return err
	}
	if _, err := c.Recv(c.Parent(), 1, nil, task.Safe()); err != nil {
		return err
	}
	if ch.Mode == "fail" {
		return task.Exit(2)
	}
	c.Printf("child done")
	return nil
}

// TestRunJobEnds: dpvm run waits for the tasks a returning root leaves
// running and exits 0 when they succeed; a child that fails, or one
// killed with the job because the root asked, makes it exit 1 naming the
// task — on one host and on several.
func TestRunJobEnds(t *testing.T) {
	for _, hosts := range []string{"1", "2"} {
		code, out, errOut := dpvm(t, "run", "--hosts", hosts, "test-jobend", "-child", "ok")
		if code != 0 || !strings.Contains(out, "child done") || errOut != "" {
			t.Errorf("--hosts %s, child ok: status %d\nstdout:\n%s\nstderr:\n%s", hosts, code, out, errOut)
		}
		code, out, errOut = dpvm(t, "run", "--hosts", hosts, "test-jobend", "-child", "fail")
		if code != 1 || !strings.Contains(errOut, "(cli.test.jobchild) exited with status 2") {
			t.Errorf("--hosts %s, child fails: status %d\nstdout:\n%s\nstderr:\n%s", hosts, code, out, errOut)
		}
		code, out, errOut = dpvm(t, "run", "--hosts", hosts, "test-jobend", "-child", "stay", "-kill")
		if code != 1 || !strings.Contains(errOut, "(cli.test.jobchild) killed with its job") {
			t.Errorf("--hosts %s, child killed: status %d\nstdout:\n%s\nstderr:\n%s", hosts, code, out, errOut)
		}
	}
}
