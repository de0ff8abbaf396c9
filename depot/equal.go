package depot

import (
	"sync/atomic"
	"unsafe"
)

// equalFrames reports whether the len(trace) frames of the record at p/off
// equal trace.
//
// A record slot may be evicted and rewritten while a lock-free reader
// compares it, so the comparison may see a mix of old and new frames. That
// is harmless: callers re-read the record's state word afterwards and
// discard the result if the slot changed, as a sequence-lock reader does.
// The Go memory model makes such a racy read of machine words observe some
// written value, so the fast build compares with the runtime's vectorised
// memequal (bytes-view string comparison) when frames are 8 bytes; race
// builds compare with atomic loads so that the race detector checks the
// protocol itself (see equal_race.go and equal_norace.go).
func equalFrames[T ~uint64 | ~uintptr](p *pool, off int, trace []T) bool {
	n := len(trace)
	if off+hdrWords+n > poolWords {
		return false
	}
	w := p.words[off+hdrWords : off+hdrWords+n]
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
