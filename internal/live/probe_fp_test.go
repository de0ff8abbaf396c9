//go:build amd64 || arm64

package live

import "unsafe"

// probeWalkOf runs Callers' walk loop (walkProbe) from start with the
// boundary stop, and goes on with rawWalk where it stopped early at a miss,
// as fastWalk does.
func probeWalkOf(start unsafe.Pointer, pc []uintptr, stop uintptr) (int, int, bool) {
	n, why, fp, _ := walkProbe(start, pc, stop)
	if why == rawFull && n < len(pc) {
		k, kwhy, _ := rawWalk(start, fp, pc[n:], stop)
		n, why = n+k, kwhy
	}
	return n, why, true
}
