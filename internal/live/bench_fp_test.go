//go:build amd64 || arm64

package live

import "unsafe"

// uncheckedFP is the baseline of BenchmarkCallers for what CallersFP's
// checks cost: the unchecked frame-pointer loop of the runtime's tracer
// (fpTracebackPCs) and github.com/felixge/gounwind (read [fp+8], follow
// [fp] until it is nil), in CallersFP's shape, so that the two differ only
// in the checks: one non-inlined function with CallersFP's signature that
// takes its frame pointer from getfp, drops skip records, and stores into
// pc by index with the loop in its body.
//
//go:noinline
//go:norace
//go:nocheckptr
func uncheckedFP(skip int, pc []uintptr) (int, error) {
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

func init() {
	benchExtra = append(benchExtra, benchUnwinder{"unchecked", func(pc []uintptr) int { n, _ := uncheckedFP(0, pc); return n }})
}
