//go:build !race

package unwind_test

const raceEnabled = false
