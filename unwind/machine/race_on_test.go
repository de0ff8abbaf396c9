//go:build race

package machine

// raceEnabled: the race detector's instrumentation allocates, so
// allocation counts are only asserted without it.
const raceEnabled = true
