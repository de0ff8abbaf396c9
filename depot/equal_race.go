//go:build race

package depot

// raceEnabled selects the atomic frame comparison under the race detector.
const raceEnabled = true
