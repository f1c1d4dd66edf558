//go:build race

package replica

// raceEnabled: the race detector slows the simulations about tenfold, so
// TestFailover runs fewer seeds under it.
const raceEnabled = true
