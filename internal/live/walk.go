package live

import (
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/unwindkit/unwindkit/fault"
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
	ruleMisaligned   = fault.RuleMisalignedFP
	ruleNonMonotonic = fault.RuleNonMonotonicFP
	ruleOutside      = fault.RuleFPOutsideStack
)

// Stack moves. The frame pointer is typed as unsafe.Pointer rather than
// uintptr, and so is the walk's first record (start): Callers keeps them
// across calls that can grow, and so move, the goroutine's stack (the
// learning path allocates and calls runtime.Callers and
// runtime.CallersFrames; without optimisation, -gcflags=all=-N -l, every
// helper is a real call with a stack check). An unsafe.Pointer local that
// points into the stack is adjusted by the runtime's stack copier like any
// other pointer, and the saved frame pointers inside the copied frames are
// adjusted too (runtime/stack.go, adjustframe), so every later read stays on
// the live stack (TestCallersStackGrowth, also run with -N -l in CI). The
// one plain number derived from them, the walk's upper bound, is computed
// from start right before a loop that makes no call at all (not even to a
// helper: the loops are written out by hand), so it cannot go stale. A word
// read from the stack is held as a uintptr and becomes a pointer only after
// it has passed the checks, by reloading it as a pointer, so a corrupt value
// is never seen as a pointer by the garbage collector or by checkptr.

// The termination rules, checked on every saved frame pointer nfp read from
// the record at fp before it is followed (the loops check them all with one
// unsigned comparison plus an alignment test; badNext says which one broke):
//   - 0 ends the chain: the goroutine's entry frame, called from goexit;
//   - nfp must be word aligned;
//   - nfp must lie strictly above fp: the stack grows down, so callers'
//     records lie at higher addresses, and this also guarantees termination;
//   - nfp must lie less than maxStack above the walk's first record;
//   - a record whose return address is in one of the runtime's boundary
//     functions (see stops) is the last: its saved frame pointer belongs to
//     another stack (a cgo callback's C or system stack).

// stopPC is the return address known to return into a function at the top
// of a goroutine stack (runtime.cgocallback: user code runs on no other
// such stack), as learned through runtime.FuncForPC by a walk that stopped
// there. Walks compare every return address with it before following the
// frame pointer beside it (one register, one compare). Until the first walk through a boundary has learned
// its address, the termination rules stop that walk (the system stack of a
// cgo callback lies far from, or below, the goroutine stacks of the Go
// heap); the walk then names the boundary and returns cleanly.
var stopPC atomic.Uintptr

// boundaryFuncs are the runtime functions that start or switch stacks: the
// frame pointer saved by a frame that returns into one of them belongs to
// another stack.
var boundaryFuncs = map[string]bool{
	"runtime.cgocallback": true, "runtime.mstart": true, "runtime.mstart0": true,
	"runtime.rt0_go": true, "runtime.mcall": true, "runtime.systemstack": true,
	"runtime.systemstack_switch": true, "runtime.morestack": true, "runtime.asmcgocall": true,
	"runtime.sigtramp": true, "runtime.cgoSigtramp": true, "runtime.sigtrampgo": true,
}

// isBoundary reports whether the return address ret lies in a boundary
// function, asking the runtime (runtime.FuncForPC), and remembers it in
// stopPC if it returns into runtime.cgocallback.
func isBoundary(ret uintptr) bool {
	f := runtime.FuncForPC(ret - 1)
	if f == nil || !boundaryFuncs[f.Name()] {
		return false
	}
	if f.Name() == "runtime.cgocallback" {
		stopPC.CompareAndSwap(0, ret)
	}
	return true
}

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
// whose first record is at start.
func limitFor(start unsafe.Pointer) uintptr {
	limit := uintptr(start) + maxStack
	if limit < uintptr(start) {
		return ^uintptr(0)
	}
	return limit
}

// Why a raw walk stopped.
const (
	rawFull = iota // pc is full; fp is the next record, which passed the rules
	rawEnd         // the chain ended (saved frame pointer 0)
	rawStop        // the last return address is a known boundary
	rawBad         // the last record's saved frame pointer broke a rule
)

// rawWalk stores the return addresses of the records from fp on into pc
// until pc is full or a record ends the walk (stop is the known boundary,
// stopPC, loaded by the caller), and returns the count, the
// reason and the record to continue from (rawFull) or the last record read.
// It calls nothing inside its loop (see "Stack moves"), and it is not
// instrumented by the race detector (the reads are of the goroutine's own
// stack).
//
//go:norace
//go:nocheckptr
func rawWalk(start, fp unsafe.Pointer, pc []uintptr, stop uintptr) (int, int, unsafe.Pointer) {
	limit := uintptr(start) + maxStack // limitFor(start), written out: no call
	if limit < uintptr(start) {
		limit = ^uintptr(0)
	}
	for n := range pc {
		ret := *(*uintptr)(unsafe.Add(fp, ptrSize))
		next := *(*unsafe.Pointer)(fp)
		pc[n] = ret
		// (A bad next is held in a pointer-typed register only here, in a
		// loop without calls: no stack scan sees it precisely.)
		if u := uintptr(next); u <= uintptr(fp) || u >= limit || u&(ptrSize-1) != 0 || ret == stop {
			switch {
			case ret == stop:
				return n + 1, rawStop, fp
			case u == 0:
				return n + 1, rawEnd, fp
			}
			return n + 1, rawBad, fp
		}
		fp = next
	}
	return len(pc), rawFull, fp
}

// countWalk is CallersFP's walk from start as one function, for the tests
// that compare it with rawWalk on crafted chains: FPLoop (CallersFP's
// inlined loop) when no boundary is known, else rawWalk's count and reason.
//
//go:norace
//go:nocheckptr
func countWalk(start unsafe.Pointer, pc []uintptr, stop uintptr) (int, int) {
	if stop == 0 {
		n, ok := FPLoop(start, start, pc)
		switch {
		case !ok:
			return n, rawBad
		case n < len(pc) || n > 0 && *(*uintptr)(skipRecords(start, n-1)) == 0:
			return n, rawEnd
		}
		return n, rawFull
	}
	n, why, _ := rawWalk(start, start, pc, stop)
	return n, why
}

// FPLoop is rawWalk from the record fp of a walk that started at start,
// for CallersFP's common case (and unwind/live.CallersFP's, hence
// exported): no boundary known (stopPC == 0), and only the count returned
// and whether the walk ended without a broken rule (pc full, or the end
// of the chain), so that its loop keeps no copy of the record it stopped
// at. It is small enough to be inlined into CallersFP (no call and return
// of its own; the loop still calls nothing, and limit is computed right
// before it, clamped with min to stay under the inlining budget).
//
// What its checks cost, measured on an AMD EPYC (-cpu=1, against
// UncheckedFP, the minimal loop in the same shape, and variants of it): its
// strictly rising check replaces the unchecked loop's nil test for free;
// every further operation that waits for the chain's load costs about
// 0.1 ns a frame from depth 16 to 64, whatever it is (two compares with
// constants that never fail, or two arithmetic operations without a
// branch, cost as much as the stack bound and the alignment test); at
// depth 128 the walk is bound by the load latency and the checks are
// free. Measured and not faster: the three checks folded into one
// compare-and-branch (more operations waiting for the load), the bound and
// the alignment folded into one compare of the saved frame pointer rotated
// right by 3, the loop unrolled by two in Go and in assembly and by four in
// Go (31.6 to 30.8 ns at depth 32, the same three checks a frame), the loop in
// assembly without the compiler's register moves (with its head aligned
// to 64 bytes), and the loop tested at the bottom.
//
//go:norace
//go:nocheckptr
func FPLoop(start, fp unsafe.Pointer, pc []uintptr) (int, bool) {
	limit := min(uintptr(start), ^uintptr(0)-maxStack) + maxStack // limitFor(start), clamped
	for n := range pc {
		ret := *(*uintptr)(unsafe.Add(fp, ptrSize))
		next := *(*unsafe.Pointer)(fp)
		pc[n] = ret
		if u := uintptr(next); u <= uintptr(fp) || u >= limit || u&(ptrSize-1) != 0 {
			return n + 1, u == 0
		}
		fp = next
	}
	return len(pc), true
}

// skipFP follows skip records from start, checking each saved frame
// pointer by the termination rules before it follows it, and returns the
// record it arrives at, or nil if a record broke a rule or ended the chain
// (CallersFP then leaves the walk to walkFP). It is small enough to be
// inlined into CallersFP.
//
//go:norace
//go:nocheckptr
func skipFP(start unsafe.Pointer, skip int) unsafe.Pointer {
	limit := min(uintptr(start), ^uintptr(0)-maxStack) + maxStack // limitFor(start), clamped
	fp := start
	for ; skip > 0; skip-- {
		next := *(*unsafe.Pointer)(fp)
		if u := uintptr(next); u <= uintptr(fp) || u >= limit || u&(ptrSize-1) != 0 {
			return nil
		}
		fp = next
	}
	return fp
}

// skipRecords follows k records from fp that an earlier walk has already
// checked, and returns the record it arrives at.
//
//go:norace
//go:nocheckptr
func skipRecords(fp unsafe.Pointer, k int) unsafe.Pointer {
	for ; k > 0; k-- {
		fp = *(*unsafe.Pointer)(fp)
	}
	return fp
}

// walkFP stores the return addresses of the frame-record chain starting at
// fp into pc, innermost first, after dropping the first skip of them. It
// stops when pc is full, at the end of the chain or at a boundary of the
// goroutine's stack (nil error), or at the first record that breaks a rule
// (a *errs.CorruptError, with the frames found so far). It never writes
// beyond len(pc).
func walkFP(fp unsafe.Pointer, skip int, pc []uintptr) (int, error) {
	if fp == nil || len(pc) == 0 {
		return 0, nil
	}
	if uintptr(fp)&(ptrSize-1) != 0 {
		return 0, errs.Corrupt(ruleMisaligned, uint64(uintptr(fp)))
	}
	start := fp
	// Skipped frames are walked into pc too, a buffer at a time, so that
	// the storing loop has no branch for them.
	for skip > 0 {
		buf := pc[:min(skip, len(pc))]
		n, why, last := rawWalk(start, fp, buf, stopPC.Load())
		skip -= n
		if why != rawFull {
			return 0, endErr(why, start, last, buf[n-1])
		}
		fp = last
	}
	n, why, last := rawWalk(start, fp, pc, stopPC.Load())
	if why == rawFull {
		return n, nil
	}
	return n, endErr(why, start, last, pc[n-1])
}

// endErr returns the error for a raw walk that stopped at the record last,
// whose return address is ret: nil at the end of the chain or at a boundary
// (a rule broken by a record that returns into a boundary function is the
// boundary: its saved frame pointer belongs to another stack).
func endErr(why int, start, last unsafe.Pointer, ret uintptr) error {
	switch why {
	case rawEnd, rawStop, rawFull:
		return nil
	}
	if isBoundary(ret) {
		return nil
	}
	return badNext(start, last, *(*uintptr)(last))
}
