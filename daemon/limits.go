package daemon

import (
	"errors"
	"fmt"
	"sync"

	mnode "github.com/dpvm/dpvm/routing/master"
)

// ErrLimit is returned when a request asks for more than a configured
// bound allows (Config.MaxSpawn, Config.MaxTasks, the quotas
// Config.MaxUserTasks, Config.MaxUserJobs and Config.MaxJobTasks). Counts that arrive from
// the network or a client are checked against their bound before anything
// is allocated for them.
// The group server's bounds (Config.MaxGroups, MaxGroupName,
// MaxGroupMembers) are the master node's, which refuses with this same
// error.
var ErrLimit = mnode.ErrLimit

// ErrInternal is a call that failed inside the daemon (its handler
// panicked): the call fails, the daemon goes on.
var ErrInternal = errors.New("internal error in the daemon")

// Default bounds.
const (
	// DefaultMaxSpawn is how many tasks one spawn may ask for.
	DefaultMaxSpawn = 1 << 20
	// DefaultMaxTasks is how many tasks one daemon hosts at most.
	DefaultMaxTasks = 1 << 20
	// DefaultMaxUserTasks is how many live tasks one user may hold: a
	// thirty-second of what one daemon hosts, so that no user alone fills
	// a host, let alone the machine.
	DefaultMaxUserTasks = DefaultMaxTasks / 32
	// DefaultMaxUserJobs is how many live jobs one user may run.
	DefaultMaxUserJobs = 1 << 10
	// DefaultMaxJobTasks is how many live tasks one job may hold.
	DefaultMaxJobTasks = DefaultMaxUserTasks
	// DefaultMaxGroups is how many groups the group server holds at once.
	DefaultMaxGroups = 1 << 16
	// DefaultMaxGroupName is the longest group name, in bytes.
	DefaultMaxGroupName = 256
	// DefaultMaxGroupMembers is how many instances one group may have.
	DefaultMaxGroupMembers = 1 << 20
	// DefaultMaxWatchers is how many notify registrations may watch one
	// task, and how many host event registrations one task may hold.
	DefaultMaxWatchers = 1 << 12
	// DefaultMaxNotify is how many tasks one notify call may name.
	DefaultMaxNotify = 1 << 16
	// DefaultMaxConns is how many connections a daemon accepts at once.
	DefaultMaxConns = 1 << 12
	// DefaultMaxConnsPerPeer is how many connections a daemon accepts at
	// once from the holder of one certificate.
	DefaultMaxConnsPerPeer = 256
)

// checkSpawnCount checks a spawn's count against its bounds: at least one
// task, at most max.
func checkSpawnCount(n, max int) error {
	switch {
	case n < 1:
		return fmt.Errorf("spawn %d tasks: count must be at least 1", n)
	case n > max:
		return fmt.Errorf("spawn %d tasks: at most %d in one spawn: %w", n, max, ErrLimit)
	}
	return nil
}

// prealloc is how many elements to reserve for a result of n elements
// whose n came from a request: the slice grows past it as results really
// arrive, so an absurd n costs nothing before it is refused.
func prealloc(n int) int { return min(max(n, 0), 1024) }

// checkNotify checks how many tasks one notify call names.
func (d *Daemon) checkNotify(n int) error {
	if n > d.cfg.MaxNotify {
		return fmt.Errorf("notify on %d tasks: at most %d in one call: %w", n, d.cfg.MaxNotify, ErrLimit)
	}
	return nil
}

// addHostWatchers registers host event watchers of one task, at most
// Config.MaxWatchers held for that task.
func (d *Daemon) addHostWatchers(ws ...hostWatcher) error {
	if len(ws) == 0 {
		return nil
	}
	d.ht.mu.Lock()
	defer d.ht.mu.Unlock()
	held := 0
	for _, w := range d.ht.hostW {
		if w.who == ws[0].who {
			held++
		}
	}
	if held+len(ws) > d.cfg.MaxWatchers {
		return fmt.Errorf("notify on host events: %v holds %d registrations, at most %d: %w", ws[0].who, held, d.cfg.MaxWatchers, ErrLimit)
	}
	d.ht.hostW = append(d.ht.hostW, ws...)
	return nil
}

// connCount counts a daemon's accepted connections, in all and by the
// certificate they were made with (Config.MaxConns, MaxConnsPerPeer).
type connCount struct {
	mu    sync.Mutex
	total int
	by    map[string]int
}

// take counts a new connection of peer, or says why it is one too many.
func (c *connCount) take(peer string, maxTotal, maxPerPeer int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[string]int{}
	}
	switch {
	case c.total >= maxTotal:
		return fmt.Sprintf("too many connections: %d, at most %d", c.total, maxTotal)
	case c.by[peer] >= maxPerPeer:
		return fmt.Sprintf("too many connections of %s: %d, at most %d", peer, c.by[peer], maxPerPeer)
	}
	c.total++
	c.by[peer]++
	return ""
}

// put uncounts an ended connection of peer.
func (c *connCount) put(peer string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total--
	if c.by[peer]--; c.by[peer] <= 0 {
		delete(c.by, peer)
	}
}
