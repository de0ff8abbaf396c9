//go:build !race

package prologue

// raceSlowdown scales the bombs' time bound (see race_on_test.go).
const raceSlowdown = 1
