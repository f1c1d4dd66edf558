package daemon

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/dpvm/dpvm/sched"
	"github.com/dpvm/dpvm/sched/share"
	"github.com/dpvm/dpvm/task"
)

// Placements lists the placement policies NewPlacer knows.
const Placements = "roundrobin, sed, si, ri, index, local"

// NewPlacer returns the placement policy for tasks spawned anywhere, by
// name (the --placement flag):
//
//   - roundrobin: the hosts in turn, PVM's default;
//   - sed: Dynamic-SED's mapping — the delay class with the smallest
//     expected delay for the spawn's tasks, filling its fastest hosts first;
//   - si, ri, index: sender-initiated and receiver-initiated load sharing
//     and the heterogeneous load acceptance index (package sched/share),
//     deciding task by task from the hosts' speeds, cores and task counts;
//   - local: every task on the master.
//
// seed makes the policies that probe random hosts reproducible.
func NewPlacer(name string, seed uint64) (Placer, error) {
	switch strings.ToLower(name) {
	case "", "roundrobin", "rr":
		return &RoundRobin{}, nil
	case "sed":
		return &sedPlacer{}, nil
	case "si", "ri", "index", "local":
		p, err := share.New(name)
		if err != nil {
			return nil, err
		}
		return &sharePlacer{p: p, rng: rand.New(rand.NewPCG(seed, 0x9e3779b9))}, nil
	}
	return nil, fmt.Errorf("placement %q: want one of %s", name, Placements)
}

// sharePlacer adapts a load-sharing policy to placing a spawn's tasks: each
// task is placed in turn, counting the ones placed before it. The spawn
// originates at the master (the first host).
type sharePlacer struct {
	p   share.Placer
	rng *rand.Rand
}

func (s *sharePlacer) Place(hosts []HostInfo, n int) ([]task.HostID, error) {
	if len(hosts) == 0 {
		return nil, fmt.Errorf("place %d tasks: %w", n, task.ErrNoSuchHost)
	}
	snap := make([]share.Host, len(hosts))
	for i, h := range hosts {
		snap[i] = share.Host{Name: h.Name, Speed: max(h.Speed, 1e-9), Cores: max(h.Cores, 1), Tasks: h.Tasks}
	}
	out := make([]task.HostID, n)
	for i := range out {
		d, err := s.p.Place(0, snap, s.rng)
		if err != nil {
			return nil, fmt.Errorf("place with %s: %w", s.p.Name(), err)
		}
		out[i] = hosts[d.Host].ID
		snap[d.Host].Tasks++
	}
	return out, nil
}

// sedPlacer maps a spawn of n tasks with Dynamic-SED (minsize = maxsize =
// n). When no delay class offers n virtual nodes, the tasks go round-robin
// over the hosts ordered fastest first.
type sedPlacer struct{}

func (sedPlacer) Place(hosts []HostInfo, n int) ([]task.HostID, error) {
	if len(hosts) == 0 {
		return nil, fmt.Errorf("place %d tasks: %w", n, task.ErrNoSuchHost)
	}
	snap := hostSnapshot(hosts, SchedConfig{})
	m, err := sched.Plan(snap, sched.Job{MinSize: n, MaxSize: n})
	if err != nil {
		return nil, err
	}
	out := make([]task.HostID, 0, n)
	byName := map[string]task.HostID{}
	for _, h := range hosts {
		byName[h.Name] = h.ID
	}
	if m.Class > 0 {
		for _, h := range snap.Hosts { // the snapshot's order, for determinism
			for range m.Placement[h.Name] {
				out = append(out, byName[h.Name])
			}
		}
	}
	for i := 0; len(out) < n; i++ { // no class fits: fastest hosts first, in turn
		best := fastest(snap.Hosts)
		out = append(out, byName[best[i%len(best)].Name])
	}
	return out, nil
}

// hostSnapshot describes the hosts to the scheduler, with the policy's
// configuration: α is the host's speed factor as its daemon reports it
// (the reciprocal of its speed when it reports none), the load all its
// runnable processes, and the free memory unknown (infinite) when not
// reported.
func hostSnapshot(hosts []HostInfo, cfg SchedConfig) *sched.Snapshot {
	s := &sched.Snapshot{Classes: cfg.classes(), Params: cfg.params()}
	for _, h := range hosts {
		alpha := h.Alpha
		if alpha <= 0 {
			alpha = 1
			if h.Speed > 0 {
				alpha = 1 / h.Speed
			}
		}
		mem := math.Inf(1)
		if h.MemFreeMiB > 0 {
			mem = float64(h.MemFreeMiB)
		}
		s.Hosts = append(s.Hosts, sched.Host{Name: h.Name, Alpha: alpha, Load: h.Load, MemFree: mem,
			Users: h.Users, MaxUsers: h.MaxUsers})
	}
	return s
}

func fastest(hs []sched.Host) []sched.Host {
	out := slices.Clone(hs)
	slices.SortStableFunc(out, func(a, b sched.Host) int { return cmp.Compare(a.Delay(), b.Delay()) })
	return out
}

// SpawnJob starts a parallel job of req.Type mapped with SED (master): the
// delay class with the smallest expected delay time among those offering at
// least minSize virtual nodes, and min(its availability, maxSize) tasks on
// its fastest hosts. maxSize 0 means no upper bound.
func (d *Daemon) SpawnJob(ctx context.Context, parent task.TID, req task.SpawnRequest, minSize, maxSize int) ([]task.TID, error) {
	defer d.placing()()
	if minSize < 1 {
		minSize = 1
	}
	if maxSize != 0 && maxSize < minSize {
		return nil, fmt.Errorf("spawn job: max %d below min %d", maxSize, minSize)
	}
	if _, err := task.New(req.Type, nil); err != nil {
		return nil, err
	}
	hosts := d.placeable()
	snap := hostSnapshot(hosts, d.cfg.Sched)
	m, err := sched.Plan(snap, sched.Job{MinSize: minSize, MaxSize: maxSize})
	if err != nil {
		return nil, fmt.Errorf("spawn job: %w", err)
	}
	if m.Class == 0 {
		return nil, fmt.Errorf("spawn job of at least %d tasks: no delay class offers that many (availability %v)", minSize, m.Availability)
	}
	if err := checkSpawnCount(m.Size, d.cfg.MaxSpawn); err != nil {
		return nil, fmt.Errorf("spawn job: %w", err)
	}
	done, err := d.admitSpawn(ctx, parent, 0, m.Size)
	if err != nil {
		return nil, fmt.Errorf("spawn job: %w", err)
	}
	d.log.Info("job mapped with SED", "type", req.Type, "class", m.Class, "size", m.Size, "edt", m.EDT, "placement", m.Placement)
	var tids []task.TID
	defer func() { done(tids) }()
	var on, started []task.HostID
	for _, h := range hosts {
		if m.Placement[h.Name] > 0 {
			on = append(on, h.ID)
		}
	}
	hold := len(on) > 1
	if hold {
		defer func() { d.releaseSpawn(started, tids) }()
	}
	for _, h := range hosts {
		n := m.Placement[h.Name]
		if n == 0 {
			continue
		}
		r := req
		r.Count, r.Host = n, ""
		rep, settle, err := d.startNumbered(ctx, h.ID, spawnArgs{Parent: parent, Req: r, Hold: hold})
		settle()
		if len(rep.TIDs) > 0 {
			started = append(started, h.ID)
		}
		tids = append(tids, rep.TIDs...)
		d.startedInClass(rep.TIDs, m.Class)
		if err != nil {
			return tids, fmt.Errorf("spawn job on %s: %w", h.Name, err)
		}
	}
	return tids, nil
}

// placeable lists the hosts placement may choose (master): every host, or
// all but the master's own when it hosts no tasks (Config.MasterNoTasks),
// but a host registering again after its deletion.
func (d *Daemon) placeable() []HostInfo {
	hs := d.Hosts()
	// A host registering again after its deletion is not announced yet.
	up := hs[:0]
	for _, h := range hs {
		if h.Liveness != livenessRejoining {
			up = append(up, h)
		}
	}
	hs = up
	if !d.cfg.MasterNoTasks || len(hs) < 2 {
		return hs
	}
	out := hs[:0]
	for _, h := range hs {
		if h.ID != MasterID {
			out = append(out, h)
		}
	}
	return out
}

// restorable lists the hosts a rollback may restore tasks on (master): the
// placeable ones the master does not suspect — a host cut off may not
// answer the restore, or may come back with the job's old tasks — or, if
// it suspects them all, every placeable one.
func (d *Daemon) restorable() []HostInfo {
	hs := d.placeable()
	var up []HostInfo
	for _, h := range hs {
		if placeableLiveness(h.Liveness) {
			up = append(up, h)
		}
	}
	if len(up) == 0 {
		return hs
	}
	return up
}
