//go:build race

package cli

// raceEnabled: this test binary runs under the race detector, whose shadow
// memory a child's peak resident set would include.
const raceEnabled = true
