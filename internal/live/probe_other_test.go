//go:build !amd64 && !arm64

package live

import "unsafe"

// probeWalkOf: no walkProbe without frame pointers.
func probeWalkOf(start unsafe.Pointer, pc []uintptr, stop uintptr) (int, int, bool) {
	return 0, 0, false
}
