package live

import (
	"runtime"
	"strings"
	"sync/atomic"
)

// clampSkip keeps skip+2 from overflowing when Callers hands skip on to
// runtime.Callers.
func clampSkip(skip int) int {
	const max = 1 << 30
	if skip > max {
		return max
	}
	return skip
}

// special reports whether the physical function fn ends what a frame-pointer
// walk can reproduce: a synthesized call to sigpanic (the faulting frame's
// pc is not a return address, and a frameless faulting leaf hides its
// caller), a cgo callback or another stack switch (the chain continues on
// other stacks), or code without Go symbol information.
func special(fn string) bool {
	switch fn {
	case "", "runtime.sigpanic":
		return true
	}
	return boundaryFuncs[fn] || strings.HasPrefix(fn, "runtime.systemstack") || strings.HasPrefix(fn, "runtime.morestack")
}

// hasPrefix reports whether l starts with p.
func hasPrefix(l, p []uintptr) bool {
	if len(p) > len(l) {
		return false
	}
	for i := range p {
		if l[i] != p[i] {
			return false
		}
	}
	return true
}

// match returns what of the expansion e the runtime recorded at the head of
// l: all of it, or all but the innermost (an inlined wrapper the runtime
// elided because of its callee).
func match(e, l []uintptr) ([]uintptr, bool) {
	if len(e) > 0 && hasPrefix(l, e) {
		return e, true
	}
	if len(e) > 1 && hasPrefix(l, e[1:]) {
		return e[1:], true
	}
	return nil, false
}

// learnSlack is how many logical frames beyond what the caller needs learn
// walks and asks the runtime for.
const learnSlack = 64

// maxHidden is the longest run of consecutive hidden frames align infers.
const maxHidden = 4

// physFrame is one physical frame seen by a learning pass.
type physFrame struct {
	ret     uintptr
	known   bool      // in the cache when the pass started
	shown   []uintptr // known: the cached verdict (nil for hidden)
	entry   uintptr   // new: the entry of the physical function (0: no symbols)
	special bool      // new: the function ends what a walk can reproduce
}

// symbolize returns the entry of the physical function that ret returns
// into, and whether that function is special (runtime.FuncForPC only: for
// an inlined pc it describes the innermost inlined function but with the
// entry of the physical one, whose name is then that of the entry pc).
func symbolize(ret uintptr) (entry uintptr, isSpecial bool) {
	f := runtime.FuncForPC(ret - 1)
	if f == nil {
		return 0, true
	}
	entry = f.Entry()
	slot := &plainEntries[(uint64(entry)*hashMul)>>(64-plainBits)]
	if slot.Load() == entry {
		return entry, false
	}
	p := runtime.FuncForPC(entry)
	if p == nil {
		return entry, true
	}
	if special(p.Name()) {
		return entry, true
	}
	slot.Store(entry)
	return entry, false
}

// plainEntries remembers entries of functions known not to be special (a
// direct-mapped table: a learning pass through known functions asks the
// runtime for one lookup per frame, not two).
const plainBits = 10

var plainEntries [1 << plainBits]atomic.Uintptr

// pcEntry returns the entry of the physical function of a pc that
// runtime.Callers recorded (the pc of a call or inline mark, plus one).
func pcEntry(pc uintptr) uintptr {
	if f := runtime.FuncForPC(pc - 1); f != nil {
		return f.Entry()
	}
	return 0
}

// maxInline bounds the logical frames one physical frame may record.
const maxInline = 64

// groupAt returns the pcs at the head of l that the physical frame
// phys[i] recorded, as runtime.Callers records a frame (tracebackPCs): its
// return address (the innermost logical frame's pc), then for each call
// inlined at that point, from the inside out, the pc of the caller's inline
// mark plus one, all in the frame's function; a wrapper the runtime elides
// is absent, so the return address itself may be. A pc that is the return
// address of a later physical frame is never an inline mark, which ends
// the group where the next frame is in the same function (recursion).
// entryOf gives the physical function of a pc of l. ok is false if nothing
// at the head of l belongs to the frame, or if the group runs to the end of
// l and l is truncated (the group may go on).
func groupAt(phys []physFrame, i int, l []uintptr, truncated bool, entryOf func(uintptr) uintptr) (shown []uintptr, ok bool) {
	f := &phys[i]
	k := 0
	if len(l) > 0 && l[0] == f.ret {
		k = 1
	}
	if f.entry == 0 {
		return l[:k], k > 0
	}
	for ; k < len(l) && k < maxInline; k++ {
		if l[k] == f.ret || isLaterRet(phys, i, l[k]) || entryOf(l[k]) != f.entry {
			return l[:k], k > 0
		}
	}
	if truncated || k == maxInline {
		return nil, false
	}
	return l[:k], k > 0
}

// isLaterRet reports whether pc is the return address of one of the
// physical frames after phys[i] that could line up next.
func isLaterRet(phys []physFrame, i int, pc uintptr) bool {
	for k := i + 1; k < len(phys) && k <= i+maxHidden; k++ {
		if phys[k].ret == pc {
			return true
		}
	}
	return false
}

// align learns what runtime.Callers records for each physical frame by
// lining the frames up with logical, the pcs runtime.Callers returned for
// the same stack starting at the same frame, and publishes the result; it
// returns how many verdicts it published and how many of them evicted from
// a recently filled bucket. passSet holds the addresses of the pass, which
// insert must not evict for each other. Frames already in the cache are
// only checked. A frame that cannot be lined up, and any special frame, is
// published as kindSlow and ends the learning. complete says the physical
// walk reached the end of the chain; then logical must be used up too, or
// the last frame is kindSlow. truncated says logical filled its buffer: a
// frame that fails to line up near its end may only have been cut off, so
// learning ends there without a verdict.
func align(phys []physFrame, logical []uintptr, complete, truncated bool, passSet map[uintptr]struct{}, entryOf func(uintptr) uintptr) (learned, recent uint64) {
	pass := func(ret uintptr) bool { _, ok := passSet[ret]; return ok }
	publish := func(ret uintptr, shown []uintptr, slow bool) {
		learned++
		if insert(ret, shown, slow, pass) {
			recent++
		}
	}
	j := 0
	for i := 0; i < len(phys); i++ {
		f := &phys[i]
		if f.known {
			if len(f.shown) > 0 && hasPrefix(logical[j:], f.shown) {
				j += len(f.shown)
				continue
			}
			if len(f.shown) == 0 && nextMatch(phys, i+1, logical[j:], truncated, entryOf) > i {
				continue // a known hidden wrapper, still hidden here
			}
			// No longer lines up: learn it again.
			f.known = false
			f.entry, f.special = symbolize(f.ret)
		}
		if f.special {
			publish(f.ret, nil, true)
			return
		}
		if shown, ok := groupAt(phys, i, logical[j:], truncated, entryOf); ok {
			publish(f.ret, shown, false)
			j += len(shown)
			continue
		}
		// Not recorded at all: a wrapper the runtime hid (or a run of
		// them, as a deferwrap closure called from runtime.deferreturn,
		// itself a wrapper), if a later frame lines up here instead.
		if k := nextMatch(phys, i+1, logical[j:], truncated, entryOf); k > i {
			for h := i; h < k; h++ {
				publish(phys[h].ret, nil, false)
			}
			i = k - 1 // frame k is lined up next
			continue
		}
		if truncated && len(logical)-j < learnSlack {
			return
		}
		publish(f.ret, nil, true)
		return
	}
	if complete && !truncated && j < len(logical) && len(phys) > 0 {
		publish(phys[len(phys)-1].ret, nil, true)
	}
	return
}

// nextMatch returns the first k in [from, from+maxHidden) whose frame lines
// up at the head of logical, or -1.
func nextMatch(phys []physFrame, from int, logical []uintptr, truncated bool, entryOf func(uintptr) uintptr) int {
	for k := from; k < len(phys) && k < from+maxHidden; k++ {
		f := &phys[k]
		if f.known && len(f.shown) > 0 && hasPrefix(logical, f.shown) {
			return k
		}
		if f.known || f.special {
			if f.known && len(f.shown) == 0 {
				continue // hidden too
			}
			return -1
		}
		if len(logical) > 0 && logical[0] == f.ret {
			return k
		}
		if _, ok := groupAt(phys, k, logical, truncated, entryOf); ok {
			return k
		}
	}
	return -1
}
