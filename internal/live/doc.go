// Package live unwinds the running Go program by walking its frame-pointer
// chain, the way the Go runtime's execution tracer does (runtime/tracestack.go,
// fpTracebackPCs), but with checks, and turns the physical return addresses
// into exactly the program counters runtime.Callers would return.
//
// On amd64 and arm64 every Go function with a frame keeps a frame record:
// [fp] holds the caller's frame pointer and [fp+8] the return address (Go's
// arm64 prologue stores the frame-pointer slot just below SP to mimic the x86
// layout). The chain ends at the goroutine's entry function, whose saved
// frame pointer is 0 and whose return address is in runtime.goexit. A tiny
// assembly getfp per architecture starts the walk. The walk never follows a
// saved frame pointer that is misaligned, not strictly above the previous
// one, or more than the maximum stack size above the first, and it stops at
// a saved frame pointer of 0.
//
// CallersFP returns the physical return addresses: one per frame that has a
// frame record, inlined calls not expanded (runtime.CallersFrames expands
// them) and compiler wrappers (method wrappers, the "gowrap" closure of a go
// statement) not hidden. Its skip counts those physical frames.
//
// Callers returns what runtime.Callers returns (runtime/traceback.go,
// tracebackPCs): for each physical frame, the return address of its
// innermost logical frame and, for each call inlined into it, the pc of the
// inline mark plus one; wrappers hidden unless they called a panic function;
// runtime.goexit last. Its skip counts those logical frames. The runtime's
// inline tables and function IDs are not reachable from outside, so the
// expansion of each physical return address is learned once from the
// runtime itself: on a cache miss Callers walks the chain, asks
// runtime.CallersFrames for each new return address's inlined frames, asks
// runtime.Callers for the same stack, lines the two up frame by frame, and
// caches the result (a wrapper is a physical frame the runtime did not
// record). The cache is a fixed lock-free table keyed by return address;
// later walks cost one table lookup per frame.
//
// Remaining differences from runtime.Callers, by design:
//   - The pc recorded for the frame that called Callers is that call's
//     return address, not runtime.Callers' (same function, file and line
//     when both are called on one line).
//   - Stacks that hold runtime.sigpanic (a fault turned into a panic: the
//     faulting pc is not a return address, and a frameless faulting leaf
//     hides its caller from the frame-pointer chain), a cgo callback, code
//     without Go symbols, a broken frame chain, or a frame the alignment
//     cannot explain are answered by runtime.Callers itself: the same
//     result at the runtime's cost.
//   - The first walk through a new return address costs about a
//     runtime.Callers plus a CallersFrames per new frame; a program with
//     more hot return addresses than the cache holds pays that more often.
//
// On other GOARCHes CallersFP returns errs.ErrNotSupported and Callers is
// runtime.Callers.
//
// The exported front door is unwind.Callers and unwind.CallersFP.
package live
