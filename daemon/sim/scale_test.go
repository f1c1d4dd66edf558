package sim_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/sim"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// unitWire sizes every message by its kind alone, each kind a different
// size, so that a phase's bytes tell which messages it counted.
type unitWire struct{}

func (unitWire) JoinHello(task.HostID) int                  { return 100 }
func (unitWire) JoinAnswer(_ task.HostID, hosts, _ int) int { return 1000 + hosts }
func (unitWire) HostAdd(task.HostID) int                    { return 200 }
func (unitWire) SpawnCall(task.TID, string, int, int) int   { return 300 }
func (unitWire) StartCall(task.TID, string, int, int) int   { return 400 }
func (unitWire) TIDsReply(tids []task.TID) int              { return 10 * len(tids) }
func (unitWire) MoveReply(move.Step, int) int               { return 20 }
func (unitWire) Route(task.TID, routing.Route) int          { return 30 }
func (unitWire) Ping() int                                  { return 40 }
func (unitWire) Pong() int                                  { return 50 }
func (unitWire) LoadReport(task.HostID, int) int            { return 60 }
func (unitWire) MoveCall(move.Step, move.ID, task.TID, routing.Route, string, task.HostID, uint64) int {
	return 70
}

// kindOf is phase p's count of kind k.
func kindOf(p sim.ScalePhase, k string) sim.KindCount {
	for _, c := range p.Kinds {
		if c.Kind == k {
			return c
		}
	}
	return sim.KindCount{Kind: k}
}

// TestScaleCounts checks a small scale run's counts against what the
// protocols send: a join costs the master the host's hello in, its answer
// out and an announcement to each host before it; a spawn of one task
// the spawner's call and the host's start answer in, the start call and
// the spawner's answer out; an idle second a ping per host, a pong to
// every other ping, a load report per host every ten seconds; a move
// one call of each of its five steps out and their answers in, and its
// route broadcast to every host once (the run checks at its end that
// every host holds the master's route for each moved task).
func TestScaleCounts(t *testing.T) {
	const hosts, tasks, moves = 50, 500, 10
	cfg := sim.ScaleConfig{Hosts: hosts, Tasks: tasks, Moves: moves, Idle: 10 * time.Second, Seed: 7, Wire: unitWire{}, Routes: sim.RoutesBroadcast}
	r, err := sim.Scale(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Phases) != 4 {
		t.Fatalf("phases %+v, want join, spawn, idle, move", r.Phases)
	}
	join, spawn, idle, mv := r.Phases[0], r.Phases[1], r.Phases[2], r.Phases[3]
	for i, name := range []string{"join", "spawn", "idle", "move"} {
		if r.Phases[i].Name != name {
			t.Errorf("phase %d is %q, want %q", i, r.Phases[i].Name, name)
		}
	}

	adds := hosts * (hosts - 1) / 2
	answers := 0
	for i := 1; i <= hosts; i++ {
		answers += 1000 + i + 1
	}
	if j, a := kindOf(join, sim.KindJoin), kindOf(join, sim.KindHostAdd); j.MsgsIn != hosts || j.MsgsOut != hosts ||
		j.BytesIn != 100*hosts || j.BytesOut != int64(answers) || a.MsgsOut != int64(adds) || a.BytesOut != 200*int64(adds) {
		t.Errorf("joins: hellos %+v, announcements %+v; want %d each way and %d announcements", j, a, hosts, adds)
	}
	if join.MsgsInPer != 1 || join.MsgsOutPer != 1+float64(hosts-1)/2 {
		t.Errorf("per join: %v in, %v out; want 1 and %v", join.MsgsInPer, join.MsgsOutPer, 1+float64(hosts-1)/2)
	}

	sp, st := kindOf(spawn, sim.KindSpawn), kindOf(spawn, sim.KindStart)
	if sp.MsgsIn != tasks || sp.MsgsOut != tasks || sp.BytesIn != 300*tasks || sp.BytesOut != 10*tasks ||
		st.MsgsOut != tasks || st.MsgsIn != tasks || st.BytesOut != 400*tasks || st.BytesIn != 10*tasks {
		t.Errorf("spawns: calls %+v, starts %+v; want %d of each each way", sp, st, tasks)
	}
	if len(spawn.Kinds) != 2 || spawn.MsgsInPer != 2 || spawn.MsgsOutPer != 2 {
		t.Errorf("spawn phase %+v: want 2 messages in and 2 out per spawn, of two kinds", spawn)
	}

	ping, load := kindOf(idle, sim.KindPing), kindOf(idle, sim.KindLoad)
	if ping.MsgsIn != 10*hosts || load.MsgsIn != hosts || ping.MsgsOut < 4*hosts || ping.MsgsOut > 5*hosts ||
		ping.BytesOut != 50*ping.MsgsOut || len(idle.Kinds) != 2 {
		t.Errorf("idle: pings %+v, reports %+v; want %d pings, 4 or 5 pongs a host, %d reports", ping, load, 10*hosts, hosts)
	}
	if idle.Count != 10 || idle.MsgsInPer != float64(11*hosts)/10 {
		t.Errorf("idle per second: %v in over %v s; want %d", idle.MsgsInPer, idle.Count, 11*hosts/10)
	}

	for _, s := range []move.Step{move.StepPrepare, move.StepSuspend, move.StepSend, move.StepRestore, move.StepCommit} {
		if c := kindOf(mv, sim.KindMoveCall+s.String()); c.MsgsOut != moves || c.MsgsIn != moves {
			t.Errorf("moves: %+v, want %d calls and %d answers", c, moves, moves)
		}
	}
	if rt := kindOf(mv, sim.KindRoute); rt.MsgsOut != moves*hosts || rt.MsgsIn != 0 || rt.BytesOut != 30*moves*hosts {
		t.Errorf("moves: routes %+v, want %d (one broadcast to each of %d hosts per move)", rt, moves*hosts, hosts)
	}
	if len(mv.Kinds) != 6 || mv.MsgsOutPer != 5+hosts || mv.MsgsInPer != 5 {
		t.Errorf("move phase %+v: want 5 calls and %d routes out, 5 answers in, per move", mv, hosts)
	}
}

// TestScaleReplays checks that a scale run is deterministic: the same
// seed gives the same counts and trace, another seed another trace.
func TestScaleReplays(t *testing.T) {
	cfg := sim.ScaleConfig{Hosts: 20, Tasks: 100, Moves: 8, Idle: 3 * time.Second, Seed: 11, Wire: unitWire{}}
	a, err := sim.Scale(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.Scale(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a.TraceHash != b.TraceHash || a.Events != b.Events {
		t.Errorf("same seed: trace %s (%d events), then %s (%d)", a.TraceHash, a.Events, b.TraceHash, b.Events)
	}
	for i := range a.Phases {
		pa, pb := a.Phases[i], b.Phases[i]
		if pa.MsgsIn != pb.MsgsIn || pa.MsgsOut != pb.MsgsOut || pa.BytesIn != pb.BytesIn || pa.BytesOut != pb.BytesOut || pa.VirtualMS != pb.VirtualMS {
			t.Errorf("same seed, phase %s: %+v, then %+v", pa.Name, pa, pb)
		}
	}
	cfg.Seed++
	c, err := sim.Scale(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.TraceHash == a.TraceHash {
		t.Errorf("seeds %d and %d gave the same trace %s", cfg.Seed-1, cfg.Seed, a.TraceHash)
	}
}

// TestScaleBounds checks that a scale run out of its bounds is refused.
func TestScaleBounds(t *testing.T) {
	for _, cfg := range []sim.ScaleConfig{
		{Hosts: 0, Tasks: 1},
		{Hosts: sim.MaxScaleHosts + 1},
		{Hosts: 2, Tasks: -1},
		{Hosts: 2, Tasks: sim.MaxScaleTasks + 1},
		{Hosts: 1, Tasks: 5, Moves: 1},
		{Hosts: 2, Tasks: 0, Moves: 1},
		{Hosts: 2, Tasks: 1, Idle: -time.Second},
	} {
		if _, err := sim.Scale(cfg); !errors.Is(err, sim.ErrScaleConfig) {
			t.Errorf("%+v: %v, want ErrScaleConfig", cfg, err)
		}
	}
}

// TestScaleOnDemand checks a scale run's moves with routes on demand: a
// move's route goes to the task's origin, its old host and its new host
// (two or three hosts, whatever the hosts' number), the five steps' calls
// are as by broadcast, and the run checks at its end that each moved
// task's origin holds the master's route and no host a newer one.
func TestScaleOnDemand(t *testing.T) {
	const moves = 10
	for _, hosts := range []int{50, 400} {
		cfg := sim.ScaleConfig{Hosts: hosts, Tasks: 500, Moves: moves, Seed: 7, Wire: unitWire{}, Routes: sim.RoutesDemand}
		r, err := sim.Scale(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r.Routes != "demand" {
			t.Errorf("routes %q, want demand", r.Routes)
		}
		mv := r.Phases[3]
		for _, s := range []move.Step{move.StepPrepare, move.StepSuspend, move.StepSend, move.StepRestore, move.StepCommit} {
			if c := kindOf(mv, sim.KindMoveCall+s.String()); c.MsgsOut != moves || c.MsgsIn != moves {
				t.Errorf("%d hosts, moves: %+v, want %d calls and %d answers", hosts, c, moves, moves)
			}
		}
		if rt := kindOf(mv, sim.KindRoute); rt.MsgsOut < 2*moves || rt.MsgsOut > 3*moves || rt.BytesOut != 30*rt.MsgsOut {
			t.Errorf("%d hosts, moves: routes %+v, want 2 or 3 per move", hosts, rt)
		}
		if mv.MsgsInPer != 5 || mv.MsgsOutPer > 8 {
			t.Errorf("%d hosts, move phase %+v: want 5 answers in and at most 8 messages out per move", hosts, mv)
		}
	}
}
