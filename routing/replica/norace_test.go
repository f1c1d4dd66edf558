//go:build !race

package replica

// raceEnabled: see race_test.go.
const raceEnabled = false
