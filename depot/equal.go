package depot

import (
	"sync/atomic"
	"unsafe"
)

// A record slot may be evicted and rewritten while a lock-free reader
// compares or copies it, so the reader may see a mix of old and new frames.
// That is harmless: readers validate the record's state word afterwards and
// discard the result if the slot changed, as a sequence-lock reader does
// (see the package documentation). Writers only rewrite a slot after its
// eviction has changed the state word. The Go memory model makes such racy
// reads of machine words observe some written value, so the fast build
// compares and copies with the runtime's vectorised memequal and memmove
// when frames are 8 bytes; race builds use one atomic access per frame so
// that the race detector checks the protocol itself (see equal_race.go and
// equal_norace.go).

// words8 views an 8-byte-element slice as []uint64.
func words8[T ~uint64 | ~uintptr](s []T) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

// equalFrames reports whether the len(trace) frames of the record at p/off
// equal trace.
func equalFrames[T ~uint64 | ~uintptr](p *pool, off int, trace []T) bool {
	n := len(trace)
	if off+hdrWords+n > poolWords {
		return false
	}
	w := p[off+hdrWords : off+hdrWords+n]
	if !raceEnabled && unsafe.Sizeof(T(0)) == 8 && n > 0 {
		a := unsafe.String((*byte)(unsafe.Pointer(&w[0])), 8*n)
		b := unsafe.String((*byte)(unsafe.Pointer(&trace[0])), 8*n)
		return a == b
	}
	return equalAtomic(w, trace)
}

// equalAtomic compares with one atomic load per stored frame, four frames
// per branch.
func equalAtomic[T ~uint64 | ~uintptr](w []uint64, trace []T) bool {
	if len(w) != len(trace) {
		return false
	}
	for len(trace) >= 4 && len(w) >= 4 {
		t, s := (*[4]T)(trace), (*[4]uint64)(w)
		if (atomic.LoadUint64(&s[0])^uint64(t[0]))|(atomic.LoadUint64(&s[1])^uint64(t[1]))|
			(atomic.LoadUint64(&s[2])^uint64(t[2]))|(atomic.LoadUint64(&s[3])^uint64(t[3])) != 0 {
			return false
		}
		trace, w = trace[4:], w[4:]
	}
	for i := range trace {
		if i >= len(w) || atomic.LoadUint64(&w[i]) != uint64(trace[i]) {
			return false
		}
	}
	return true
}

// readFrames copies the stored frames w into out (same length).
func readFrames[T ~uint64 | ~uintptr](out []T, w []uint64) {
	if !raceEnabled && unsafe.Sizeof(T(0)) == 8 {
		copy(words8(out), w)
		return
	}
	for i := range out {
		out[i] = T(atomic.LoadUint64(&w[i]))
	}
}

// writeFrames stores trace into the record words w (same length). The slot
// is not reachable as a live record while it is written.
func writeFrames[T ~uint64 | ~uintptr](w []uint64, trace []T) {
	if !raceEnabled && unsafe.Sizeof(T(0)) == 8 {
		copy(w, words8(trace))
		return
	}
	for i, pc := range trace {
		atomic.StoreUint64(&w[i], uint64(pc))
	}
}
