package sim

import (
	"errors"
	"fmt"
	"strings"
)

// Fault is a set of kinds of fault a run may take. Which faults a seed
// takes, when and how strongly, is drawn from the seed.
type Fault uint16

// Kinds of fault.
const (
	// FaultLoss drops messages between daemons (data, acknowledgements,
	// refusals, a move's control calls and their answers): reliable
	// delivery resends, a lost call times out.
	FaultLoss Fault = 1 << iota
	// FaultDup delivers some data messages, acknowledgements and
	// refusals twice.
	FaultDup
	// FaultReorder lets a message overtake one sent before it on the same
	// link.
	FaultReorder
	// FaultDelay holds some messages back for long (tens of
	// milliseconds), past the resend timeout.
	FaultDelay
	// FaultPartition cuts pairs of hosts apart for a while: nothing
	// passes between them.
	FaultPartition
	// FaultFreeze stops a host for a while: what is sent to it waits
	// until it thaws, and its tasks do not run.
	FaultFreeze
	// FaultMove moves tasks between hosts at seeded moments (the
	// master's move machine against the hosts' move halves).
	FaultMove
	// FaultCheckpoint takes job checkpoints at a seeded period (the
	// job checkpoint machine against the hosts' halves).
	FaultCheckpoint
	// FaultCrash crashes a host for good at a seeded moment: the master
	// deems it lost, and the job rolls back to its newest complete
	// checkpoint. With FaultCheckpoint the crash waits for one; without,
	// the job is lost and the seed fails, saying so.
	FaultCrash
	// FaultRestart crashes a host at a seeded moment and brings it back
	// after the master has deemed it lost: empty, under its old host ID
	// (daemon/membership.go's readmit), as a new incarnation. The job
	// rolls back as for FaultCrash; what was in flight to the old
	// incarnation dies with it, and what is sent to the host afterwards
	// meets the new one, which refuses messages for tasks it lacks. The
	// master counts the host again (placement, moves, checkpoints); on
	// demand the other hosts' route caches hear of its return
	// (route.EvHostUp).
	FaultRestart
	// FaultMaster crashes the master at a seeded moment, as
	// daemon/README.md describes its loss: the hosts run on, and their
	// tasks keep computing and exchanging messages, but nothing that
	// needs the master is answered (spawns, kills, groups, barriers,
	// moves, checkpoints, rollbacks, the root's exit). A job cannot
	// survive its master: once the hosts learn it is gone (after
	// detectAfter) the job's tasks are killed and the run ends with
	// ErrJobLostWithMaster, an outcome Check accepts beside the fault-free
	// result (a root that ended before the crash gives the latter).
	FaultMaster
)

// FaultAll is every kind of fault but FaultMaster: a crashed master ends
// the job in nearly every seed, and would leave the other faults little
// to test; name it to add it.
const FaultAll = FaultLoss | FaultDup | FaultReorder | FaultDelay | FaultPartition | FaultFreeze | FaultMove | FaultCheckpoint | FaultCrash | FaultRestart

// FaultDefault is every kind but job checkpoints, crashes and restarts
// (FaultAll adds them) and FaultMaster: moves and the network's faults.
const FaultDefault = FaultAll &^ (FaultCheckpoint | FaultCrash | FaultRestart)

var faultNames = []struct {
	f    Fault
	name string
}{
	{FaultLoss, "loss"}, {FaultDup, "dup"}, {FaultReorder, "reorder"}, {FaultDelay, "delay"},
	{FaultPartition, "partition"}, {FaultFreeze, "freeze"}, {FaultMove, "move"},
	{FaultCheckpoint, "checkpoint"}, {FaultCrash, "crash"}, {FaultRestart, "restart"}, {FaultMaster, "master"},
}

// FaultNames lists the names ParseFaults takes, in order.
func FaultNames() []string {
	out := make([]string, len(faultNames))
	for i, n := range faultNames {
		out[i] = n.name
	}
	return out
}

// ErrBadFault: a fault name ParseFaults does not know.
var ErrBadFault = errors.New("unknown fault")

// ParseFaults parses a comma-separated list of fault names (see
// FaultNames), "all" (FaultAll), "default" (FaultDefault) or "none".
func ParseFaults(s string) (Fault, error) {
	var f Fault
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		switch part {
		case "", "none":
			continue
		case "all":
			f |= FaultAll
			continue
		case "default":
			f |= FaultDefault
			continue
		}
		found := false
		for _, n := range faultNames {
			if n.name == part {
				f |= n.f
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("%q (want all, default, none or a list of %s): %w", part, strings.Join(FaultNames(), ", "), ErrBadFault)
		}
	}
	return f, nil
}

func (f Fault) String() string {
	if f == 0 {
		return "none"
	}
	switch f {
	case FaultAll:
		return "all"
	case FaultDefault:
		return "default"
	}
	var parts []string
	for _, n := range faultNames {
		if f&n.f != 0 {
			parts = append(parts, n.name)
		}
	}
	return strings.Join(parts, ",")
}
