//go:build race

package kcapture_test

// race is set under the race detector, which slows inflating tenfold:
// the bomb tests then check allocation only, not wall time.
const race = true
