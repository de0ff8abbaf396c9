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
// one, or more than the maximum stack size above the first; it stops at a
// saved frame pointer of 0, and at the record whose return address is the
// runtime's cgo boundary (runtime.cgocallback: in a Go -> C -> Go callback
// the frame pointer saved there belongs to the system stack). That address
// is learned through runtime.FuncForPC by the first walk that stops there
// (stopped by the rules above: the system stack lies far from the goroutine
// stacks of the Go heap, or below them); from then on walks stop at it
// without reading past it. The runtime's g is never read.
//
// CallersFP returns the physical return addresses: one per frame that has a
// frame record, inlined calls not expanded (runtime.CallersFrames expands
// them) and compiler wrappers (method wrappers, the "gowrap" closure of a go
// statement) not hidden. Its skip counts those physical frames. In a cgo
// callback its last pc is the one in runtime.cgocallback, and its error is
// nil.
//
// Callers returns what runtime.Callers returns (runtime/traceback.go,
// tracebackPCs): for each physical frame, its return address and, for each
// call inlined at that point, the pc of the caller's inline mark plus one;
// wrappers hidden unless they called a panic function; runtime.goexit last.
// Its skip counts those logical frames. The runtime's inline tables and
// function IDs are not reachable from outside, so what the runtime records
// for each physical return address is learned once from the runtime
// itself: on a cache miss Callers walks the chain, asks runtime.Callers once
// for the same stack, lines the physical frames up with its answer (frames
// told apart by runtime.FuncForPC's function entries), caches the verdict
// of every frame, and answers from that same runtime.Callers result (one
// runtime.Callers call per Callers call, always).
//
// The cache (cache.go) maps a return address to its verdict in one word;
// 4096 buckets of 8 words (64 bytes), an alternative bucket, up to two cuckoo
// steps, and a bounded overflow map, so that a stack is learned once
// whatever its addresses hash to; a learning pass never evicts what it has
// confirmed. Under 2 MiB in all. A hit costs one compare with the address's
// home slot, done inside the walk loop, off the walk's chain of loads; past
// the first frame with inlined calls, a frame whose home slot names its
// expansion is expanded in the same loop (walkExpand), with no second pass
// and no moving of the addresses not read yet.
// A whole stack answered before (whole.go: the chain of return addresses
// down to the goroutine's entry frame and the skip, which decide the
// answer, and the answer, when it was shorter than its buffer) is answered
// by a walk that compares the chain with the cached one, as the one-pass
// stack ID's hit does, and a copy: 512 direct-mapped slots, keyed by the
// first four return addresses, under 1.6 MiB.
// A working set larger than the cache is detected (learning passes that
// evict from recently filled buckets) and answered by plain runtime.Callers
// for a while (adapt.go).
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
//   - In race builds Callers is runtime.Callers (every stack read and cache
//     probe would be instrumented); CallersFP's loop is not instrumented.
//
// On other GOARCHes CallersFP returns errs.ErrNotSupported and Callers is
// runtime.Callers.
//
// Stack IDs (stackid.go, the engine of package unwind/live/stackid):
// Hit walks the chain once, comparing it with the record of a stack that
// began the same way (a hint); failing that, WalkFirst and Resume walk it
// storing and hashing each return address with the depot's hash, so that
// a known stack is found by its hint or by one lookup;
// SkipIDFrames drops a skip by the cache's verdicts first; ResolveID
// resolves and checks a new stack against Callers' own answer before it is
// stored, and IDs.Expand turns a stored chain back into Callers' logical
// pcs from verdicts the table pins (see the top of stackid.go).
//
// The exported front door is live.Callers and live.CallersFP (package unwind/live).
package live
