package move

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/internal/transcript"
	"github.com/dpvm/dpvm/task"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the transcripts under testdata/ with what the machine does now")

// testTimeouts are the timeouts the transcripts run with.
var testTimeouts = Timeouts{Step: time.Second, Suspend: 2 * time.Second, Transfer: 5 * time.Second, Retry: 500 * time.Millisecond}

// TestTranscripts replays the scripted scenarios of testdata/*.txt. A
// script is a sequence of blocks: a command, a line "----", and the
// transcript it produces (the actions Step returns, rejections, states),
// then a blank line. Commands:
//
//	start <tid> <from> <to> <epoch> [job] a move
//	adopt <move> <tid> <from> <to> <epoch> <at-dest>
//	result <move> <step> <outcome> [error text]
//	lost <host>                          a host deleted
//	drop <tid> <cause…>                  the task's job rolls back
//	drop-job <job> <cause…>              the job's tasks' moves end
//	hold <job> | release <job>           a kill of the job starts, ends
//	report <host> [<move> <tid> <dest> <epoch>]… [running <tid>…]
//	                                     a host registers again with a
//	                                     recovered master
//	resolve <host>…                      the hosts back
//	tick <duration>                      advance the clock and tick
//	observe <epoch> | next-epoch         the epoch clock
//	moves                                the moves under way
//
// go test ./routing/move -run TestTranscripts -rewrite updates them.
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			m := New(0, 0)
			now := time.Unix(0, 0).UTC()
			transcript.Run(t, f, *rewrite, func(cmd string) string { return runCommand(t, m, &now, cmd) })
		})
	}
}

func runCommand(t *testing.T, m *Machine, now *time.Time, cmd string) string {
	f := strings.Fields(cmd)
	var lines []string
	var ev Event
	switch f[0] {
	case "start":
		ev = Event{Kind: Start, Spec: Spec{TID: tid(t, f[1]), From: host(t, f[2]), To: host(t, f[3]), Epoch: num(t, f[4]), Timeouts: testTimeouts}}
		if len(f) > 5 {
			ev.Spec.Job = num(t, f[5])
		}
	case "adopt":
		ev = Event{Kind: Adopt, Move: ID(num(t, strings.TrimPrefix(f[1], "m"))), AtDest: f[6] == "true",
			Spec: Spec{TID: tid(t, f[2]), From: host(t, f[3]), To: host(t, f[4]), Epoch: num(t, f[5]), Timeouts: testTimeouts}}
	case "result":
		var cause error
		if len(f) > 4 {
			cause = errors.New(strings.Join(f[4:], " "))
		}
		ev = Event{Kind: Result, Move: ID(num(t, strings.TrimPrefix(f[1], "m"))), Step: parseStep(t, f[2]), Outcome: parseOutcome(t, f[3]), Err: cause}
	case "lost":
		ev = Event{Kind: HostLost, Host: host(t, f[1])}
	case "drop":
		ev = Event{Kind: Drop, TID: tid(t, f[1]), Err: errors.New(strings.Join(f[2:], " "))}
	case "drop-job":
		ev = Event{Kind: DropJob, Job: num(t, f[1]), Err: errors.New(strings.Join(f[2:], " "))}
	case "hold":
		ev = Event{Kind: Hold, Job: num(t, f[1])}
	case "release":
		ev = Event{Kind: Release, Job: num(t, f[1])}
	case "report":
		ev = Event{Kind: Report, Host: host(t, f[1])}
		rest := f[2:]
		for len(rest) >= 4 && rest[0] != "running" {
			ev.Orphans = append(ev.Orphans, Orphan{Move: ID(num(t, strings.TrimPrefix(rest[0], "m"))), TID: tid(t, rest[1]),
				Dest: routing.Route{Host: host(t, rest[2]), Epoch: num(t, rest[3])}})
			rest = rest[4:]
		}
		if len(rest) > 0 && rest[0] == "running" {
			for _, x := range rest[1:] {
				ev.Running = append(ev.Running, tid(t, x))
			}
		} else if len(rest) > 0 {
			t.Fatalf("report: cannot parse %q", rest)
		}
	case "resolve":
		ev = Event{Kind: Resolve, Spec: Spec{Timeouts: testTimeouts}}
		for _, x := range f[1:] {
			ev.Hosts = append(ev.Hosts, host(t, x))
		}
	case "tick":
		d, err := time.ParseDuration(f[1])
		if err != nil {
			t.Fatal(err)
		}
		*now = now.Add(d)
		ev = Event{Kind: Tick}
	case "observe":
		m.Observe(num(t, f[1]))
		lines = append(lines, fmt.Sprintf("epoch %d", m.Epoch()))
	case "next-epoch":
		lines = append(lines, fmt.Sprintf("epoch %d", m.NextEpoch()))
	case "moves":
		for _, mv := range m.Moves() {
			lines = append(lines, fmt.Sprintf("%v %v %v→%v e%d back e%d %v", mv.ID, mv.TID, mv.From, mv.To, mv.Epoch, mv.Back, mv.State))
		}
	default:
		t.Fatalf("unknown command %q", cmd)
	}
	if ev.Kind != 0 {
		for _, a := range m.Step(*now, ev) {
			lines = append(lines, a.String())
		}
	}
	if len(lines) == 0 {
		return "ok"
	}
	return strings.Join(lines, "\n")
}

func tid(t *testing.T, s string) task.TID {
	x, err := task.ParseTID(s)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func host(t *testing.T, s string) task.HostID {
	h, err := task.ParseHostID(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func num(t *testing.T, s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func parseStep(t *testing.T, s string) Step {
	for x := StepPrepare; x <= StepResume; x++ {
		if x.String() == s {
			return x
		}
	}
	t.Fatalf("unknown step %q", s)
	return 0
}

func parseOutcome(t *testing.T, s string) Outcome {
	for x := OK; x <= Installed; x++ {
		if x.String() == s {
			return x
		}
	}
	t.Fatalf("unknown outcome %q", s)
	return 0
}
