package live

import (
	"unsafe"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// ptrSize is the size of a frame-record word.
const ptrSize = unsafe.Sizeof(uintptr(0))

// maxStack bounds how far above the first frame record a walk may go. It is
// the Go runtime's default maximum goroutine stack on 64-bit systems
// (runtime/debug.SetMaxStack, 1 GB); no frame of the same goroutine can lie
// further away unless a program raises that limit, and then a walk deeper
// than 1 GB stops with a "fp outside stack" error (Callers falls back to
// runtime.Callers).
const maxStack = 1 << 30

// Rule names of the corruption errors a walk can return.
const (
	ruleMisaligned   = "misaligned fp"
	ruleNonMonotonic = "non-monotonic fp"
	ruleOutside      = "fp outside stack"
)

// Why the frame pointer is typed as unsafe.Pointer rather than uintptr (or
// the walker made nosplit): Callers keeps its frame pointer across the
// learning path, which allocates and calls runtime.Callers and
// runtime.CallersFrames, so the goroutine's stack can grow, and move, in the
// middle of a walk. A nosplit walker could not make those calls, and a
// uintptr would be left pointing into the freed old stack. An unsafe.Pointer
// local that points into the stack is adjusted by the runtime's stack copier
// like any other pointer, and the saved frame pointers inside the copied
// frames are adjusted too (runtime/stack.go, adjustframe), so every later
// read stays on the live stack (TestCallersStackGrowth). A word read from the
// stack is held as a uintptr and becomes a pointer only after it has passed
// the checks, by unsafe.Add from the current frame pointer, so a corrupt
// value is never seen as a pointer by the garbage collector or by checkptr.

// checkFirst checks the first frame pointer of a walk (non-nil is assumed):
// it must be word aligned.
func checkFirst(fp unsafe.Pointer) error {
	if uintptr(fp)&(ptrSize-1) != 0 {
		return errs.Corrupt(ruleMisaligned, uint64(uintptr(fp)))
	}
	return nil
}

// The termination rules, checked on every saved frame pointer nfp read
// from the record at fp before it is followed (suspect checks them all at
// once, inlined in the walk loops; badNext says which one broke):
//   - 0 ends the chain: the goroutine's entry frame, called from goexit;
//   - nfp must be word aligned;
//   - nfp must lie strictly above fp: the stack grows down, so callers'
//     records lie at higher addresses, and this also guarantees termination;
//   - nfp must lie less than maxStack above the walk's first record.

// badNext returns the error for a saved frame pointer nfp, read from the
// record at fp, that broke a termination rule.
//
//go:noinline
func badNext(start, fp unsafe.Pointer, nfp uintptr) error {
	switch {
	case nfp&(ptrSize-1) != 0:
		return errs.Corrupt(ruleMisaligned, uint64(nfp))
	case nfp <= uintptr(fp):
		return errs.Corruptf(ruleNonMonotonic, uint64(nfp), "previous fp %#x", uintptr(fp))
	default:
		return errs.Corruptf(ruleOutside, uint64(nfp), "first fp %#x", uintptr(start))
	}
}

// limitFor returns the exclusive upper bound for frame pointers of a walk
// whose first record is at start. start and the bound are plain numbers: the
// walk loops make no calls, so the stack cannot move under them (a stack is
// only moved by a call's growth check, or by the garbage collector at a
// synchronous safe point; an asynchronously preempted goroutine's stack is
// never moved), and after a call the bound is recomputed.
func limitFor(start unsafe.Pointer) uintptr {
	limit := uintptr(start) + maxStack
	if limit < uintptr(start) {
		return ^uintptr(0)
	}
	return limit
}

// suspect reports whether the saved frame pointer nfp, read from the record
// at fp, is 0 (the end of the chain) or breaks a termination rule: one
// unsigned comparison checks fp < nfp < limit.
func suspect(fp unsafe.Pointer, nfp, limit uintptr) bool {
	return nfp-uintptr(fp)-1 >= limit-uintptr(fp)-1 || nfp&(ptrSize-1) != 0
}

// retPC returns the return address stored one word above fp.
func retPC(fp unsafe.Pointer) uintptr {
	return *(*uintptr)(unsafe.Add(fp, ptrSize))
}

// walkFP stores the return addresses of the frame-record chain starting at
// fp into pc, innermost first, after dropping the first skip of them. It
// stops when pc is full, at the end of the chain (nil error), or at the
// first record that breaks a rule (a *errs.CorruptError, with the frames
// found so far). It never writes beyond len(pc).
func walkFP(fp unsafe.Pointer, skip int, pc []uintptr) (int, error) {
	if fp == nil || len(pc) == 0 {
		return 0, nil
	}
	if uintptr(fp)&(ptrSize-1) != 0 {
		return 0, errs.Corrupt(ruleMisaligned, uint64(uintptr(fp)))
	}
	start := fp
	limit := limitFor(start)
	// Skipped frames are walked first, so the storing loop has no branch
	// for them.
	for ; skip > 0; skip-- {
		if nfp := *(*uintptr)(fp); suspect(fp, nfp, limit) {
			if nfp == 0 {
				return 0, nil
			}
			return 0, badNext(start, fp, nfp)
		}
		fp = *(*unsafe.Pointer)(fp) // the word just checked, reloaded as a pointer
	}
	n, last := storeFP(fp, limit, pc)
	if n < len(pc) {
		// storeFP stopped at last, whose saved frame pointer is suspect:
		// the end of the chain, or a broken rule.
		if nfp := *(*uintptr)(last); nfp != 0 {
			return n, badNext(start, last, nfp)
		}
	}
	return n, nil
}

// storeFP is walkFP's storing loop, kept small so that it runs from
// registers: it stores return addresses from fp on until pc is full or a
// saved frame pointer is suspect, and returns the count and the last record.
func storeFP(fp unsafe.Pointer, limit uintptr, pc []uintptr) (int, unsafe.Pointer) {
	for n := range pc {
		pc[n] = retPC(fp)
		// The saved frame pointer must be above this one, below the
		// limit and aligned (suspect, written as three compares, which
		// compile to fewer instructions here than its one-compare form).
		next := *(*unsafe.Pointer)(fp)
		if u := uintptr(next); u <= uintptr(fp) || u >= limit || u&(ptrSize-1) != 0 {
			return n + 1, fp
		}
		fp = next
	}
	return len(pc), fp
}
