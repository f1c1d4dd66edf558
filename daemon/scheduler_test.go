package daemon

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/load"
	"github.com/dpvm/dpvm/sched"
	"github.com/dpvm/dpvm/task"
)

// TestSchedulerEvacuatesBusyHost runs the master's Dynamic-SED loop with a
// short δT: when interactive users arrive on a host (injected), its
// parallel tasks migrate away within about c²max·δT, and they still work.
func TestSchedulerEvacuatesBusyHost(t *testing.T) {
	params := sched.DefaultParams()
	params.C1Max, params.C2Max = 3, 2
	vm := startVM(t, 3, Config{Sched: SchedConfig{Period: 100 * time.Millisecond, Params: &params}})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		movers, err := c.Spawn(&movingTask{}, 2, task.OnHost("h2"))
		if err != nil {
			return err
		}
		users := 2
		if err := m.injectAt(ctx, "h2", load.Overlay{Users: &users}, false); err != nil {
			return err
		}
		// Poll the task list: real sockets and a real clock give no other
		// signal that the scheduler has acted.
		deadline := time.Now().Add(30 * time.Second)
		for {
			ts, err := m.AllTasks(ctx, false)
			if err != nil {
				return err
			}
			left := 0
			for _, ti := range ts {
				if (ti.TID == movers[0] || ti.TID == movers[1]) && ti.Host == "h2" {
					left++
				}
			}
			if left == 0 && m.SchedStatus().Migrations >= 2 {
				break // moved, and the check that moved them is over
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d tasks still on the busy host after 30 s: %+v", left, m.SchedStatus())
			}
			time.Sleep(20 * time.Millisecond)
		}
		st := m.SchedStatus()
		if st.Migrations < 2 || st.Checks == 0 || len(st.Availability) != len(st.Classes) {
			return fmt.Errorf("status after the evacuation: %+v", st)
		}
		for _, mv := range movers {
			for i := range 5 {
				if err := c.Send(mv, 1, i); err != nil {
					return err
				}
			}
			if err := stopMover(c, mv, 5); err != nil {
				return fmt.Errorf("after the move: %w", err)
			}
		}
		return nil
	})
}

// TestSchedulerQuietChecksSkipListing: while nothing starts, ends or moves
// and no process is counting or a migration candidate, the checks
// go on without listing the hosts' processes (Listings stays, Checks
// grows) and the status keeps the processes of the last listing; when
// users arrive on a host holding a task, the checks list again, count, and
// the task leaves.
func TestSchedulerQuietChecksSkipListing(t *testing.T) {
	vm := startVM(t, 3, Config{Sched: SchedConfig{Period: 20 * time.Millisecond}})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		// One task on each of h2 and h3, the root on h1: delay 2 each,
		// below every class's bound.
		var movers []task.TID
		for _, h := range []string{"h2", "h3"} {
			tids, err := c.Spawn(&movingTask{}, 1, task.OnHost(h))
			if err != nil {
				return err
			}
			movers = append(movers, tids...)
		}
		listsBoth := func(st SchedStatus) bool {
			n := 0
			for _, p := range st.Processes {
				if p.TID == movers[0] && p.Host == "h2" || p.TID == movers[1] && p.Host == "h3" {
					n++
				}
			}
			return n == 2
		}
		st, err := waitSched(m, "listing both tasks", listsBoth)
		if err != nil {
			return err
		}
		// Ten more checks with nothing happening: none lists.
		st, err = waitSched(m, "ten checks later", func(s SchedStatus) bool { return s.Checks >= st.Checks+10 })
		if err != nil {
			return err
		}
		quiet, err := waitSched(m, "ten quiet checks", func(s SchedStatus) bool { return s.Checks >= st.Checks+10 })
		if err != nil {
			return err
		}
		if quiet.Listings != st.Listings || !listsBoth(quiet) {
			return fmt.Errorf("quiet checks listed: %d listings then %d, status %+v", st.Listings, quiet.Listings, quiet)
		}
		for _, p := range quiet.Processes {
			if p.Counter != 0 || p.Candidate != "" {
				return fmt.Errorf("quiet check: %+v", p)
			}
		}
		users := 2
		if err := m.injectAt(ctx, "h2", load.Overlay{Users: &users}, false); err != nil {
			return err
		}
		moved, err := waitSched(m, "evacuated", func(s SchedStatus) bool { return s.Migrations >= 1 })
		if err != nil {
			return err
		}
		// The four checks that counted (c²max) listed.
		if moved.Listings < quiet.Listings+4 {
			return fmt.Errorf("%d listings before the users, %d after the moves", quiet.Listings, moved.Listings)
		}
		for _, mv := range movers {
			if err := stopMover(c, mv, 0); err != nil {
				return fmt.Errorf("after the move: %w", err)
			}
		}
		return nil
	})
}

// TestSchedulerListsLocalSpawn: a task spawned by a task on its own host
// does not pass through the master, yet the next checks list it, because
// its host reports its new task count at once. The heartbeat, which also
// carries that count, is an hour here, so nothing else could tell.
func TestSchedulerListsLocalSpawn(t *testing.T) {
	vm := startVM(t, 3, Config{Heartbeat: time.Hour, DeadAfter: 2 * time.Hour,
		Sched: SchedConfig{Period: 20 * time.Millisecond}})
	m := vm.Master()
	lists := func(st SchedStatus, tid task.TID, host string) bool {
		for _, p := range st.Processes {
			if p.TID == tid && p.Host == host {
				return true
			}
		}
		return false
	}
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		spawner, err := c.Spawn(fn(t, func(c *task.Ctx, _ int) error {
			var start int
			if _, err := c.Recv(c.Parent(), 1, &start); err != nil {
				return err
			}
			kid, err := c.Spawn(&movingTask{}, 1, task.OnHost("h3"))
			if err != nil {
				return err
			}
			if err := c.Send(c.Parent(), 2, kid[0]); err != nil {
				return err
			}
			var done int
			_, err = c.Recv(c.Parent(), 3, &done)
			return err
		}), 1, task.OnHost("h3"))
		if err != nil {
			return err
		}
		st, err := waitSched(m, "listing the spawner", func(s SchedStatus) bool { return lists(s, spawner[0], "h3") })
		if err != nil {
			return err
		}
		quiet, err := waitSched(m, "ten checks later", func(s SchedStatus) bool { return s.Checks >= st.Checks+10 })
		if err != nil {
			return err
		}
		if err := c.Send(spawner[0], 1, 0); err != nil {
			return err
		}
		var kid task.TID
		if _, err := c.Recv(spawner[0], 2, &kid); err != nil {
			return err
		}
		if kid.Host() != vm.Daemons[2].cfg.HostID {
			return fmt.Errorf("the kid %v does not run on h3", kid)
		}
		after, err := waitSched(m, "listing the kid", func(s SchedStatus) bool { return lists(s, kid, "h3") })
		if err != nil {
			return err
		}
		if after.Listings <= quiet.Listings {
			return fmt.Errorf("listings %d before the kid, %d after", quiet.Listings, after.Listings)
		}
		return c.Send(spawner[0], 3, 0)
	})
}

// waitSched polls the master's scheduler status until ok holds, for at
// most 30 s: real sockets and a real clock give no other signal of the
// scheduler's checks.
func waitSched(m *Daemon, what string, ok func(SchedStatus) bool) (SchedStatus, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := m.SchedStatus()
		if ok(st) {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("after 30 s, still not %s: %+v", what, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReportDue: a heartbeat carries a load report when a figure the
// scheduler reads changed beyond its threshold, and otherwise every
// ReportEvery beats.
func TestReportDue(t *testing.T) {
	base := loadReport{info: HostInfo{Tasks: 3, External: 0.5, MemFreeMiB: 4096, Users: 0, Alpha: 1, LoadSource: "proc"}, jobs: []uint64{7}, sent: true}
	with := func(f func(r *loadReport)) loadReport {
		r := base
		r.jobs = slices.Clone(base.jobs)
		f(&r)
		return r
	}
	cases := []struct {
		name  string
		last  loadReport
		now   loadReport
		beats int
		want  bool
	}{
		{"unchanged", base, base, 1, false},
		{"unchanged, the tenth beat", base, base, 10, true},
		{"never sent", loadReport{}, base, 1, true},
		{"a task more", base, with(func(r *loadReport) { r.info.Tasks++ }), 1, true},
		{"external load within the threshold", base, with(func(r *loadReport) { r.info.External += 0.2 }), 1, false},
		{"external load beyond it", base, with(func(r *loadReport) { r.info.External -= 0.3 }), 1, true},
		{"free memory within the threshold", base, with(func(r *loadReport) { r.info.MemFreeMiB -= 31 }), 1, false},
		{"free memory beyond it", base, with(func(r *loadReport) { r.info.MemFreeMiB += 40 }), 1, true},
		{"free memory now unknown", base, with(func(r *loadReport) { r.info.MemFreeMiB = 0 }), 1, true},
		{"a user", base, with(func(r *loadReport) { r.info.Users = 1 }), 1, true},
		{"speed", base, with(func(r *loadReport) { r.info.Alpha = 2 }), 1, true},
		{"load source", base, with(func(r *loadReport) { r.info.LoadSource = "proc+injected" }), 1, true},
		{"a job ended", base, with(func(r *loadReport) { r.jobs = nil }), 1, true},
		{"another job", base, with(func(r *loadReport) { r.jobs = []uint64{7, 9} }), 1, true},
	}
	for _, c := range cases {
		if got := reportDue(c.last, c.now, c.beats, 10); got != c.want {
			t.Errorf("%s: reportDue = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSchedulerListsChangedHosts: a check lists every host the first time,
// then only the hosts where tasks started or ended and, in turn, a tenth
// of the others (their oldest listings), so that each is listed at least
// once in listEvery checks; schedDirty makes it list every host again.
func TestSchedulerListsChangedHosts(t *testing.T) {
	const hosts = 21 // the master and 20 others
	vm := startMemVM(t, hosts, &faults{}, Config{})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	idle := fn(t, func(c *task.Ctx, _ int) error {
		_, err := c.Recv(task.AnyTask, task.AnyTag, nil, task.Safe())
		return err
	})
	ids := map[string]task.HostID{}
	for _, h := range m.Hosts() {
		ids[h.Name] = h.ID
	}
	spawnOn := func(host string) task.TID {
		t.Helper()
		tids, err := m.spawnAnywhere(ctx, 0, 0, task.SpawnRequest{Type: "daemon.test.fn", State: mustState(t, idle), Count: 1, Host: host})
		if err != nil {
			t.Fatal(err)
		}
		return tids[0]
	}
	for i := 2; i <= hosts; i++ {
		spawnOn(fmt.Sprintf("h%d", i))
	}
	// Until every host has reported its task, a report may mark its host
	// changed again.
	reported := func(want int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			n := 0
			for _, h := range m.Hosts() {
				n += h.Tasks
			}
			if n == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the hosts report %d tasks, want %d", n, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	reported(hosts - 1)
	list := func() ([]TaskInfo, int) {
		t.Helper()
		ts, called, err := m.listProcesses(ctx, m.Hosts())
		if err != nil {
			t.Fatal(err)
		}
		return ts, called
	}
	ts, called := list()
	if called != hosts-1 || len(ts) != hosts-1 {
		t.Fatalf("first listing: %d hosts called, %d tasks; want %d and %d", called, len(ts), hosts-1, hosts-1)
	}
	list() // takes up a report's mark that came as the first listing began
	// Nothing changed: two hosts (a tenth of 20) each check, the oldest
	// first, and every host within listEvery checks.
	seen := map[task.HostID]bool{}
	for range listEvery {
		ts, called := list()
		if called != 2 || len(ts) != hosts-1 {
			t.Fatalf("a check with nothing changed called %d hosts and saw %d tasks; want 2 and %d", called, len(ts), hosts-1)
		}
		for id, l := range m.sched.listings {
			if l.round == m.sched.rounds {
				seen[id] = true
			}
		}
	}
	if len(seen) != hosts-1 {
		t.Fatalf("within %d checks %d hosts were listed, want every one of %d", listEvery, len(seen), hosts-1)
	}
	// A task started on h7: its host is listed besides the two in turn,
	// and the new task is seen.
	tid := spawnOn("h7")
	reported(hosts)
	m.sched.mu.Lock()
	m.sched.dirtyHosts = map[task.HostID]bool{ids["h7"]: true} // the spawn's mark and the report's, once
	m.sched.mu.Unlock()
	ts, called = list()
	if called != 3 || len(ts) != hosts || m.sched.listings[ids["h7"]].round != m.sched.rounds {
		t.Fatalf("after a spawn on h7: %d hosts called, %d tasks, h7 listed in round %d of %d", called, len(ts), m.sched.listings[ids["h7"]].round, m.sched.rounds)
	}
	// It ends: the master hears of it and its host is listed again.
	if err := m.KillTask(ctx, tid); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ts, _ = list()
		if len(ts) == hosts-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed task is still listed: %d tasks", len(ts))
		}
		time.Sleep(10 * time.Millisecond)
	}
	m.schedDirty()
	if _, called := list(); called != hosts-1 {
		t.Fatalf("after schedDirty: %d hosts called, want %d", called, hosts-1)
	}
}

// TestPongDue: at the default heartbeat (1 s, DeadAfter 5 s) the master
// answers every other ping of an idle host; a long DeadAfter does not make
// it answer more rarely than that.
func TestPongDue(t *testing.T) {
	for _, c := range []struct {
		silent, beat, dead time.Duration
		want               bool
	}{
		{time.Second, time.Second, 5 * time.Second, false},
		{2 * time.Second, time.Second, 5 * time.Second, true},
		{1300 * time.Millisecond, time.Second, 5 * time.Second, true}, // a quarter of DeadAfter
		{20 * time.Millisecond, 20 * time.Millisecond, 10 * time.Minute, false},
		{40 * time.Millisecond, 20 * time.Millisecond, 10 * time.Minute, true},
		{0, time.Second, 5 * time.Second, false},
	} {
		if got := pongDue(c.silent, c.beat, c.dead); got != c.want {
			t.Errorf("pongDue(%v, %v, %v) = %v, want %v", c.silent, c.beat, c.dead, got, c.want)
		}
	}
}

// TestSchedStepMatchesStep holds the scheduler's kept snapshot to the
// policy on a fresh one: over seeded random sequences of checks, with hosts
// joining, leaving and reporting, and tasks started, ended and moved
// between them, schedStep (the incremental snapshot brought up to date
// with the check's hosts and listed processes) decides the migrations
// sched.Step decides on the snapshot the master builds, the counters agree,
// and the status lists every process as the status built from Step's
// decisions does.
func TestSchedStepMatchesStep(t *testing.T) {
	moves := 0
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 7))
		params := sched.DefaultParams()
		params.MemReserve, params.MemMin = 256, 128
		params.C1Max, params.C2Max = 1+rng.IntN(4), 1+rng.IntN(3)
		d := &Daemon{sched: &schedState{}}
		hosts := map[string]sched.Host{}
		procs := map[string]sched.Process{}
		tids := map[string]task.TID{}
		next := uint32(1)
		alphas := []float64{0.5, 1, 1, 2, 4}
		newHost := func(name string) sched.Host {
			h := sched.Host{Name: name, Alpha: alphas[rng.IntN(len(alphas))], Load: float64(rng.IntN(4)), MemFree: float64(rng.IntN(4096))}
			if rng.IntN(5) == 0 {
				h.Users = 1
			}
			return h
		}
		for i := range 4 {
			n := fmt.Sprintf("h%d", i)
			hosts[n] = newHost(n)
		}
		nextHost := 4
		for check := range 30 {
			var names []string
			for n := range hosts {
				names = append(names, n)
			}
			slices.Sort(names)
			for range rng.IntN(4) {
				switch op := rng.IntN(6); {
				case op == 0:
					n := fmt.Sprintf("h%d", nextHost)
					nextHost++
					hosts[n] = newHost(n)
				case op == 1 && len(hosts) > 2:
					n := names[rng.IntN(len(names))]
					if _, ok := hosts[n]; !ok {
						continue
					}
					delete(hosts, n)
					for tid, p := range procs {
						if p.Host == n {
							delete(procs, tid)
						}
					}
				case op == 2:
					n := names[rng.IntN(len(names))]
					if _, ok := hosts[n]; ok {
						hosts[n] = newHost(n)
					}
				default:
					n := names[rng.IntN(len(names))]
					if _, ok := hosts[n]; !ok {
						continue
					}
					for range 1 + rng.IntN(3) {
						tid := task.NewTID(1, next)
						next++
						tids[tid.String()] = tid
						procs[tid.String()] = sched.Process{TID: tid.String(), Host: n, Class: rng.IntN(5), Mem: float64(rng.IntN(512))}
					}
				}
			}
			// The snapshot as schedCheck builds it: the hosts' figures,
			// the listed processes with their counters, each host's load
			// at least its processes.
			snap := &sched.Snapshot{Classes: sched.DefaultClasses(), Params: params}
			count := map[string]int{}
			for _, p := range procs {
				p.Counter = d.schedCounter(p.TID)
				snap.Processes = append(snap.Processes, p)
				count[p.Host]++
			}
			for _, h := range hosts {
				h.Load = max(h.Load, float64(count[h.Name]))
				snap.Hosts = append(snap.Hosts, h)
			}
			want, err := sched.Step(snap.Clone())
			if err != nil {
				t.Fatalf("seed %d check %d: %v", seed, check, err)
			}
			got, err := d.schedStep(snap)
			if err != nil {
				t.Fatalf("seed %d check %d: %v", seed, check, err)
			}
			if !reflect.DeepEqual(got.Migrations, want.Migrations) {
				t.Fatalf("seed %d check %d: migrations %v, Step's %v", seed, check, got.Migrations, want.Migrations)
			}
			for tid, c := range want.Counters {
				if n := d.schedCounter(tid); n != c {
					t.Fatalf("seed %d check %d: %s counter %d, Step's %d", seed, check, tid, n, c)
				}
			}
			status := d.schedProcessStatus(snap, got, tids)
			var ref []ProcessStatus
			for _, dec := range want.Decisions {
				ps := ProcessStatus{TID: tids[dec.Process.TID], Host: dec.Process.Host, Class: dec.Process.Class, MemMiB: dec.Process.Mem,
					Counter: dec.Counter, Limit: dec.Limit}
				if dec.Reason != 0 {
					ps.Candidate = dec.Reason.String()
				}
				if dec.Selected {
					ps.Decision = dec.Location.String()
				}
				ref = append(ref, ps)
			}
			slices.SortFunc(ref, func(a, b ProcessStatus) int { return cmp.Compare(a.TID, b.TID) })
			if len(ref) == 0 {
				ref = []ProcessStatus{}
			}
			if !reflect.DeepEqual(status, ref) {
				t.Fatalf("seed %d check %d: status\n%+v\nfrom Step's decisions\n%+v", seed, check, status, ref)
			}
			d.sched.status.Processes = status
			// Carry out the migrations; one in four fails.
			for _, m := range got.Migrations {
				if rng.IntN(4) > 0 {
					p := procs[m.TID]
					p.Host = m.To
					procs[m.TID] = p
					moves++
				}
			}
		}
	}
	if moves < 100 {
		t.Fatalf("only %d moves: the sequences do not exercise the location policy", moves)
	}
}

// BenchmarkSchedStep times the policy's part of a master's check that
// lists (StepSeconds in `dpvm sched status`) at 4,096 hosts and 100,000
// tasks, one host's report changed since the last check: schedStep (the
// kept snapshot brought up to date with the check's hosts and processes,
// then its check) against sched.Step on the snapshot, as the master ran
// it before. The listing and the status are not counted.
func BenchmarkSchedStep(b *testing.B) {
	const nh, np = 4096, 100000
	rng := rand.New(rand.NewPCG(5, 6))
	snap := &sched.Snapshot{Classes: sched.DefaultClasses(), Params: sched.DefaultParams()}
	alphas := []float64{0.5, 1, 1, 2, 4}
	for i := range nh {
		snap.Hosts = append(snap.Hosts, sched.Host{Name: fmt.Sprintf("h%04d", i), Alpha: alphas[rng.IntN(len(alphas))],
			MemFree: float64(64*1024 + rng.IntN(64*1024))})
	}
	for i := range np {
		h := rng.IntN(nh)
		snap.Processes = append(snap.Processes, sched.Process{TID: task.NewTID(1, uint32(i+1)).String(), Host: snap.Hosts[h].Name,
			Class: 1 + rng.IntN(4), Mem: float64(rng.IntN(64))})
		snap.Hosts[h].Load++
	}
	// Settle the cluster: check and carry out the migrations (the hosts
	// then report their new loads) until nothing moves for a while.
	d := &Daemon{sched: &schedState{}}
	hi := map[string]int{}
	for i, h := range snap.Hosts {
		hi[h.Name] = i
	}
	for quiet := 0; quiet < 8; {
		for j := range snap.Processes {
			snap.Processes[j].Counter = d.schedCounter(snap.Processes[j].TID)
		}
		res, err := d.schedStep(snap)
		if err != nil {
			b.Fatal(err)
		}
		if quiet++; len(res.Migrations) > 0 {
			quiet = 0
		}
		at := map[string]int{}
		for j, p := range snap.Processes {
			at[p.TID] = j
		}
		for _, m := range res.Migrations {
			snap.Processes[at[m.TID]].Host = m.To
			snap.Hosts[hi[m.From]].Load--
			snap.Hosts[hi[m.To]].Load++
		}
	}
	for j := range snap.Processes {
		snap.Processes[j].Counter = d.schedCounter(snap.Processes[j].TID)
	}
	change := func(s *sched.Snapshot, i int) {
		s.Hosts[i%nh].MemFree += float64(64 * (1 - 2*(i/nh%2)))
	}
	b.Run("step", func(b *testing.B) {
		s := snap.Clone()
		i := 0
		for b.Loop() {
			change(s, i)
			i++
			if _, err := sched.Step(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("kept", func(b *testing.B) {
		s := snap.Clone()
		i := 0
		for b.Loop() {
			change(s, i)
			i++
			for j := range s.Processes {
				s.Processes[j].Counter = d.schedCounter(s.Processes[j].TID)
			}
			if _, err := d.schedStep(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
