package daemon

import (
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/dpvm/dpvm/daemon/metrics"
	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing/member"
	"github.com/dpvm/dpvm/task"
)

// This file is the daemon's side of package metrics: the snapshot a scrape
// reads, and the translation of the daemon's records (moves, scheduler
// checks) into the package's. The hooks elsewhere are one call each.

// Metrics is the daemon's metrics (nil when Config.Metrics is nil).
func (d *Daemon) Metrics() *metrics.Metrics { return d.met }

// metricsSnapshot is the daemon's state for one scrape.
func (d *Daemon) metricsSnapshot() metrics.Snapshot {
	s := metrics.Snapshot{Tasks: map[string]int{}}
	d.ht.mu.Lock()
	s.Tasks[Running.String()] = len(d.ht.tasks)
	s.Tasks["moving"] = len(d.ht.moving)
	s.Tasks["arriving"] = len(d.ht.incoming)
	for _, st := range []TaskState{Exited, Failed, Killed} {
		s.Tasks[st.String()] = 0
	}
	for _, h := range d.ht.exited {
		s.Tasks[h.state.String()]++
	}
	for _, h := range d.ht.tasks {
		n, b := h.mb.stats()
		s.MailboxMessages += n
		s.MailboxBytes += b
		s.MailboxMaxMessages = max(s.MailboxMaxMessages, n)
	}
	d.ht.mu.Unlock()
	if d.frames != nil {
		s.FrameBytes, s.FramePeakBytes = d.frames.held()
	}
	sample := d.lastSample()
	s.External = sample.External
	s.Load = float64(s.Tasks[Running.String()]) + sample.External
	s.Users = sample.Users
	s.MemFreeBytes = mibBytes(sample.MemFreeMiB)
	if d.nw == nil {
		return s
	}
	n := d.nw
	n.mu.Lock()
	peers := make([]*peer, 0, len(n.peers))
	for _, p := range n.peers {
		peers = append(peers, p)
	}
	n.mu.Unlock()
	for _, p := range peers {
		if sc, ok := p.conn.(transport.StatsConn); ok {
			st := sc.Stats()
			s.Conns = append(s.Conns, metrics.Conn{Peer: p.name(), SmoothedRTT: st.SmoothedRTT, MinRTT: st.MinRTT,
				BytesSent: st.BytesSent, BytesReceived: st.BytesReceived, PacketsSent: st.PacketsSent,
				PacketsReceived: st.PacketsReceived, PacketsLost: st.PacketsLost, CongestionWindow: st.CongestionWindow})
		}
	}
	if d.cfg.Master {
		for _, h := range d.Hosts() {
			s.Hosts = append(s.Hosts, metrics.Host{Name: h.Name, Load: h.Load, Tasks: h.Tasks, Users: h.Users,
				MemFreeBytes: mibBytes(float64(h.MemFreeMiB)), Suspected: h.Liveness == member.Suspected.String(), SilentSeconds: float64(h.SilentMS) / 1000})
		}
	}
	return s
}

// mibBytes converts a free-memory figure in MiB to bytes; 0 means unknown
// (-1).
func mibBytes(mib float64) float64 {
	if mib <= 0 {
		return -1
	}
	return mib * (1 << 20)
}

// moveEnded records a move the master ran (see Migrate): frozen is when
// the task was suspended (zero if it never was), err why it did not
// commit.
func (d *Daemon) moveEnded(res MigrateResult, start, frozen time.Time, err error) {
	if d.met == nil {
		return
	}
	now := time.Now()
	mv := metrics.Move{ID: res.Move, TID: res.TID.String(), From: d.hostName(res.From), To: d.hostName(res.To),
		Mode: string(res.Via), Outcome: metrics.OutcomeCommitted, Duration: now.Sub(start),
		Bytes: res.CheckpointBytes, End: now}
	if mv.Mode == "" {
		mv.Mode = string(Direct)
	}
	if !frozen.IsZero() {
		mv.Freeze = now.Sub(frozen)
	}
	if err != nil {
		mv.Outcome, mv.Err = metrics.OutcomeFailed, err.Error()
		if !frozen.IsZero() {
			mv.Outcome = metrics.OutcomeAborted
		}
	} else if res.FreezeMS > 0 {
		mv.Freeze = time.Duration(res.FreezeMS * float64(time.Millisecond))
	}
	d.met.MoveEnded(mv)
}

// hostName names host id for metrics and events ("" for none).
func (d *Daemon) hostName(id task.HostID) string {
	if id == 0 {
		return ""
	}
	for _, h := range d.Hosts() {
		if h.ID == id {
			return h.Name
		}
	}
	return id.String()
}

// schedObserved records a scheduler check made at now: listed says
// whether it listed the hosts' processes; ps are its per-process outcomes.
func (d *Daemon) schedObserved(now time.Time, listed bool, ps []ProcessStatus) {
	if d.met == nil {
		return
	}
	var decs []metrics.Decision
	if listed {
		decs = make([]metrics.Decision, 0, len(ps))
		for _, p := range ps {
			dec := metrics.Decision{TID: p.TID.String(), Host: p.Host, Reason: p.Candidate, Location: p.Decision}
			switch {
			case strings.HasPrefix(p.Decision, "to "):
				dec.Action = "migrate"
			case strings.HasPrefix(p.Decision, "stay"):
				dec.Action = "stay"
			case p.Candidate != "":
				dec.Action = "candidate"
			}
			decs = append(decs, dec)
		}
	}
	d.met.SchedChecked(now, listed, decs)
}

// jobCheckpointed records a job checkpoint (master) that started at start;
// a checkpoint refused because its job is gone is not counted.
func (d *Daemon) jobCheckpointed(job uint64, start time.Time, err error) {
	if errors.Is(err, ErrNoJob) {
		return
	}
	d.met.JobCheckpointed(job, time.Since(start), err)
}

// taskLog is the logger of a task's lines: the daemon's (which names the
// host) with the task, and its job where it has one.
func (d *Daemon) taskLog(h *hosted) *slog.Logger {
	if h.job != 0 {
		return d.log.With("tid", h.tid, "job", h.job)
	}
	return d.log.With("tid", h.tid)
}
