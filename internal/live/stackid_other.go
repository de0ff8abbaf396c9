//go:build !amd64 && !arm64

package live

import (
	"runtime"
	"unsafe"
)

// FastIDs is false: without frame pointers there is no one-pass walk.
const FastIDs = false

// WalkHash returns ok false: there is no walk here.
func WalkHash(start, fp unsafe.Pointer, cut int, rec []uint64, seed, mul uint64) (int, uint64, bool) {
	return 0, 0, false
}

// Hit finds nothing: there is no walk here.
func (ids *IDs) Hit(start, fp unsafe.Pointer, cut int) (uint32, bool) { return 0, false }

// WalkFirst does nothing: there is no walk here.
func (ids *IDs) WalkFirst(start, fp unsafe.Pointer, cut int, g *Guess) {}

// A Guess is where WalkFirst stopped: nowhere here.
type Guess struct{}

// OK is false: there is no walk here.
func (g *Guess) OK() bool { return false }

// Resume returns ok false: there is no walk here.
func (ids *IDs) Resume(start unsafe.Pointer, g *Guess, rec []uint64) (int, uint64, bool) {
	return 0, 0, false
}

// SetHint does nothing: there are no guesses here.
func (ids *IDs) SetHint(g *Guess, n int, hd uint32) {}

// SkipIDFrames returns ok false: there is no walk here.
func SkipIDFrames(start unsafe.Pointer, skip int) (unsafe.Pointer, int, bool) { return nil, 0, false }

// ResolveID stores Callers' answer (runtime.Callers here: no frame
// pointers) as a logical record. start is unused.
//
//go:noinline
func ResolveID(start unsafe.Pointer, skip int, ids *IDs) (uint32, error) {
	idResolves.Add(1)
	var buf [maxIDFrames]uint64
	pc := make([]uintptr, ids.MaxFrames)
	// Frame 0 is runtime.Callers, 1 ResolveID, 2 the public Save.
	n := runtime.Callers(clampSkip(max(skip, 0))+2, pc)
	return ids.storeLogical(&buf, pc[:n])
}
