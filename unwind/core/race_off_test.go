//go:build !race

package core_test

// raceSlowdown scales the bombs' time bound (see race_on_test.go).
const raceSlowdown = 1
