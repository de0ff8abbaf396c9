package live

import (
	"runtime"
	"strings"
	"sync/atomic"
)

// learnCalls and slowCalls count the slow paths: walks that had to learn
// expansions from runtime.Callers, and calls answered by runtime.Callers.
var learnCalls, slowCalls atomic.Uint64

// learnFrames counts the physical frames the learning path walked.
var learnFrames atomic.Uint64

// clampSkip keeps skip+2 from overflowing when Callers hands skip on to
// runtime.Callers.
func clampSkip(skip int) int {
	const max = 1 << 30
	if skip > max {
		return max
	}
	return skip
}

// kind says what runtime.Callers records for one physical frame.
type kind uint8

const (
	kindSelf   kind = iota // the return address itself: no inlined calls
	kindMany               // entry.pcs: the frame and the calls inlined into it
	kindHidden             // nothing: a compiler wrapper the runtime elides
	kindSlow               // unknown or unusual: ask runtime.Callers instead
)

// entry is the cached expansion of one physical return address. Entries are
// immutable once published.
type entry struct {
	ret  uintptr   // the physical return address (the key)
	kind kind      // what runtime.Callers records for this frame
	pcs  []uintptr // for kindMany: logical pcs, innermost first
}

// cacheBits sizes the expansion cache: 1<<cacheBits slots, two probes each
// (64 KiB of pointers, plus 64 KiB for selfTable).
const cacheBits = 13

// table is the expansion cache, shared by all goroutines. Slots are written
// with atomic stores of immutable entries, so readers need no lock.
var table [1 << cacheBits]atomic.Pointer[entry]

// selfTable is a direct-mapped front for the common kindSelf frames: slot
// hash(ret) holds ret when ret records itself. One load answers most frames.
var selfTable [1 << cacheBits]atomic.Uintptr

// isSelf reports whether ret is known to record itself (ret != 0).
func isSelf(ret uintptr) bool {
	return selfTable[hash(ret)].Load() == ret && ret != 0
}

func hash(ret uintptr) uint32 {
	return uint32((uint64(ret) * 0x9e3779b97f4a7c15) >> (64 - cacheBits))
}

// lookup returns the cached expansion of ret, or nil.
func lookup(ret uintptr) *entry {
	h := hash(ret)
	if e := table[h].Load(); e != nil && e.ret == ret {
		return e
	}
	if e := table[h^1].Load(); e != nil && e.ret == ret {
		return e
	}
	return nil
}

// insert publishes e, preferring an empty slot or one that already holds
// e.ret, and otherwise evicting the home slot.
func insert(e *entry) {
	h := hash(e.ret)
	if e.kind == kindSelf {
		selfTable[h].Store(e.ret)
	} else {
		selfTable[h].CompareAndSwap(e.ret, 0)
	}
	for _, i := range [2]uint32{h, h ^ 1} {
		if old := table[i].Load(); old == nil || old.ret == e.ret {
			table[i].Store(e)
			return
		}
	}
	table[h].Store(e)
}

// resetCache empties the cache (tests and benchmarks of the cold path).
func resetCache() {
	for i := range table {
		table[i].Store(nil)
		selfTable[i].Store(0)
	}
}

// newEntry builds the entry for ret given the logical pcs the runtime
// records for it.
func newEntry(ret uintptr, shown []uintptr) *entry {
	switch {
	case len(shown) == 0:
		return &entry{ret: ret, kind: kindHidden}
	case len(shown) == 1 && shown[0] == ret:
		return &entry{ret: ret, kind: kindSelf}
	}
	return &entry{ret: ret, kind: kindMany, pcs: append([]uintptr(nil), shown...)}
}

// expand returns the logical pcs runtime.CallersFrames derives from the
// single physical return address ret (the frame and every call inlined at
// that point, innermost first, in runtime.Callers' encoding: the pc of the
// call or inline mark plus one) and the name of the physical function.
//
// CallersFrames only synthesizes the outer inlined frames when more pcs
// follow, so a 0 is appended; it belongs to no function and yields no frame.
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

// special reports whether the physical function fn ends what a frame-pointer
// walk can reproduce: a synthesized call to sigpanic (the faulting frame's
// pc is not a return address, and a frameless faulting leaf hides its
// caller), a cgo callback (the chain continues on other stacks), or code
// without Go symbol information.
func special(fn string) bool {
	switch fn {
	case "", "runtime.sigpanic", "runtime.cgocallback", "runtime.cgocallbackg", "runtime.cgocallbackg1":
		return true
	}
	return strings.HasPrefix(fn, "runtime.systemstack") || strings.HasPrefix(fn, "runtime.morestack")
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

// nextMatch returns the first k in [from, from+maxHidden) whose expansion
// lines up at the head of logical, or -1.
func nextMatch(phys []physFrame, from int, logical []uintptr) int {
	for k := from; k < len(phys) && k < from+maxHidden; k++ {
		if phys[k].special {
			return -1
		}
		if _, ok := match(phys[k].expansion(), logical); ok {
			return k
		}
	}
	return -1
}

// shown returns the logical pcs e records for its frame.
func (e *entry) shown() []uintptr {
	switch e.kind {
	case kindSelf:
		return []uintptr{e.ret}
	case kindMany:
		return e.pcs
	}
	return nil
}

// physFrame is one physical frame seen by align.
type physFrame struct {
	ret     uintptr
	known   *entry    // the cached entry when learning started, or nil
	pcs     []uintptr // expand(ret), filled in lazily for known frames
	special bool
}

// expansion returns expand(f.ret), computing it if needed.
func (f *physFrame) expansion() []uintptr {
	if f.pcs == nil {
		var fn string
		f.pcs, fn = expand(f.ret)
		f.special = special(fn)
	}
	return f.pcs
}

// align learns the expansion of each physical frame in phys by lining the
// frames up with logical, the pcs runtime.Callers returned for the same
// stack starting at the same frame, and publishes the result. Frames already
// in the cache are only checked. A frame that cannot be lined up, and any
// special frame, is published as kindSlow and ends the learning. complete
// says the physical walk reached the end of the chain; then logical must be
// used up too, or the last frame is kindSlow. truncated says logical filled
// its buffer: a frame that fails to line up near its end may only have been
// cut off, so learning ends there without a verdict.
func align(phys []physFrame, logical []uintptr, complete, truncated bool) {
	j := 0
	for i := 0; i < len(phys); i++ {
		f := &phys[i]
		if f.known != nil {
			if sh := f.known.shown(); len(sh) > 0 && hasPrefix(logical[j:], sh) {
				j += len(sh)
				continue
			}
		}
		e := f.expansion()
		if f.special {
			insert(&entry{ret: f.ret, kind: kindSlow})
			return
		}
		if shown, ok := match(e, logical[j:]); ok {
			insert(newEntry(f.ret, shown))
			j += len(shown)
			continue
		}
		// Not recorded at all: a wrapper the runtime hid (or a run of
		// them, as a deferwrap closure called from runtime.deferreturn,
		// itself a wrapper), if a later frame lines up here instead.
		if k := nextMatch(phys, i+1, logical[j:]); k > i {
			for h := i; h < k; h++ {
				insert(newEntry(phys[h].ret, nil))
			}
			i = k - 1 // frame k is lined up next
			continue
		}
		if truncated && len(logical)-j < learnSlack {
			return
		}
		insert(&entry{ret: f.ret, kind: kindSlow})
		return
	}
	if complete && !truncated && j < len(logical) && len(phys) > 0 {
		insert(&entry{ret: phys[len(phys)-1].ret, kind: kindSlow})
	}
}
