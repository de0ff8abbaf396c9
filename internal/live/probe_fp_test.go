//go:build amd64 || arm64

package live

import "unsafe"

// probeWalkOf runs Callers' walk loop (walkProbe) from start.
func probeWalkOf(start unsafe.Pointer, pc []uintptr) (int, int, bool) {
	n, why, _, _ := walkProbe(start, pc, 0)
	return n, why, true
}
