//go:build race

package elfcore

// raceEnabled: the race detector is on, so timings say nothing.
const raceEnabled = true
