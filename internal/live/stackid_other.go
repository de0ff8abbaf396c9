//go:build !amd64 && !arm64

package live

import (
	"runtime"
	"unsafe"
)

// SaveID stores Callers' answer (runtime.Callers here: no frame pointers)
// as a logical record. start is unused.
//
//go:noinline
func SaveID(start unsafe.Pointer, skip int, ids *IDs) (uint32, error) {
	var buf [maxIDFrames]uint64
	pc := make([]uintptr, ids.MaxFrames)
	// Frame 0 is runtime.Callers, 1 SaveID, 2 the public Save.
	n := runtime.Callers(clampSkip(max(skip, 0))+2, pc)
	return ids.storeLogical(&buf, pc[:n])
}
