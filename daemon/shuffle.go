package daemon

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/dpvm/dpvm/task"
)

// Shuffle keeps migrating running tasks to random other hosts, by either
// mode, until done is closed or ctx ends, and returns how many moves
// succeeded (master). It stresses the migration protocol while a program
// runs: tests use it to check that results do not change, and it shows
// what a program's tasks cost to move. Tasks for which keep reports true
// are left alone; choices come from seed.
func (d *Daemon) Shuffle(ctx context.Context, done <-chan struct{}, seed uint64, keep func(TaskInfo) bool) int {
	rng := rand.New(rand.NewPCG(seed, 0x5f))
	modes := []Via{Direct}
	if d.cfg.SharedDir != "" {
		modes = append(modes, Indirect)
	}
	made := 0
	for {
		select {
		case <-done:
			return made
		case <-ctx.Done():
			return made
		default:
		}
		hosts := d.Hosts()
		ts, err := d.AllTasks(ctx, false)
		var cands []TaskInfo
		for _, ti := range ts {
			if ti.State == Running && (keep == nil || !keep(ti)) {
				cands = append(cands, ti)
			}
		}
		if err != nil || len(cands) == 0 || len(hosts) < 2 {
			select { // nothing to move yet: look again shortly
			case <-done:
				return made
			case <-ctx.Done():
				return made
			case <-time.After(time.Millisecond):
			}
			continue
		}
		ti := cands[rng.IntN(len(cands))]
		to := hosts[rng.IntN(len(hosts))].Name
		if to == ti.Host {
			continue
		}
		if _, err := d.Migrate(ctx, ti.TID, to, modes[rng.IntN(len(modes))]); err == nil {
			made++
		}
	}
}

// KeepTask is a Shuffle filter that leaves the given tasks where they are.
func KeepTask(tids ...task.TID) func(TaskInfo) bool {
	return func(ti TaskInfo) bool {
		for _, t := range tids {
			if ti.TID == t {
				return true
			}
		}
		return false
	}
}
