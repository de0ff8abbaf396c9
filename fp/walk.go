package fp

import (
	"iter"
	"sync/atomic"

	"github.com/unwindkit/unwindkit/internal/tracehash"
)

// Walk unwinds c and calls fn for each frame, innermost first, until fn
// returns false (EndStopped), the walk reaches its end (EndFinal,
// EndZeroFP), or it fails (EndError with the error). Frames reported
// before a failure stay reported: a failed walk has given the frames it
// had. With [Config.Reliable], a walk fn stopped is unreliable: Walk
// returns EndStopped and an error wrapping [ErrUnreliable], as
// arch_stack_walk_reliable fails when its consumer returns false.
func Walk(c *Config, fn func(Frame) bool) (End, error) {
	var u Unwinder
	u.Init(c)
	for u.Next() {
		if !fn(u.Frame()) {
			u.Stop()
			break
		}
	}
	return u.End(), u.Err()
}

// Frames returns an iterator over the frames of c, innermost first. Each
// frame comes with a nil error; a walk that fails ends with one last pair
// (Frame{}, err). A complete walk and one the consumer breaks off yield no
// error; use Walk or Unwinder to tell EndFinal from EndZeroFP.
//
// With [Config.Reliable], Frames yields an error wrapping [ErrUnreliable]
// itself whenever the walk breaks a reliability rule before the consumer
// stops (an exception boundary, an unrecovered trampoline, an end other
// than FINAL). An iterator cannot report anything after its consumer
// breaks off, so breaking off yields no verdict at all: a caller that
// needs one ("this trace is reliable") must use [Save], [SaveEnd], [Walk]
// or an [Unwinder], which report a stopped reliable walk as unreliable.
func Frames(c *Config) iter.Seq2[Frame, error] {
	return func(yield func(Frame, error) bool) {
		var u Unwinder
		u.Init(c)
		for u.Next() {
			if !yield(u.Frame(), nil) {
				return
			}
		}
		if err := u.Err(); err != nil {
			yield(Frame{}, err)
		}
	}
}

// Save copies the return addresses of c into store, innermost first, after
// removing exactly skip frames from the innermost end
// (stack_trace_save(store, len(store), skip)). It returns the number of
// addresses stored. A full store is not an error: the count is then
// len(store). A failed walk returns the addresses it had and the error.
//
// With [Config.Reliable] (stack_trace_save_tsk_reliable), Save succeeds
// only when the walk reached the task's FINAL record and the store never
// became full: a store that fills up, even exactly with the outermost
// frame, gives the addresses stored and an error wrapping
// [ErrUnreliable], because the kernel's consumer stops the reliable walk
// as soon as the store is full. Leave one spare entry.
func Save(c *Config, store []uint64, skip int) (int, error) {
	n, _, err := SaveEnd(c, store, skip)
	return n, err
}

// SaveEnd is Save that also says how the walk ended. When the store fills
// up, SaveEnd takes one more step: EndFinal (or EndZeroFP) if the trace
// was complete and fitted exactly, EndStopped if more frames follow or that
// step fails (a full store is never an error). In reliable mode a full
// store ends the walk at once: EndStopped with [ErrUnreliable].
func SaveEnd(c *Config, store []uint64, skip int) (n int, end End, err error) {
	var u Unwinder // zero: init need not clear it again
	if c != nil && c.Reliable {
		return u.saveReliable(c, store, skip)
	}
	return u.save(c, store, skip)
}

// SaveHashed is Save that also returns h, the running hash of store[:n]
// under the key (seed, mul) of package depot's HashKey (h = seed, then
// depot.HashKey.Add of each stored frame, innermost first), ready for
// depot.Depot.SaveHashed. It folds the stored frames in one sweep of the
// store right after the walk, while they are in the first-level cache;
// the stack is not read again. (Folded inside the walk's loop, the hash
// hid under the chain of loads, but the test for it cost Save's own walk
// 13-18%, measured in thread CPU time at depth 32: the loop's registers
// are all taken.)
func SaveHashed(c *Config, store []uint64, skip int, seed, mul uint64) (n int, h uint64, err error) {
	n, err = Save(c, store, skip)
	return n, tracehash.Sum(store[:n], seed, mul), err
}

// saveReliable is SaveEnd in reliable mode, for a zero u. The kernel's
// consumer (stack_trace_consume_entry) refuses an entry when the store is
// already full, and it says "stop" after storing the entry that fills the
// store; arch_stack_walk_reliable fails on either. So the walk stores into
// all but the last entry; a frame that does not fit there goes into the
// last entry and fails the walk. (Doing it here keeps the copy loop of
// save exactly the loop of the unreliable path.)
func (u *Unwinder) saveReliable(c *Config, store []uint64, skip int) (int, End, error) {
	limit := len(store) - 1
	if limit < 0 {
		limit, skip = 0, 0 // a full store refuses even a frame to skip
	}
	n, end, err := u.save(c, store[:limit], skip)
	if end != EndStopped {
		return n, end, err
	}
	if u.err != nil {
		// The step after the last frame stored failed: save does not
		// report that for a full store, but here the store was not.
		return n, EndError, u.err
	}
	// A frame did not fit in store[:limit]; save left it in u.pc.
	if n < len(store) {
		store[n] = u.pc
		n++
	}
	u.Stop() // reliable: the walk was stopped, so ErrUnreliable
	return n, u.end, unreliable(u.fp, "store of %d entries is full", len(store))
}

// save is SaveEnd for a zero u, with the full-store rule of the unreliable
// path: a frame that does not fit ends the walk with EndStopped, leaving
// u.fp and u.pc at that frame and u.end at EndNone.
func (u *Unwinder) save(c *Config, store []uint64, skip int) (n int, end End, err error) {
	if c == nil {
		u.Init(c)
	} else {
		u.init(c)
	}
	if u.end != EndNone {
		return 0, u.end, u.err
	}
	st := u.first()
	if st != stepOK {
		u.finish(st)
		return 0, u.end, u.err
	}
	// The layout's instruction masks, hoisted out of the loop so that
	// the strip (ptrauth's one spelling of XPACI, Masks.Strip, inlined)
	// keeps them in registers. FuzzWalk checks Save (this path) against
	// Walk (Layout.Strip).
	ms := u.layout.InsnMasks()
	gt, kt := c.GraphTrampoline, c.KretprobeTrampoline
	tramp := gt != 0 || kt != 0 // without them the loop compares nothing
	// The loop keeps the walk state in locals and writes it back to u
	// only around the general step.
	fp, pc := u.fp, u.pc
	cur := &u.cur
	// high-16 is the highest fp the fast path may take on the current
	// stack (see fastHigh).
	low, high, base, words := cur.low, cur.high, cur.base, cur.words
	if u.holes {
		high = u.fastHigh()
	}
	for {
		// Emit the current frame, after exactly skip frames.
		if skip > 0 {
			skip--
		} else {
			if n == len(store) {
				u.fp, u.pc = fp, pc
				return n, EndStopped, nil // a frame that does not fit
			}
			store[n] = pc
			n++
		}
		// Fast path: the next object is an ordinary frame record on the
		// current stack whose lr is no trampoline. It enforces the same
		// rules as nextFrameRecord:
		//   - fp is 8-byte aligned;
		//   - the 16-byte record lies inside the current stack, at or
		//     above its low bound (overflow-safe: low != 0 means the
		//     stack is accessible, so high > low >= 8, high-16 does not
		//     wrap, and fp <= high-16 keeps fp+16 from wrapping);
		//   - consuming it moves the low bound past it.
		// Anything else (a new stack, a meta record, a trampoline, an
		// fp at or above the task's pt_regs stackframe under
		// ABIFinalRecord, an error) takes the general step, u.next.
		if fp&7 == 0 && low != 0 && fp >= low && fp <= high-FrameRecordSize {
			i := (fp - base) / 8
			w := words[i : i+2 : i+2]
			newFP, raw := atomic.LoadUint64(&w[0]), atomic.LoadUint64(&w[1])
			spc := ms.Strip(raw)
			if (newFP != 0 || raw != 0) && (!tramp || (spc != gt || gt == 0) && (spc != kt || kt == 0)) {
				low = fp + FrameRecordSize
				fp, pc = newFP, spc
				continue
			}
		}
		cur.low, u.fp, u.pc = low, fp, pc
		if st = u.next(); st != stepOK {
			break
		}
		fp, pc = u.fp, u.pc
		low, high, base, words = cur.low, cur.high, cur.base, cur.words
		if u.cfg.ABI != ABIMetaRecord || u.holes {
			high = u.fastHigh()
		}
	}
	if st == stepFail && n == len(store) && n > 0 {
		// The step after the last stored frame failed: the store is
		// full, so that is not the caller's error.
		return n, EndStopped, nil
	}
	u.finish(st)
	return n, u.end, u.err
}

// fastHigh returns the top the fast path of save may assume for the
// current stack under ABIFinalRecord (under ABIMetaRecord it is the
// stack's top): its fp must be at most fastHigh()-16. That is the stack's
// top, lowered to the task's pt_regs stackframe (where the walk ends
// before reading), and 16 (no fp qualifies, as fp >= low >= 8 and fp is
// aligned) on a stack with Holes, where every read is checked, and for a
// reliable walk, where every record must be checked for
// the synthetic pt_regs record that marks an exception boundary. The fast
// path's loop is thus the same for every ABI; save calls this only after
// a general step, and not for the default ABI (measured: anything more
// in the default path, or in consumeStack, costs a few percent; inlined
// here, it crowds the loop's registers).
//
//go:noinline
func (u *Unwinder) fastHigh() uint64 {
	c := &u.cur
	if c.low == 0 {
		return c.high
	}
	if u.cfg.Reliable || len(u.cfg.Stacks[c.idx].Holes) != 0 {
		return FrameRecordSize
	}
	if t := u.cfg.TaskPtRegs; t != 0 {
		if f := t + u.ptRegs().StackFrame; f >= c.base && f < c.top && f+8 < c.high {
			return f + 8 // fp <= f-8: below the end
		}
	}
	return c.high
}
