package daemon

import (
	"context"
	"fmt"

	"github.com/dpvm/dpvm/task"
)

// spawnOneJob places and starts req.Count tasks as one new job (master),
// as PVM's console starts 'spawn -count': the first is the job's root and
// the job's groups are theirs together. When not every task starts, those
// that did are killed and the job ends.
func (d *Daemon) spawnOneJob(ctx context.Context, req task.SpawnRequest, opts JobOptions) ([]task.TID, error) {
	if err := checkSpawnCount(req.Count, d.cfg.MaxSpawn); err != nil {
		return nil, err
	}
	release, err := d.admitCallerJobs(ctx, 1)
	if err != nil {
		return nil, err
	}
	js := d.newRootJob(ctx, req, opts)
	release(1)
	tids, err := d.spawnAnywhere(ctx, 0, js.id, req)
	if err == nil && len(tids) < req.Count {
		err = fmt.Errorf("%d of %d tasks started", len(tids), req.Count)
	}
	if err != nil {
		if len(tids) > 0 {
			kctx, cancel := context.WithTimeout(d.ctx, 2*d.cfg.MoveTimeout)
			_, kerr := d.KillJob(kctx, js.id)
			cancel()
			if kerr != nil {
				d.log.Warn("spawn of one job failed part-way; killing the tasks started failed", "job", js.id, "started", len(tids), "error", kerr)
			}
		}
		d.endJob(js)
		return nil, fmt.Errorf("spawn %d tasks as one job: %w", req.Count, err)
	}
	d.jobRunning(js, tids[0])
	return tids, nil
}
