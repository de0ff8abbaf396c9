//go:build !race

package scs

const raceEnabled = false
