//go:build amd64 || arm64

package live

import "unsafe"

// UncheckedFP is the stricter of the two baselines that CallersFP's checks
// are measured against (BenchmarkCallers, and the report's live-Go table
// through internal/benchbody; GounwindFP is the other), not an unwinder to
// use: the unchecked frame-pointer loop of the runtime's tracer
// (fpTracebackPCs) and of github.com/felixge/gounwind (read [fp+8], follow
// [fp] until it is nil), which follows any saved frame pointer, wherever
// it points, cut down to nothing but that loop. It has CallersFP's shape,
// so that the two differ only in the checks: one non-inlined function with
// CallersFP's signature and skip, its frame pointer from getfp, the loop
// in its body, storing into pc by index.
//
//go:noinline
//go:norace
//go:nocheckptr
func UncheckedFP(skip int, pc []uintptr) (int, error) {
	fp := getfp()
	for ; skip > 0 && fp != nil; skip-- {
		fp = *(*unsafe.Pointer)(fp)
	}
	n := 0
	for n < len(pc) && fp != nil {
		pc[n] = *(*uintptr)(unsafe.Add(fp, ptrSize))
		fp = *(*unsafe.Pointer)(fp)
		n++
	}
	return n, nil
}

// GounwindFP is the second baseline of CallersFP's checks: the frame-pointer
// loop of github.com/felixge/gounwind in that package's own shape (its
// algorithm in this package's own code), which is what the speed target
// of CallersFP names. An exported non-inlined function calls a non-inlined,
// nosplit one whose loop reads the return address at [fp+8], stores it
// unless it still has frames to skip (a test in the loop), follows [fp]
// and stops at a nil frame pointer or a full pc; it checks nothing else.
// gounwind takes the frame pointer from the address of its argument; this
// one takes it from getfp, as UncheckedFP does, so that it runs the same on
// arm64. Its skip counts as UncheckedFP's (0 is the pc in its caller) and
// it stores what UncheckedFP stores.
//
// UncheckedFP is the stricter baseline: the same loop with nothing in it
// but the loads, the store and the nil test, in one function.
//
//go:noinline
func GounwindFP(skip int, pc []uintptr) int { return gounwindLoop(skip+1, pc) }

//go:noinline
//go:nosplit
//go:norace
//go:nocheckptr
func gounwindLoop(skip int, pc []uintptr) int {
	fp := getfp()
	i := 0
	for i < len(pc) {
		ret := *(*uintptr)(unsafe.Add(fp, ptrSize))
		if skip == 0 {
			pc[i] = ret
			i++
		} else {
			skip--
		}
		fp = *(*unsafe.Pointer)(fp)
		if fp == nil {
			break
		}
	}
	return i
}
