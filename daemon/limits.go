package daemon

import (
	"errors"
	"fmt"
)

// ErrLimit is returned when a request asks for more than a configured
// bound allows (Config.MaxSpawn, Config.MaxTasks). Counts that arrive from
// the network or a client are checked against their bound before anything
// is allocated for them.
var ErrLimit = errors.New("over a configured limit")

// ErrInternal is a call that failed inside the daemon (its handler
// panicked): the call fails, the daemon goes on.
var ErrInternal = errors.New("internal error in the daemon")

// Default bounds.
const (
	// DefaultMaxSpawn is how many tasks one spawn may ask for.
	DefaultMaxSpawn = 1 << 20
	// DefaultMaxTasks is how many tasks one daemon hosts at most.
	DefaultMaxTasks = 1 << 20
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
