package move

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// TestHostTranscripts replays the scripted scenarios of
// testdata/host/*.txt against the host half of moves, in the format of
// TestTranscripts. Commands:
//
//	task <tid> [running] [type=T] [job=N] [arrived=mN] [route=E] [restoring] [quiet]
//	                       what the daemon's other parts know of the task from now on
//	<event> <tid> <move> [route=hN] [epoch=E] [peer=hN] [job=N] [type=T] [back]
//	                       a HostEvent (prepare, suspend, safe-point, send, sent,
//	                       stream, restore, install, commit, resume, cancel, lost, gone)
//	drop-job <job>         the job rolls back
//	tick <duration>        advance the clock
//	state                  departures, arrivals and floors
//
// go test ./routing/move -run TestHostTranscripts -rewrite updates them.
func TestHostTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/host/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			hs := &hostScript{t: t, h: NewHost(), now: time.Unix(0, 0).UTC(), local: map[task.TID]Local{}}
			runScript(t, f, hs.run)
		})
	}
}

type hostScript struct {
	t     *testing.T
	h     *Host
	now   time.Time
	local map[task.TID]Local
	tids  map[task.TID]bool // every task named, for state
}

func (s *hostScript) run(cmd string) string {
	t := s.t
	f := strings.Fields(cmd)
	if s.tids == nil {
		s.tids = map[task.TID]bool{}
	}
	switch f[0] {
	case "task":
		id := tid(t, f[1])
		s.tids[id] = true
		var l Local
		for _, kv := range f[2:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "running":
				l.Running = true
			case "restoring":
				l.Restoring = true
			case "quiet":
				l.Quiet = true
			case "type":
				l.Type = v
			case "job":
				l.Job = num(t, v)
			case "arrived":
				l.Arrived = ID(num(t, strings.TrimPrefix(v, "m")))
			case "route":
				l.Route = num(t, v)
			default:
				t.Fatalf("unknown task fact %q", kv)
			}
		}
		s.local[id] = l
		return "ok"
	case "tick":
		d, err := time.ParseDuration(f[1])
		if err != nil {
			t.Fatal(err)
		}
		s.now = s.now.Add(d)
		return "ok"
	case "state":
		return s.state()
	case "drop-job":
		return effects(s.h.Step(s.now, HostEvent{Kind: EvDropJob, Job: num(t, f[1])}))
	}
	k := slices.Index(hostEventNames[:], f[0])
	if k <= 0 {
		t.Fatalf("unknown command %q", cmd)
	}
	e := HostEvent{Kind: HostEventKind(k), TID: tid(t, f[1])}
	s.tids[e.TID] = true
	rest := f[2:]
	if len(rest) > 0 && strings.HasPrefix(rest[0], "m") {
		e.Move = ID(num(t, strings.TrimPrefix(rest[0], "m")))
		rest = rest[1:]
	}
	for _, kv := range rest {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "route":
			e.Route.Host = host(t, v)
		case "epoch":
			e.Route.Epoch = num(t, v)
		case "peer":
			e.Peer = host(t, v)
		case "job":
			e.Job = num(t, v)
		case "type":
			e.Type = v
		case "back":
			e.Back = true
		default:
			t.Fatalf("unknown event field %q", kv)
		}
	}
	e.Local = s.local[e.TID]
	return effects(s.h.Step(s.now, e))
}

func effects(fx []HostEffect) string {
	if len(fx) == 0 {
		return "none"
	}
	lines := make([]string, len(fx))
	for i, x := range fx {
		lines[i] = x.String()
	}
	return strings.Join(lines, "\n")
}

func (s *hostScript) state() string {
	var lines []string
	for _, id := range slices.Sorted(maps.Keys(s.tids)) {
		if d, ok := s.h.Departure(id); ok {
			lines = append(lines, fmt.Sprintf("%v departure %v to %v e%d job %d sending %v over %v since %v",
				id, d.Move, d.Dest.Host, d.Dest.Epoch, d.Job, d.Sending, d.Over, d.Since.Format("15:04:05")))
		}
		if a, ok := s.h.Arrival(id); ok {
			lines = append(lines, fmt.Sprintf("%v arrival %v e%d from %v job %d type %s since %v",
				id, a.Move, a.Epoch, a.From, a.Job, a.Type, a.Since.Format("15:04:05")))
		}
		if f, ok := s.h.Floor(id); ok {
			lines = append(lines, fmt.Sprintf("%v floor %v", id, f))
		}
	}
	deps, arrs := s.h.Counts()
	lines = append(lines, fmt.Sprintf("%d departures, %d arrivals, max move %v", deps, arrs, s.h.MaxMove()))
	return strings.Join(lines, "\n")
}
