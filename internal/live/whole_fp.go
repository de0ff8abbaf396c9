//go:build amd64 || arm64

package live

import "unsafe"

// wholeHit answers Callers(skip, pc) for the chain from start (Callers'
// own frame record) from the whole-stack cache: it returns the count
// stored, or -1 if the chain is not its slot's, with slot the slot's
// index if it may take this stack (empty, or its entry missed
// wholeReplace times), else -1. It reads the first hintFrames frames
// again rather than take walkProbe's from pc: that saved nothing
// measurable (the rest of the chain's loads wait for the fourth record
// either way).
//
//go:norace
//go:nocheckptr
func wholeHit(start unsafe.Pointer, skip int, pc []uintptr) (n, slot int) {
	stop := stopPC.Load()
	limit := min(uintptr(start), ^uintptr(0)-maxStack) + maxStack // limitFor(start), clamped
	fp := start
	r0 := *(*uintptr)(unsafe.Add(fp, ptrSize))
	p1 := *(*unsafe.Pointer)(fp)
	if u := uintptr(p1); u <= uintptr(fp) || u >= limit || u&(ptrSize-1) != 0 || r0 == stop || r0 >= addrMask {
		return -1, -1
	}
	w0 := r0 | uintptr(skip)<<addrBits
	r1 := *(*uintptr)(unsafe.Add(p1, ptrSize))
	p2 := *(*unsafe.Pointer)(p1)
	if u := uintptr(p2); u <= uintptr(p1) || u >= limit || u&(ptrSize-1) != 0 || r1 == stop {
		return -1, -1
	}
	r2 := *(*uintptr)(unsafe.Add(p2, ptrSize))
	p3 := *(*unsafe.Pointer)(p2)
	if u := uintptr(p3); u <= uintptr(p2) || u >= limit || u&(ptrSize-1) != 0 || r2 == stop {
		return -1, -1
	}
	r3 := *(*uintptr)(unsafe.Add(p3, ptrSize))
	p4 := *(*unsafe.Pointer)(p3)
	if u := uintptr(p4); u <= uintptr(p3) || u >= limit || u&(ptrSize-1) != 0 || r3 == stop {
		return -1, -1
	}
	key, slot := wholeKey(uint64(w0), uint64(r1), uint64(r2), uint64(r3))
	ws := &wholeTab[slot]
	if ws.key.Load() == key {
		e := ws.e.Load()
		if e == nil {
			return -1, slot
		}
		if *(*[hintFrames]uintptr)(e.phys) == [hintFrames]uintptr{w0, r1, r2, r3} {
			if m, why := walkCompare(start, p4, unsafe.Pointer(&e.phys[0]), hintFrames, len(e.phys)); why == walkEnd && m == len(e.phys) {
				return copy(pc, e.pcs), -1
			}
		}
	} else if ws.e.Load() == nil {
		return -1, slot
	}
	if wholeMiss[slot]++; wholeMiss[slot] >= wholeReplace {
		return -1, slot
	}
	return -1, -1
}
