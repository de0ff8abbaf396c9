//go:build race

package core_test

// raceSlowdown scales the bombs' time bound: the race detector makes
// the code several times slower.
const raceSlowdown = 10
