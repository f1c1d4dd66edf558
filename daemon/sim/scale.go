package sim

import (
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/dpvm/dpvm/task"
)

// ScaleConfig is a scale run: a virtual machine of Hosts hosts that
// join the master, a task that spawns Tasks idle tasks one spawn at a
// time, Idle of virtual time with the hosts' heartbeats, and Moves moves
// of idle tasks drawn from Seed, one after another. The run counts every
// message the master sends and receives, by kind, with the bytes Wire
// gives it (nil: counts only). Routes is how the master spreads a move's
// route (Config.Routes).
type ScaleConfig struct {
	Hosts, Tasks, Moves int
	Idle                time.Duration
	Seed                uint64
	Wire                Wire
	Routes              Routes
}

// Bounds of a scale run: what a run with more is refused for.
const (
	MaxScaleHosts = 1_000_000
	MaxScaleTasks = 10_000_000
	MaxScaleMoves = 1_000_000
	MaxScaleIdle  = 24 * time.Hour
)

// The daemon's defaults the idle phase follows (daemon.Config, under the
// master's failure detector, "master"; SWIM is not modelled): a host
// pings the master every Heartbeat; the master answers a ping once it has
// sent the host nothing for min(1.5 Heartbeat, DeadAfter/4)
// (daemon/net.go's pongDue); a host whose figures do not change reports
// its load every ReportEvery heartbeats.
const (
	scaleHeartbeat   = time.Second
	scaleDeadAfter   = 5 * scaleHeartbeat
	scaleReportEvery = 10
)

// ErrScaleConfig: a scale run's configuration is out of its bounds.
var ErrScaleConfig = errors.New("bad scale run")

// ScalePhase is what one phase of a scale run cost the master.
type ScalePhase struct {
	// Name is join, spawn, idle or move; Per what its figures are per
	// (join, spawn, second, move) and Count how many of those it had.
	Name  string  `json:"name"`
	Per   string  `json:"per"`
	Count float64 `json:"count"`
	// The master's messages and bytes, in and out, in the phase.
	MsgsIn   int64 `json:"msgs_in"`
	MsgsOut  int64 `json:"msgs_out"`
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// The same per join, spawn, second or move (0 when Count is).
	MsgsInPer   float64 `json:"msgs_in_per"`
	MsgsOutPer  float64 `json:"msgs_out_per"`
	BytesInPer  float64 `json:"bytes_in_per"`
	BytesOutPer float64 `json:"bytes_out_per"`
	// Kinds breaks the phase's messages down by kind.
	Kinds []KindCount `json:"kinds"`
	// VirtualMS is the phase's length in virtual time, WallMS the
	// simulator's own time for it.
	VirtualMS float64 `json:"virtual_ms"`
	WallMS    float64 `json:"wall_ms"`
}

// ScaleResult is what a scale run measured.
type ScaleResult struct {
	Hosts  int           `json:"hosts"`
	Tasks  int           `json:"tasks"`
	Moves  int           `json:"moves"`
	Idle   time.Duration `json:"-"`
	IdleMS float64       `json:"idle_ms"`
	Seed   uint64        `json:"seed"`
	// Routes is the route protocol: broadcast or demand.
	Routes string       `json:"routes"`
	Phases []ScalePhase `json:"phases"`
	// Events is the run's events; TraceHash the hex SHA-256 of its trace
	// (the same seed and sizes give the same hash).
	Events    int    `json:"events"`
	TraceHash string `json:"trace_hash"`
	// WallMS is the simulator's own time for the run; HeapMiB the most
	// heap it held in use at a phase's end (runtime.MemStats.HeapInuse),
	// SysMiB the memory it had from the system at the end, Goroutines
	// the most goroutines (a task is one) at a phase's end.
	WallMS     float64 `json:"wall_ms"`
	HeapMiB    float64 `json:"heap_mib"`
	SysMiB     float64 `json:"sys_mib"`
	Goroutines int     `json:"goroutines"`
}

// scaleRoot spawns N idle tasks, one spawn each, then tells the run and
// waits until the run ends (it is never moved).
type scaleRoot struct {
	N       int
	Spawned int
	done    func()
}

// scaleIdle waits at a safe point for a message that never comes: a
// task that costs the protocol nothing but its moves.
type scaleIdle struct{}

func init() {
	task.Register("dpvm.sim.scale.root", &scaleRoot{})
	task.Register("dpvm.sim.scale.idle", &scaleIdle{})
}

// Run implements task.Task.
func (r *scaleRoot) Run(c *task.Ctx) error {
	for r.Spawned < r.N {
		if _, err := c.Spawn(&scaleIdle{}, 1); err != nil {
			return err
		}
		r.Spawned++
	}
	if f := r.done; f != nil {
		r.done = nil
		f()
	}
	_, err := c.Recv(task.AnyTask, task.AnyTag, nil)
	return err
}

// Run implements task.Task.
func (*scaleIdle) Run(c *task.Ctx) error {
	for {
		if _, err := c.Recv(task.AnyTask, task.AnyTag, nil, task.Safe()); err != nil {
			return err
		}
	}
}

// scaleRun is the driver of a scale run's phases.
type scaleRun struct {
	w      *world
	cfg    ScaleConfig
	res    *ScaleResult
	start  time.Time
	phase  string
	began  time.Duration // the phase's start, in virtual time
	wall   time.Time     // and in wall time
	moved  int
	idleTo time.Duration
}

// Scale runs a scale run and returns what it measured. It is
// deterministic: the same configuration gives the same counts, events and
// TraceHash (the wall time and memory are the machine's).
func Scale(cfg ScaleConfig) (ScaleResult, error) {
	switch {
	case cfg.Hosts < 1 || cfg.Hosts > MaxScaleHosts:
		return ScaleResult{}, fmt.Errorf("%w: %d hosts (1 to %d)", ErrScaleConfig, cfg.Hosts, MaxScaleHosts)
	case cfg.Tasks < 0 || cfg.Tasks > MaxScaleTasks:
		return ScaleResult{}, fmt.Errorf("%w: %d tasks (0 to %d)", ErrScaleConfig, cfg.Tasks, MaxScaleTasks)
	case cfg.Moves < 0 || cfg.Moves > MaxScaleMoves:
		return ScaleResult{}, fmt.Errorf("%w: %d moves (0 to %d)", ErrScaleConfig, cfg.Moves, MaxScaleMoves)
	case cfg.Moves > 0 && (cfg.Hosts < 2 || cfg.Tasks < 1):
		return ScaleResult{}, fmt.Errorf("%w: moves need 2 hosts and a task", ErrScaleConfig)
	case cfg.Idle < 0 || cfg.Idle > MaxScaleIdle:
		return ScaleResult{}, fmt.Errorf("%w: idle %v (0 to %v)", ErrScaleConfig, cfg.Idle, MaxScaleIdle)
	}
	if cfg.Wire == nil {
		cfg.Wire = zeroWire{}
	}
	vcfg := Config{Seed: cfg.Seed, Hosts: cfg.Hosts, MaxTime: 1 << 62, MaxEvents: 1<<63 - 1, Routes: cfg.Routes}.withDefaults()
	w := newWorld(vcfg, 0x5ca1e5ca1e5ca1e5)
	w.scale, w.meter = true, newMeter(cfg.Wire, cfg.Hosts)
	res := &ScaleResult{Hosts: cfg.Hosts, Tasks: cfg.Tasks, Moves: cfg.Moves, Idle: cfg.Idle,
		IdleMS: float64(cfg.Idle) / float64(time.Millisecond), Seed: cfg.Seed, Routes: cfg.Routes.String()}
	s := &scaleRun{w: w, cfg: cfg, res: res, start: time.Now()}
	s.begin("join")
	s.joins()
	s.end("join", float64(cfg.Hosts))
	s.begin("spawn")
	w.startRoot(&scaleRoot{N: cfg.Tasks, done: s.spawned})
	w.loop()
	w.endTasks()
	if w.failure == nil && (s.phase != "move" || s.moved < cfg.Moves) {
		w.fail(fmt.Errorf("%w: the scale run stopped in its %s phase (%d of %d moves)", ErrStalled, s.phase, s.moved, cfg.Moves))
	}
	if w.failure == nil {
		w.checkScale()
	}
	if w.failure == nil {
		s.end("move", float64(cfg.Moves))
	}
	res.Events = w.events
	res.TraceHash = hex.EncodeToString(w.trace.Sum(nil))
	res.WallMS = ms(time.Since(s.start))
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.SysMiB = float64(ms.Sys) / (1 << 20)
	return *res, w.failure
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// begin starts phase name.
func (s *scaleRun) begin(name string) {
	s.phase, s.began, s.wall = name, s.w.now, time.Now()
	s.w.note("phase " + name)
}

// end closes phase name, of count joins, spawns, seconds or moves: the
// master's counts since it began, and the simulator's memory.
func (s *scaleRun) end(name string, count float64) {
	p := ScalePhase{Name: name, Count: count, Kinds: s.w.meter.take(),
		VirtualMS: ms(s.w.now - s.began), WallMS: ms(time.Since(s.wall))}
	p.Per = map[string]string{"join": "join", "spawn": "spawn", "idle": "second", "move": "move"}[name]
	for _, k := range p.Kinds {
		p.MsgsIn += k.MsgsIn
		p.MsgsOut += k.MsgsOut
		p.BytesIn += k.BytesIn
		p.BytesOut += k.BytesOut
	}
	if count > 0 {
		p.MsgsInPer, p.MsgsOutPer = float64(p.MsgsIn)/count, float64(p.MsgsOut)/count
		p.BytesInPer, p.BytesOutPer = float64(p.BytesIn)/count, float64(p.BytesOut)/count
	}
	s.res.Phases = append(s.res.Phases, p)
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	s.res.HeapMiB = max(s.res.HeapMiB, float64(m.HeapInuse)/(1<<20))
	s.res.Goroutines = max(s.res.Goroutines, runtime.NumGoroutine())
}

// joins counts the hosts' joins, one after another, as daemon/net.go's
// handshake answers them: the host's hello (in), the master's answer
// with its whole host list so far, the master's own entry and the new
// host's included, and the routing table (out; empty: no task runs yet),
// and the delta adding the new host to the list, to each host that
// joined before it (out; daemon/hostlist.go). The simulation's hosts are members from the start: the join
// is counted, not played as events, and takes no virtual time.
func (s *scaleRun) joins() {
	mt, now := s.w.meter, s.w.now
	for i := 1; i <= s.cfg.Hosts; i++ {
		id := task.HostID(i)
		mt.in(KindJoin, 1, mt.wire.JoinHello(id))
		mt.out(KindJoin, id, mt.wire.JoinAnswer(id, i+1, 0), now)
		// The announcement to each host before it, counted at once (every
		// host has heard from the master at now already: its answer).
		c := mt.kind(KindHostAdd)
		c.MsgsOut += int64(i - 1)
		c.BytesOut += int64(i-1) * int64(mt.wire.HostAdd(id))
	}
}

// spawned ends the spawn phase (the root's spawns are answered) and
// starts the idle one: every host's heartbeats for cfg.Idle.
func (s *scaleRun) spawned() {
	w := s.w
	w.checkScale()
	s.end("spawn", float64(s.cfg.Tasks))
	s.begin("idle")
	s.idleTo = w.now + s.cfg.Idle
	for _, h := range w.hosts {
		beats := 0
		var beat func()
		beat = func() {
			// daemon/net.go's heartbeatLoop at a host: the load report
			// when due (its figures do not change while idle), then the
			// ping.
			mt := w.meter
			if beats++; beats >= scaleReportEvery {
				beats = 0
				sz := mt.wire.LoadReport(h.id, len(h.tasks))
				mt.in(KindLoad, 1, sz)
				w.send(h.id, masterNode, classRoute, "load "+h.name, func() {})
			}
			mt.in(KindPing, 1, mt.wire.Ping())
			w.send(h.id, masterNode, classRoute, "ping "+h.name, func() {
				// The master answers once it has been silent to the
				// host long enough (daemon/net.go's pongDue).
				if last := mt.lastOut[h.id]; last < 0 || w.now-last >= min(scaleHeartbeat*3/2, scaleDeadAfter/4) {
					mt.out(KindPing, h.id, mt.wire.Pong(), w.now)
				}
			})
			if next := w.now + scaleHeartbeat; next < s.idleTo {
				w.at(next, h, h.name+" heartbeat", beat)
			}
		}
		if first := w.now + w.dur(0, scaleHeartbeat-1); first < s.idleTo {
			w.at(first, h, h.name+" heartbeat", beat)
		}
	}
	w.at(s.idleTo, nil, "idle ends", s.idled)
}

// idled ends the idle phase and starts the moves.
func (s *scaleRun) idled() {
	s.end("idle", s.cfg.Idle.Seconds())
	s.begin("move")
	s.nextMove()
}

// nextMove moves an idle task, drawn from the seed, to another host
// drawn likewise; the next move starts once it has ended.
func (s *scaleRun) nextMove() {
	w, m := s.w, s.w.master
	if s.moved >= s.cfg.Moves {
		return
	}
	tid := m.order()[1+w.rng.IntN(len(m.order())-1)] // the root (first) stays
	from := m.node.Routes().Lookup(tid).Host
	to := task.HostID(1 + w.rng.IntN(len(w.hosts)-1))
	if to >= from {
		to++
	}
	err := m.startMove(tid, to, func(err error) {
		if err != nil {
			w.fail(fmt.Errorf("move %d of %v: %w", s.moved+1, tid, err))
			return
		}
		s.moved++
		w.after(time.Microsecond, nil, "next move", s.nextMove)
	})
	if err != nil {
		w.fail(fmt.Errorf("move %d of %v: %w", s.moved+1, tid, err))
	}
}

// checkScale checks a scale run's virtual machine at a phase's end, in
// time linear in its hosts, tasks and moved tasks' routes: every task not
// ended is in service on exactly one host, the one the master's route
// names, and nothing is left of a move; every host's route for a moved
// task is the master's (the broadcasts reached every host), or on demand
// the origin's is (the authority) and no host's is newer.
func (w *world) checkScale() {
	m := w.master
	where := make(map[task.TID]*shost, len(m.order()))
	for _, h := range w.hosts {
		if len(h.leaving) > 0 || len(h.arriving) > 0 {
			w.fail(fmt.Errorf("%w: %v holds %d departures and %d arrivals after the moves", ErrInvariant, h.name, len(h.leaving), len(h.arriving)))
			return
		}
		for tid := range h.tasks {
			if o := where[tid]; o != nil {
				w.fail(fmt.Errorf("%w: %v runs on %v and %v", ErrInvariant, tid, o.name, h.name))
				return
			}
			where[tid] = h
		}
	}
	for _, tid := range m.order() {
		if m.task(tid).Exited {
			continue
		}
		h := where[tid]
		switch r := m.node.Routes().Lookup(tid); {
		case h == nil:
			w.fail(fmt.Errorf("%w: %v is on no host", ErrInvariant, tid))
			return
		case r.Host != h.id || r.InTransit:
			w.fail(fmt.Errorf("%w: %v runs on %v, the master's route says %v", ErrInvariant, tid, h.name, r))
			return
		}
	}
	for _, e := range m.node.Routes().Entries() {
		if w.demand() {
			if r := w.host(e.TID.Host()).node.Routes().Lookup(e.TID); r != e.Route {
				w.fail(fmt.Errorf("%w: the origin's route for %v is %v, the master's %v", ErrInvariant, e.TID, r, e.Route))
				return
			}
		}
		for _, h := range w.hosts {
			if r := h.node.Routes().Lookup(e.TID); w.demand() && r.Epoch > e.Route.Epoch || !w.demand() && r != e.Route {
				w.fail(fmt.Errorf("%w: %v's route for %v is %v, the master's %v", ErrInvariant, h.name, e.TID, r, e.Route))
				return
			}
		}
	}
}
