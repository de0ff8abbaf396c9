//go:build amd64 || arm64

package live

import "unsafe"

// UncheckedFP is the baseline that CallersFP's checks are measured
// against (BenchmarkCallers, and the report's live-Go table through
// internal/benchbody), not an unwinder to use: the unchecked frame-pointer
// loop of the runtime's tracer (fpTracebackPCs) and of
// github.com/felixge/gounwind (read [fp+8], follow [fp] until it is nil),
// which follows any saved frame pointer, wherever it points. It has
// CallersFP's shape, so that the two differ only in the checks: one
// non-inlined function with CallersFP's signature and skip, its frame
// pointer from getfp, the loop in its body, storing into pc by index.
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
