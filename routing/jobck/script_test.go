package jobck

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

var update = flag.Bool("update", false, "rewrite the transcripts under testdata")

// base is the time 0 of transcripts.
var base = time.Unix(1_000_000, 0)

// script runs transcript commands against a machine. A command is a word
// and key=value arguments:
//
//	new job=7 seq=0 min=50ms max=5s factor=3 quiet=1s
//	checkpoint t=0 hosts=1,2,3
//	paused t=1ms host=1 every=700ms err=text round=prev
//	quiet t=2ms host=1 pending=0 running=0 tasks=2
//	written host=1 tasks=2
//	committed err=text
//	lost t=3ms host=2 hosts=1,2,3
//	killed host=1
//	restored err=text
//	tick t=5ms
//	ended
//
// round=prev answers for the newest round that is not the current one (a
// late reply of an abandoned round).
type script struct {
	m    *Machine
	now  time.Time
	last Round // the round seen before seen
	seen Round // the newest round seen
}

// note records the rounds an answer shows.
func (s *script) note(r Round) {
	if r.Try > s.seen.Try {
		s.last, s.seen = s.seen, r
	}
}

// prev is the newest round that is not the current one.
func (s *script) prev() Round {
	if s.m.Round() == s.seen {
		return s.last
	}
	return s.seen
}

func (s *script) run(line string) (string, error) {
	f := strings.Fields(line)
	args := map[string]string{}
	for _, kv := range f[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return "", fmt.Errorf("argument %q: want key=value", kv)
		}
		args[k] = v
	}
	dur := func(k string) time.Duration {
		d, _ := time.ParseDuration(args[k])
		return d
	}
	num := func(k string) int {
		n, _ := strconv.Atoi(args[k])
		return n
	}
	hosts := func(k string) []task.HostID {
		var hs []task.HostID
		for _, x := range strings.Split(args[k], ",") {
			if n, err := strconv.Atoi(x); err == nil {
				hs = append(hs, task.HostID(n))
			}
		}
		return hs
	}
	if t, ok := args["t"]; ok {
		d, err := time.ParseDuration(t)
		if err != nil && t != "0" {
			return "", err
		}
		s.now = base.Add(d)
	}
	if f[0] == "new" {
		s.m = New(uint64(num("job")), uint64(num("seq")), Config{MinPause: dur("min"), MaxPause: dur("max"), QuietTimeout: dur("quiet"), Factor: float64(num("factor"))})
		return s.status(), nil
	}
	ev := Event{Now: s.now, Round: s.m.Round(), Host: task.HostID(num("host")), Hosts: hosts("hosts"),
		SafeEvery: dur("every"), Pending: num("pending"), Running: num("running"), Tasks: num("tasks")}
	if args["round"] == "prev" {
		ev.Round = s.prev()
	}
	if e := args["err"]; e != "" {
		ev.Err = errors.New(e)
	}
	kinds := map[string]EventKind{"checkpoint": EvCheckpoint, "paused": EvPaused, "quiet": EvQuiet, "written": EvWritten,
		"committed": EvCommitted, "lost": EvHostLost, "killed": EvKilled, "restored": EvRestored, "tick": EvTick, "ended": EvEnded}
	k, ok := kinds[f[0]]
	if !ok {
		return "", fmt.Errorf("unknown command %q", f[0])
	}
	ev.Kind = k
	acts, err := s.m.Step(ev)
	for _, a := range acts {
		s.note(a.Round)
	}
	s.note(s.m.Round())
	var b strings.Builder
	if err != nil {
		fmt.Fprintf(&b, "refused: %v\n", err)
	}
	for _, a := range acts {
		fmt.Fprintf(&b, "%v\n", a)
	}
	b.WriteString(s.status())
	return b.String(), nil
}

func (s *script) status() string {
	return fmt.Sprintf("state=%v seq=%d broken=%v budget=%v", s.m.State(), s.m.Seq(), s.m.Broken(), s.m.Budget())
}

// TestTranscripts replays testdata/*.txt: each command line is followed by
// the machine's answer, lines starting with "→ ". Run with -update to
// rewrite the answers.
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			s := &script{}
			for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
				if strings.HasPrefix(line, "→ ") {
					continue
				}
				out.WriteString(line + "\n")
				if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
					continue
				}
				got, err := s.run(line)
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				for _, l := range strings.Split(got, "\n") {
					out.WriteString("→ " + l + "\n")
				}
			}
			if *update {
				if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if out.String() != string(b) {
				t.Errorf("transcript differs (run with -update and review the diff):\n%s", out.String())
			}
		})
	}
}
