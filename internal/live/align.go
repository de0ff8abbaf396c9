package live

import (
	"runtime"
	"strings"
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
	pcs     []uintptr // the expansion (expand), once computed
	special bool      // the expansion's function ends what a walk can reproduce
	done    bool      // pcs and special are computed
}

// expansion returns the frame's expansion, computing it alone if needed (a
// known frame that no longer lines up).
func (f *physFrame) expansion() []uintptr {
	if !f.done {
		var fn string
		f.pcs, fn = expand(f.ret)
		f.special, f.done = special(fn), true
	}
	return f.pcs
}

// expand returns the logical pcs runtime.CallersFrames derives from the
// single physical return address ret (the frame and every call inlined at
// that point, innermost first, in runtime.Callers' encoding: the pc of the
// call or inline mark plus one) and the name of the physical function.
func expand(ret uintptr) (pcs []uintptr, fn string) {
	frames := runtime.CallersFrames([]uintptr{ret, 0})
	for {
		f, more := frames.Next()
		if f.PC != 0 {
			pcs = append(pcs, f.PC+1)
			fn = f.Function
		}
		if !more {
			break
		}
	}
	return pcs, fn
}

// align learns the expansion of each physical frame by lining the frames
// up with logical, the pcs runtime.Callers returned for the same stack
// starting at the same frame, and publishes the result; it returns how
// many verdicts it published and how many of them relearned an evicted
// address; passSet holds the addresses of the pass, which insert must not
// evict for each other. Frames already in the cache are only checked. A frame that
// cannot be lined up, and any special frame, is published as kindSlow and
// ends the learning. complete says the physical walk reached the end of the
// chain; then logical must be used up too, or the last frame is kindSlow.
// truncated says logical filled its buffer: a frame that fails to line up
// near its end may only have been cut off, so learning ends there without a
// verdict.
func align(phys []physFrame, logical []uintptr, complete, truncated bool, passSet map[uintptr]struct{}) (learned, relearns uint64) {
	pass := func(ret uintptr) bool { _, ok := passSet[ret]; return ok }
	publish := func(ret uintptr, shown []uintptr, slow bool) {
		learned++
		if insert(ret, shown, slow, pass) {
			relearns++
		}
	}
	j := 0
	for i := 0; i < len(phys); i++ {
		f := &phys[i]
		if f.known && len(f.shown) > 0 && hasPrefix(logical[j:], f.shown) {
			j += len(f.shown)
			continue
		}
		e := f.expansion()
		if f.special {
			publish(f.ret, nil, true)
			return
		}
		if shown, ok := match(e, logical[j:]); ok {
			publish(f.ret, shown, false)
			j += len(shown)
			continue
		}
		// Not recorded at all: a wrapper the runtime hid (or a run of
		// them, as a deferwrap closure called from runtime.deferreturn,
		// itself a wrapper), if a later frame lines up here instead.
		if k := nextMatch(phys, i+1, logical[j:]); k > i {
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

// nextMatch returns the first k in [from, from+maxHidden) whose expansion
// lines up at the head of logical, or -1.
func nextMatch(phys []physFrame, from int, logical []uintptr) int {
	for k := from; k < len(phys) && k < from+maxHidden; k++ {
		f := &phys[k]
		if f.known && len(f.shown) > 0 && hasPrefix(logical, f.shown) {
			return k
		}
		if f.expansion(); f.special {
			return -1
		}
		if _, ok := match(f.pcs, logical); ok {
			return k
		}
	}
	return -1
}
