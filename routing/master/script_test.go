package master

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
	"github.com/dpvm/dpvm/routing/jobck"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

var update = flag.Bool("update", false, "rewrite the transcripts under testdata")

// base is the time 0 of transcripts.
var base = time.Unix(1_000_000, 0).UTC()

// timeouts are the transcripts' move timeouts.
var timeouts = move.Timeouts{Step: time.Second, Suspend: 2 * time.Second, Transfer: 2 * time.Second, Retry: 200 * time.Millisecond}

// script runs transcript commands against a node. A command is a word,
// positional words and key=value arguments; t=DURATION sets the time:
//
//	new hosts=1,2,3 demand groups=2 name=8 members=3
//	job 1 endlost | job 2 from=3 set=t5:1@1,t9:2@2 groups=g/t5:1/t9:2
//	every 1 100ms
//	spawn job=1 type=w count=3 host=2 parent=t1:1
//	exited t1:1 | kill t1:1 | located t1:1
//	move t1:1 to=2 | move t1:1 to=2 from=1 epoch=3 type=w job=1
//	hold 1 | release 1 | dropjob 1 err=text
//	report host=1 orphans=m3/t1:1/2/e4,... running=t2:1,... epoch=5 floor=3
//	resolve hosts=1,2 | nextepoch 7 | up 2
//	result m1 prepare ok err=text
//	lost 2 | back 2
//	checkpoint 1
//	paused 1 host=1 every=1ms err=text
//	quiet 1 host=1 pending=0 running=0 tasks=2
//	written 1 host=1 tids=t1:1,t2:1
//	committed 1 err=text
//	killed 1 host=1
//	staged 1 err=text
//	resumed 1 host=1 attempt=1 err=text
//	timer moves | timer checkpoint 1 | timer quiet 1
//	join t1:1 g | leave t1:1 g | barrier t1:1 g count=2
//	withdraw t1:1 g | rejoin t1:1 g inst=2
//	watch t1:1 who=t2:1 tag=7 | members g | memberships t1:1
//
// Job answers name the job's round under way. Each command's output is
// the effects, one a line, and the node's state in a last line.
type script struct {
	n   *Node
	now time.Time
}

func (s *script) run(line string) string {
	f := strings.Fields(line)
	var pos []string
	args := map[string]string{}
	for _, w := range f[1:] {
		if k, v, ok := strings.Cut(w, "="); ok {
			args[k] = v
		} else {
			pos = append(pos, w)
		}
	}
	num := func(k string) int { n, _ := strconv.Atoi(args[k]); return n }
	dur := func(k string) time.Duration { d, _ := time.ParseDuration(args[k]); return d }
	host := func(k string) task.HostID { return task.HostID(num(k)) }
	tid := func(v string) task.TID { t, _ := task.ParseTID(v); return t }
	jobOf := func() uint64 {
		if len(pos) == 0 {
			return 0
		}
		j, _ := strconv.ParseUint(pos[0], 10, 64)
		return j
	}
	var err error
	if e := args["err"]; e != "" {
		err = errors.New(e)
	}
	if t, ok := args["t"]; ok {
		d, _ := time.ParseDuration(t)
		s.now = base.Add(d)
	}
	if f[0] == "new" {
		var hs []task.HostID
		for _, x := range strings.Split(args["hosts"], ",") {
			if n, err := strconv.Atoi(x); err == nil {
				hs = append(hs, task.HostID(n))
			}
		}
		s.n = New(Config{Timeouts: timeouts, Demand: strings.Contains(line, " demand"),
			MaxGroups: num("groups"), MaxGroupName: num("name"), MaxGroupMembers: num("members"), MaxWatchers: num("watchers")}, hs)
		s.now = base
		return s.status()
	}
	e := Event{Err: err}
	switch f[0] {
	case "job":
		e.Kind, e.Job = EvJobStart, jobOf()
		e.Jobck.EndLost = strings.Contains(line, " endlost")
		e.Round.Seq = uint64(num("from"))
		if args["set"] != "" {
			for _, x := range strings.Split(args["set"], ",") {
				t, h, _ := strings.Cut(x, "@")
				n, _ := strconv.Atoi(h)
				e.TIDs, e.Hosts = append(e.TIDs, tid(t)), append(e.Hosts, task.HostID(n))
			}
		}
		if args["groups"] != "" {
			e.Groups = map[string][]task.TID{}
			for _, g := range strings.Split(args["groups"], ",") {
				parts := strings.Split(g, "/")
				for _, t := range parts[1:] {
					e.Groups[parts[0]] = append(e.Groups[parts[0]], tid(t))
				}
			}
		}
	case "every":
		e.Kind, e.Job = EvJobEvery, jobOf()
		e.Every, _ = time.ParseDuration(pos[1])
	case "spawn":
		e.Kind, e.Job, e.Type, e.Count, e.Host, e.Parent = EvSpawn, uint64(num("job")), args["type"], num("count"), host("host"), tid(args["parent"])
	case "exited", "kill", "located", "unwatch":
		e.Kind = map[string]EventKind{"exited": EvExited, "kill": EvKill, "located": EvLocated, "unwatch": EvUnwatch}[f[0]]
		e.TID = tid(pos[0])
	case "move":
		e.Kind, e.TID, e.Host = EvMove, tid(pos[0]), host("to")
		e.From, e.Epoch, e.Type, e.Job = host("from"), uint64(num("epoch")), args["type"], uint64(num("job"))
	case "hold", "release", "dropjob":
		e.Kind = map[string]EventKind{"hold": EvHold, "release": EvRelease, "dropjob": EvDropJob}[f[0]]
		e.Job = jobOf()
	case "report":
		e.Kind, e.Host, e.Epoch, e.MoveFloor = EvMoveReport, host("host"), uint64(num("epoch")), move.ID(num("floor"))
		for _, o := range strings.Split(args["orphans"], ",") {
			if p := strings.Split(o, "/"); len(p) == 4 {
				id, _ := strconv.ParseUint(strings.TrimPrefix(p[0], "m"), 10, 64)
				d, _ := strconv.Atoi(p[2])
				ep, _ := strconv.ParseUint(strings.TrimPrefix(p[3], "e"), 10, 64)
				e.Orphans = append(e.Orphans, move.Orphan{Move: move.ID(id), TID: tid(p[1]), Dest: routing.Route{Host: task.HostID(d), Epoch: ep}})
			}
		}
		for _, x := range strings.Split(args["running"], ",") {
			if x != "" {
				e.TIDs = append(e.TIDs, tid(x))
			}
		}
	case "resolve":
		e.Kind = EvResolve
		for _, x := range strings.Split(args["hosts"], ",") {
			if n, err := strconv.Atoi(x); err == nil {
				e.Hosts = append(e.Hosts, task.HostID(n))
			}
		}
	case "nextepoch":
		e.Kind = EvNextEpoch
		n, _ := strconv.ParseUint(pos[0], 10, 64)
		e.Epoch = n
	case "up":
		n, _ := strconv.Atoi(pos[0])
		e.Kind, e.Host = EvHostUp, task.HostID(n)
	case "result":
		e.Kind = EvMoveResult
		id, _ := strconv.ParseUint(strings.TrimPrefix(pos[0], "m"), 10, 64)
		e.Move = move.ID(id)
		for st := move.StepPrepare; st <= move.StepResume; st++ {
			if st.String() == pos[1] {
				e.Step = st
			}
		}
		for o := move.OK; o <= move.Installed; o++ {
			if o.String() == pos[2] {
				e.Outcome = o
			}
		}
	case "lost":
		n, _ := strconv.Atoi(pos[0])
		e.Kind, e.Host = EvHostLost, task.HostID(n)
	case "back":
		n, _ := strconv.Atoi(pos[0])
		e.Kind, e.Host = EvHostUp, task.HostID(n)
	case "checkpoint", "paused", "quiet", "written", "committed", "killed":
		j := jobOf()
		kinds := map[string]jobck.EventKind{"checkpoint": jobck.EvCheckpoint, "paused": jobck.EvPaused, "quiet": jobck.EvQuiet,
			"written": jobck.EvWritten, "committed": jobck.EvCommitted, "killed": jobck.EvKilled}
		e.Kind, e.Job, e.Err = EvCk, j, nil
		e.Ck = jobck.Event{Kind: kinds[f[0]], Round: s.n.Round(j), Host: host("host"), Err: err, SafeEvery: dur("every"),
			Pending: num("pending"), Running: num("running"), Tasks: num("tasks")}
		if v := args["tids"]; v != "" {
			for _, x := range strings.Split(v, ",") {
				e.TIDs = append(e.TIDs, tid(x))
			}
			e.Ck.Tasks = len(e.TIDs)
		}
	case "staged":
		j := jobOf()
		e.Kind, e.Job, e.Round = EvStaged, j, s.n.Round(j)
	case "resumed":
		j := jobOf()
		e.Kind, e.Job, e.Host, e.Attempt = EvResumed, j, host("host"), num("attempt")
		e.Round = jobck.Round{Job: j, Seq: uint64(num("seq")), Try: uint64(num("try")), Kind: jobck.Checkpoint}
	case "timer":
		e.Kind = EvTimer
		switch pos[0] {
		case "moves":
			e.Timer = Timer{Kind: TimerMoves}
		case "checkpoint":
			j, _ := strconv.ParseUint(pos[1], 10, 64)
			e.Timer = Timer{Kind: TimerCheckpoint, Job: j}
		case "quiet":
			j, _ := strconv.ParseUint(pos[1], 10, 64)
			e.Timer = Timer{Kind: TimerQuiet, Job: j}
		}
	case "join", "leave":
		e.Kind, e.TID, e.Group = EvJoin, tid(pos[0]), pos[1]
		if f[0] == "leave" {
			e.Kind = EvLeave
		}
	case "barrier":
		e.Kind, e.TID, e.Group, e.Count = EvBarrier, tid(pos[0]), pos[1], num("count")
	case "withdraw":
		e.Kind, e.TID, e.Group = EvWithdraw, tid(pos[0]), pos[1]
	case "rejoin":
		e.Kind, e.TID, e.Group, e.Count = EvRejoin, tid(pos[0]), pos[1], num("inst")
	case "watch":
		e.Kind, e.TID, e.Who, e.Tag, e.Host = EvWatch, tid(pos[0]), tid(args["who"]), num("tag"), host("at")
	case "taskslost":
		e.Kind, e.Host = EvTasksLost, host("host")
		for _, x := range pos {
			e.TIDs = append(e.TIDs, tid(x))
		}
	case "watched":
		return fmt.Sprintf("%v", s.n.Watched())
	case "members":
		m, err := s.n.Members(pos[0])
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("%v", m)
	case "memberships":
		return fmt.Sprintf("%v; in groups %v", s.n.Memberships(tid(pos[0])), s.n.GroupTasks())
	default:
		return "unknown command " + f[0]
	}
	var b strings.Builder
	for _, x := range s.n.Step(s.now, e) {
		fmt.Fprintf(&b, "%v\n", x)
	}
	b.WriteString(s.status())
	return b.String()
}

// status is the node's state: its moves, the job 1's round and sets, the
// hosts alive and its tasks.
func (s *script) status() string {
	var ms []string
	for _, m := range s.n.moves.Moves() {
		ms = append(ms, fmt.Sprintf("%v %v %v", m.ID, m.TID, m.State))
	}
	var ts []string
	for _, tid := range s.n.Order() {
		t := s.n.Task(tid)
		x := fmt.Sprintf("%v@%v", tid, s.n.Routes().Lookup(tid).Host)
		if t.Exited {
			x += "/exited"
		}
		if t.Killed {
			x += "/killed"
		}
		ts = append(ts, x)
	}
	return fmt.Sprintf("= moves %v; job1 %v sets %d; alive %v; tasks %v; e%d", ms, s.n.JobState(1), s.n.Sets(1), s.n.Alive(), ts, s.n.Epoch())
}

// TestTranscripts replays testdata/*.txt (routing/internal/transcript):
// the node's effects for each command. Run with -update to rewrite them.
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			s := &script{}
			transcript.Run(t, file, *update, s.run)
		})
	}
}
