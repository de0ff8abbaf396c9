//go:build amd64 || arm64

package live

import "unsafe"

// uncheckedWalk is the runtime tracer's unchecked loop (fpTracebackPCs), a
// baseline in BenchmarkCallers for what the checks in walkFP cost.
//
//go:noinline
func uncheckedWalk(fp unsafe.Pointer, pc []uintptr) int {
	i := 0
	for ; i < len(pc) && fp != nil; i++ {
		pc[i] = *(*uintptr)(unsafe.Add(fp, ptrSize))
		fp = *(*unsafe.Pointer)(fp)
	}
	return i
}

//go:noinline
func uncheckedCallers(pc []uintptr) int { return uncheckedWalk(getfp(), pc) }

func init() {
	benchExtra = append(benchExtra, benchUnwinder{"unchecked", uncheckedCallers})
}
