//go:build race

package live

// raceEnabled: this is a race build; Callers is runtime.Callers.
const raceEnabled = true
