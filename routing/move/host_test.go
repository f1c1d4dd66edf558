package move

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/internal/transcript"
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
			transcript.Run(t, f, *rewrite, hs.run)
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

// FuzzHost feeds the host half of moves any sequence of events and checks
// its rules after each: a task's floor only rises (until the task is
// gone); no prepare, suspend or capture of a move at or below the floor
// is taken; a departure is made only by a capture and an arrival only by
// a prepare; an install takes the record of its own move; a step is
// answered by its last effect. go test ./routing/move -fuzz FuzzHost.
func FuzzHost(f *testing.F) {
	f.Add([]byte{0, 1, 0, 10, 1, 1, 2, 1, 0, 3, 1, 0, 4, 1, 0, 7, 1, 0})
	f.Add([]byte{0, 1, 0, 10, 1, 1, 2, 1, 0, 9, 1, 0, 1, 1, 0, 8, 1, 0})
	f.Add([]byte{1, 1, 0, 5, 1, 0, 6, 1, 0, 10, 1, 0, 7, 1, 8, 12, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) { _ = runHostFuzz(t, data) })
}

// hostStats counts what a run exercised.
type hostStats struct{ captures, installs, staleRefusals, resumes int }

func runHostFuzz(t *testing.T, data []byte) (st hostStats) {
	h := NewHost()
	now := time.Unix(0, 0)
	tids := []task.TID{task.NewTID(2, 1), task.NewTID(2, 2)}
	for i := 0; i+2 < len(data); i += 3 {
		op, who, flags := data[i], data[i+1], data[i+2]
		tid := tids[int(who)%len(tids)]
		e := HostEvent{Kind: HostEventKind(int(op)%len(hostEventNames[1:]) + 1), TID: tid, Move: ID(who>>1) % 6,
			Route: routing.Route{Host: task.HostID(1 + flags%3), Epoch: uint64(flags>>2) % 4}, Peer: task.HostID(1 + (flags>>4)%3),
			Job: uint64(flags>>6) % 2, Back: flags&1 == 1,
			Local: Local{Running: flags&2 == 2, Arrived: ID(flags>>3) % 6, Route: uint64(flags>>5) % 4, Restoring: flags&128 == 128, Quiet: flags&64 == 64}}
		floor, _ := h.Floor(tid)
		dep, hadDep := h.Departure(tid)
		arr, hadArr := h.Arrival(tid)
		now = now.Add(time.Millisecond)
		fx := h.Step(now, e)
		for _, x := range fx {
			if x.String() == "" {
				t.Fatalf("%v: an effect with no text", e)
			}
		}
		if f, _ := h.Floor(tid); f < floor && e.Kind != EvGone && e.Kind != EvDropJob {
			t.Fatalf("%v: floor of %v went from %v to %v", e, tid, floor, f)
		}
		last := HostEffect{Kind: DoOK}
		if len(fx) > 0 {
			last = fx[len(fx)-1]
		}
		stale := e.Move != 0 && e.Move <= floor
		switch e.Kind {
		case EvPrepare, EvSuspend, EvSafePoint:
			if stale && last.Kind != DoRefuse {
				t.Fatalf("%v at floor %v: answered %v", e, floor, last)
			}
			if stale {
				st.staleRefusals++
			}
		}
		switch last.Kind {
		case DoCapture:
			st.captures++
		case DoInstall:
			st.installs++
		case DoResume:
			st.resumes++
		}
		if d, ok := h.Departure(tid); ok && !hadDep && (e.Kind != EvSafePoint || d.Move != e.Move) {
			t.Fatalf("%v made departure %+v", e, d)
		}
		if a, ok := h.Arrival(tid); ok && !hadArr && (e.Kind != EvPrepare || a.Move != e.Move) {
			t.Fatalf("%v made arrival %+v", e, a)
		}
		if e.Kind == EvInstall && last.Kind == DoInstall {
			switch {
			case e.Back && (!hadDep || dep.Move != e.Move || !dep.Over):
				t.Fatalf("%v installed back without its resumed departure (%+v)", e, dep)
			case !e.Back && (!hadArr || arr.Move != e.Move):
				t.Fatalf("%v installed without its arrival (%+v)", e, arr)
			}
		}
		if last.Kind == DoRefuse && last.Err == nil {
			t.Fatalf("%v: refused with no error", e)
		}
	}
	return st
}

// TestHostSeeds runs FuzzHost's checks over seeded random event strings.
func TestHostSeeds(t *testing.T) {
	var all hostStats
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, 0x686f7374))
		data := make([]byte, 3*(10+r.IntN(100)))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		st := runHostFuzz(t, data)
		all.captures += st.captures
		all.installs += st.installs
		all.staleRefusals += st.staleRefusals
		all.resumes += st.resumes
	}
	if all.captures == 0 || all.installs == 0 || all.staleRefusals == 0 || all.resumes == 0 {
		t.Fatalf("the seeds exercised too little: %+v", all)
	}
	t.Logf("2000 seeds: %+v", all)
}
