//go:build race

package unwind_test

// raceEnabled: the race detector makes closures and iterators allocate, so
// absolute allocation counts are only asserted without it.
const raceEnabled = true
