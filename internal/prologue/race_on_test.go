//go:build race

package prologue

// raceSlowdown scales the bombs' time bound: the race detector makes
// the code several times slower.
const raceSlowdown = 10
