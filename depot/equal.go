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

// words8 views an 8-byte-element slice, capacity included, as []uint64
// (T must have 8 bytes).
func words8[T ~uint64 | ~uintptr](s []T) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(s))), cap(s))[:len(s)]
}

// equalFrames reports whether the first len(w) words of rec (a record's
// frames onward) equal w.
func equalFrames(rec, w []uint64) bool {
	if raceEnabled {
		return equalAtomic(rec, w)
	}
	n := len(w)
	return n <= len(rec) && bytesOf(rec[:n]) == bytesOf(w)
}

// bytesOf views words as a string of their bytes, without copying.
func bytesOf(w []uint64) string {
	return unsafe.String((*byte)(unsafe.Pointer(unsafe.SliceData(w))), 8*len(w))
}

// equalAtomic compares with one atomic load per stored frame, four frames
// per branch.
func equalAtomic(rec, w []uint64) bool {
	if len(rec) < len(w) {
		return false
	}
	rec = rec[:len(w)]
	for len(w) >= 4 && len(rec) >= 4 {
		t, s := (*[4]uint64)(w), (*[4]uint64)(rec)
		if (atomic.LoadUint64(&s[0])^t[0])|(atomic.LoadUint64(&s[1])^t[1])|
			(atomic.LoadUint64(&s[2])^t[2])|(atomic.LoadUint64(&s[3])^t[3]) != 0 {
			return false
		}
		w, rec = w[4:], rec[4:]
	}
	for i := range w {
		if i >= len(rec) || atomic.LoadUint64(&rec[i]) != w[i] {
			return false
		}
	}
	return true
}

// readFrames copies the stored frames rec into out (same length).
func readFrames(out, rec []uint64) {
	if !raceEnabled {
		copy(out, rec)
		return
	}
	for i := range out {
		out[i] = atomic.LoadUint64(&rec[i])
	}
}

// writeFrames stores w into the record words rec (same length). The slot
// is not reachable as a live record while it is written.
func writeFrames(rec, w []uint64) {
	if !raceEnabled {
		copy(rec, w)
		return
	}
	for i, pc := range w {
		atomic.StoreUint64(&rec[i], pc)
	}
}
