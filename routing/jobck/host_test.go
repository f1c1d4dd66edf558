package jobck

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// hostScript runs transcript commands against the host half of job
// checkpoints. A command is a word and arguments:
//
//	task t2:1 [arrived] [move-asked] [running] [moving] [arriving]
//	                      what the daemon's other parts know of the task from now on
//	pause job=7 try=3 tasks=t2:1,t2:2 [departing=t2:3]
//	pause-over job=7 try=3 [late=t2:1] [err=text]
//	quiet job=7 tasks=t2:1,t2:2
//	write job=7 try=3 tid=t2:1
//	write-over tid=t2:1 pause=1
//	resume job=7 try=3
//	kill job=7
//	lost tasks=t2:1
//	gone tid=t2:1 job=7 [job-left]
//	stage job=7 tasks=t2:1
//	start job=7
//	unstage job=7
//	state                 pauses, resumes kept and staged tasks
type hostScript struct {
	h     *Host
	local map[task.TID]Local
	tids  map[task.TID]bool // every task named, for state
}

func (s *hostScript) run(line string) (string, error) {
	f := strings.Fields(line)
	args := map[string]string{}
	flags := map[string]bool{}
	for _, kv := range f[1:] {
		if k, v, ok := strings.Cut(kv, "="); ok {
			args[k] = v
		} else {
			flags[kv] = true
		}
	}
	num := func(k string) uint64 {
		n, _ := strconv.ParseUint(args[k], 10, 64)
		return n
	}
	tids := func(k string) ([]task.TID, error) {
		var out []task.TID
		for _, x := range strings.Split(args[k], ",") {
			if x == "" {
				continue
			}
			id, err := task.ParseTID(x)
			if err != nil {
				return nil, err
			}
			s.tids[id] = true
			out = append(out, id)
		}
		return out, nil
	}
	switch f[0] {
	case "task":
		id, err := task.ParseTID(f[1])
		if err != nil {
			return "", err
		}
		s.tids[id] = true
		l := Local{TID: id}
		for _, fact := range f[2:] {
			switch fact {
			case "arrived":
				l.Arrived = true
			case "move-asked":
				l.MoveAsked = true
			case "running":
				l.Running = true
			case "moving":
				l.Moving = true
			case "arriving":
				l.Arriving = true
			default:
				return "", fmt.Errorf("unknown task fact %q", fact)
			}
		}
		s.local[id] = l
		return "ok", nil
	case "state":
		return s.state(), nil
	}
	k := slices.Index(hostEventNames[:], f[0])
	if k <= 0 {
		return "", fmt.Errorf("unknown command %q", f[0])
	}
	e := HostEvent{Kind: HostEventKind(k), Job: num("job"), Round: Round{Job: num("job"), Try: num("try"), Kind: Checkpoint}, Pause: num("pause"), JobLeft: flags["job-left"]}
	if e.Round.Try == 0 {
		e.Round = Round{}
	}
	ts, err := tids("tasks")
	if err != nil {
		return "", err
	}
	for _, id := range ts {
		l := s.local[id]
		l.TID = id
		e.Tasks = append(e.Tasks, l)
	}
	if e.Departing, err = tids("departing"); err != nil {
		return "", err
	}
	if e.Late, err = tids("late"); err != nil {
		return "", err
	}
	if one, err := tids("tid"); err != nil {
		return "", err
	} else if len(one) == 1 {
		e.TID = one[0]
		e.Local = s.local[e.TID]
		e.Local.TID = e.TID
	}
	if x := args["err"]; x != "" {
		e.Err = errors.New(x)
	}
	fx := s.h.Step(e)
	lines := make([]string, len(fx))
	for i, x := range fx {
		lines[i] = x.String()
	}
	return strings.Join(lines, "\n"), nil
}

func (s *hostScript) state() string {
	var lines []string
	for _, id := range slices.Sorted(maps.Keys(s.tids)) {
		if p, ok := s.h.Paused(id); ok {
			lines = append(lines, fmt.Sprintf("%v paused p%d job %d try %d writing %v", id, p.ID, p.Job, p.Try, p.Writing))
		}
		if job, ok := s.h.Staged(id); ok {
			lines = append(lines, fmt.Sprintf("%v staged for job %d", id, job))
		}
	}
	for _, job := range slices.Sorted(maps.Keys(s.h.resumed)) {
		lines = append(lines, fmt.Sprintf("job %d resumed up to try %d", job, s.h.Resumed(job)))
	}
	p, r, st := s.h.Counts()
	lines = append(lines, fmt.Sprintf("%d pauses, %d resumes kept, %d staged", p, r, st))
	return strings.Join(lines, "\n")
}

// TestHostTranscripts replays testdata/host/*.txt against the host half
// of job checkpoints, in the format of TestTranscripts: each command line
// is followed by the machine's answer, lines starting with "→ ". Run with
// -update to rewrite the answers.
func TestHostTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/host/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			s := &hostScript{h: NewHost(), local: map[task.TID]Local{}, tids: map[task.TID]bool{}}
			var out strings.Builder
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
				if got == "" {
					got = "none"
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

// hostStats counts what a run of runHostFuzz exercised.
type hostStats struct{ pauses, writes, waits, releases, staleRefusals, staged int }

// runHostFuzz feeds the host half of job checkpoints the events data
// chooses — steps of any round, in any order, repeated and late, with any
// facts of the tasks — and mirrors the daemon: it keeps the pause records
// and staged tasks the effects make and drop, and ends the writes the
// machine starts when data says. After every step it checks the rules:
//
//   - the daemon's records follow the machine: after the effects, the
//     pauses and staged tasks it keeps are exactly the machine's;
//   - a pause of a round at or below its job's newest resume is refused
//     and holds nothing;
//   - a pause being written is never released (but for a task that
//     ended), and at most one write of a pause is under way;
//   - a write is started only for a pause of the step's round whose task
//     is at its safe point;
//   - after a resume of try (a kill), every pause of the job left of that
//     round or an older one (of any round) is being written and waited
//     for;
//   - a job's newest resume only rises while it has tasks here;
//   - a task is staged only while no task of its TID runs or moves here,
//     and started only from its job's staging;
//   - a step's answer is its last effect, a refusal carries its error,
//     and every effect has a text.
func runHostFuzz(t *testing.T, data []byte) (st hostStats) {
	h := NewHost()
	tids := []task.TID{task.NewTID(2, 1), task.NewTID(2, 2), task.NewTID(2, 3)}
	jobOf := func(tid task.TID) uint64 { return 1 + uint64(tid.Num()-1)/2 } // t2:1, t2:2 of job 1; t2:3 of job 2
	held := map[task.TID]uint64{}                                           // the daemon's pause records: their IDs
	writing := map[task.TID]uint64{}                                        // writes under way: the pause written
	staged := map[task.TID]uint64{}                                         // the daemon's staged tasks: their jobs
	for i := 0; i+2 < len(data); i += 3 {
		op, who, fl := data[i], data[i+1], data[i+2]
		tid := tids[int(who)%len(tids)]
		job := uint64(1 + who>>7)
		try := uint64(fl % 5)
		e := HostEvent{Kind: HostEventKind(int(op)%len(hostEventNames[1:]) + 1), Job: job, Round: Round{Job: job, Try: try, Kind: Checkpoint}}
		facts := func(id task.TID, b byte) Local {
			return Local{TID: id, Arrived: b&1 == 1, MoveAsked: b&0x1e == 0x1e, Running: b&4 == 4, Moving: b&8 == 8, Arriving: b&16 == 16}
		}
		for k, id := range tids {
			if jobOf(id) == job || e.Kind == HostStage || e.Kind == HostLost {
				if fl>>(5+k)&1 == 1 || e.Kind != HostStage && e.Kind != HostLost {
					e.Tasks = append(e.Tasks, facts(id, who>>uint(k)))
				}
			}
		}
		switch e.Kind {
		case HostPause:
			if fl&0x80 == 0x80 && op&0x40 == 0x40 {
				e.Departing = []task.TID{tid}
			}
		case HostPauseOver:
			if fl&0x20 == 0x20 {
				e.Late = []task.TID{tid}
			}
			if fl&0x40 == 0x40 {
				e.Err = errors.New("cancelled")
			}
		case HostWrite:
			e.Job, e.Round.Job = jobOf(tid), jobOf(tid)
			e.Local = facts(tid, fl>>3)
		case HostWriteOver:
			e.TID = tid
			if id, ok := writing[tid]; ok && op&0x80 == 0 {
				e.Pause = id
			} else {
				e.Pause = uint64(fl>>4) % 4
			}
		case HostGone:
			e.TID, e.Job, e.JobLeft = tid, jobOf(tid), fl&0x20 == 0x20
		}
		before := map[task.TID]Pause{}
		for _, id := range tids {
			if p, ok := h.Paused(id); ok {
				before[id] = p
			}
		}
		floor := h.Resumed(job)
		fx := h.Step(e)
		if len(fx) == 0 {
			t.Fatalf("step %d %v: no answer", i/3, e)
		}
		last := fx[len(fx)-1]
		for k, x := range fx {
			if x.String() == "" {
				t.Fatalf("step %d %v: an effect with no text", i/3, e)
			}
			if k < len(fx)-1 && (x.Kind == DoRefuse || x.Kind == DoOK || x.Kind == DoReport) {
				t.Fatalf("step %d %v: answer %v before the last effect", i/3, e, x)
			}
			switch x.Kind {
			case DoRefuse:
				if x.Err == nil {
					t.Fatalf("step %d %v: refused with no error", i/3, e)
				}
				if errors.Is(x.Err, move.ErrAborted) {
					st.staleRefusals++
				}
			case DoPause:
				st.pauses++
				if x.New {
					held[x.TID] = x.Pause
				} else if held[x.TID] != x.Pause {
					t.Fatalf("step %d %v: %v takes on a pause the daemon does not hold", i/3, e, x)
				}
			case DoRelease:
				st.releases++
				if held[x.TID] != x.Pause {
					t.Fatalf("step %d %v: %v releases a pause the daemon does not hold", i/3, e, x)
				}
				if w, ok := writing[x.TID]; ok && w == x.Pause && e.Kind != HostGone {
					t.Fatalf("step %d %v: %v while its write is under way", i/3, e, x)
				}
				delete(held, x.TID)
			case DoWait:
				st.waits++
				if w, ok := writing[x.TID]; !ok || w != x.Pause {
					t.Fatalf("step %d %v: %v for no write under way", i/3, e, x)
				}
			case DoWrite:
				st.writes++
				p := before[x.TID]
				if _, ok := writing[x.TID]; ok && writing[x.TID] == p.ID {
					t.Fatalf("step %d %v: a second write of %v", i/3, e, x)
				}
				if p.ID != x.Pause || p.Try != try || !e.Local.Arrived || p.Job != e.Job {
					t.Fatalf("step %d %v: %v of pause %+v", i/3, e, x, p)
				}
				writing[x.TID] = x.Pause
			case DoStage:
				st.staged++
				for _, l := range e.Tasks {
					if l.TID == x.TID && (l.Running || l.Moving) {
						t.Fatalf("step %d %v: staged %v beside a task of its TID", i/3, e, x.TID)
					}
				}
				staged[x.TID] = e.Job
			case DoUnstage:
				delete(staged, x.TID)
			case DoStart:
				if staged[x.TID] != e.Job {
					t.Fatalf("step %d %v: started %v, staged for job %d", i/3, e, x.TID, staged[x.TID])
				}
				delete(staged, x.TID)
			}
		}
		if e.Kind == HostWriteOver {
			if w, ok := writing[e.TID]; ok && w == e.Pause {
				delete(writing, e.TID)
			}
		}
		// The daemon's records follow the machine.
		for _, id := range tids {
			p, ok := h.Paused(id)
			if hid, hok := held[id]; ok != hok || ok && p.ID != hid {
				t.Fatalf("step %d %v: machine pause %+v (%v), daemon's %d (%v)", i/3, e, p, ok, hid, hok)
			}
			if ok && p.Writing != (writing[id] == p.ID && writing[id] != 0) {
				t.Fatalf("step %d %v: pause %+v of %v, write under way %d", i/3, e, p, id, writing[id])
			}
			j, ok := h.Staged(id)
			if sj, sok := staged[id]; ok != sok || j != sj {
				t.Fatalf("step %d %v: machine stages %v for %d (%v), daemon for %d (%v)", i/3, e, id, j, ok, sj, sok)
			}
		}
		switch e.Kind {
		case HostPause:
			if try != 0 && try <= floor && last.Kind != DoRefuse {
				t.Fatalf("step %d %v: a pause at or below the newest resume %d taken", i/3, e, floor)
			}
		case HostResume, HostKill:
			for _, id := range tids {
				p, ok := h.Paused(id)
				if !ok || p.Job != job || (e.Kind == HostResume && try != 0 && p.Try > try) {
					continue
				}
				waited := false
				for _, x := range fx {
					waited = waited || x.Kind == DoWait && x.TID == id
				}
				if !p.Writing || !waited {
					t.Fatalf("step %d %v: %v left paused %+v without waiting for its write", i/3, e, id, p)
				}
			}
		}
		if f := h.Resumed(job); f < floor && !(e.Kind == HostGone && e.JobLeft) {
			t.Fatalf("step %d %v: job %d's newest resume went from %d to %d", i/3, e, job, floor, f)
		}
	}
	return st
}

// FuzzHost checks runHostFuzz's rules under any event sequence.
// go test ./routing/jobck -fuzz FuzzHost.
func FuzzHost(f *testing.F) {
	f.Add([]byte{0, 3, 3, 2, 3, 3, 3, 0, 3, 5, 0, 3, 4, 0, 3, 5, 0, 3})
	f.Add([]byte{0, 0xff, 2, 3, 0, 2, 5, 0, 2, 4, 0, 2, 0, 0, 2})
	f.Add([]byte{9, 0, 0xe0, 10, 0, 0, 9, 0, 0xe0, 11, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) { _ = runHostFuzz(t, data) })
}

// TestHostSeeds runs FuzzHost's checks over seeded random event strings,
// and checks that they exercise writes, waits for a write under way,
// releases, stale pauses and staging.
func TestHostSeeds(t *testing.T) {
	var all hostStats
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, 0x6a6f62636b))
		data := make([]byte, 3*(10+r.IntN(100)))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		st := runHostFuzz(t, data)
		all.pauses += st.pauses
		all.writes += st.writes
		all.waits += st.waits
		all.releases += st.releases
		all.staleRefusals += st.staleRefusals
		all.staged += st.staged
	}
	if all.pauses == 0 || all.writes == 0 || all.waits == 0 || all.releases == 0 || all.staleRefusals == 0 || all.staged == 0 {
		t.Fatalf("the seeds exercised too little: %+v", all)
	}
	t.Logf("2000 seeds: %+v", all)
}
