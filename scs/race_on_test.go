//go:build race

package scs

// raceEnabled: the race detector slows the model tenfold, so the
// concurrency tests drive fewer operations.
const raceEnabled = true
