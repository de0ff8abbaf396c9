package live

import "github.com/unwindkit/unwindkit/internal/live"

// Callers is a drop-in for runtime.Callers that walks frame pointers. It
// stores in pc the program counters of the calling goroutine's stack and
// returns how many it stored. skip 0 is the frame of Callers itself, 1 its
// caller, and so on, counting logical frames (calls inlined into a function
// count) exactly as runtime.Callers counts them. The result is what
// runtime.Callers would store at the same place: inlined calls expanded,
// compiler wrappers (such as the closure of a go statement) hidden unless
// they called a panic function, and runtime.goexit last; pass it to
// runtime.CallersFrames. Above the caller the pcs are identical to
// runtime.Callers'; the caller's own pc is that of its call to Callers.
//
// On amd64 and arm64 Callers walks frame pointers, and each frame costs a
// compare in a lock-free cache (under 2 MiB, fixed) that maps a return
// address to the logical frames the runtime records for it. A whole stack
// (down to the goroutine's entry, fewer pcs than the buffer holds) seen
// before with the same skip is answered by a walk that compares its return
// addresses with the ones it had and a copy of that answer (a second
// lock-free cache, of 512 stacks of up to 128 frames: under 1.6 MiB). A return
// address not yet in the cache is learned once from the runtime itself: that
// call makes one runtime.Callers call, answers from it, and looks up each
// new frame's function with runtime.FuncForPC. Whatever the stack, a call
// makes at most one runtime.Callers call. A program whose hot return
// addresses outnumber the cache is detected and answered by runtime.Callers
// for a while, at its cost. Stacks the frame pointers cannot reproduce (a
// panic from a fault, that is runtime.sigpanic on the stack; a cgo
// callback; a broken frame-pointer chain), race builds (-race, where every
// read would be instrumented) and every GOARCH without frame pointers are
// answered by runtime.Callers.
//
// Callers is safe for concurrent use.
func Callers(skip int, pc []uintptr) int {
	return live.Callers(skip, pc)
}

// CallersFP stores in pc the physical return addresses of the calling
// goroutine's frame-pointer chain and returns how many it stored. skip 0 is
// the frame of CallersFP itself, 1 its caller, and so on, counting physical
// frames: a function and the calls inlined into it are one frame, and
// compiler wrappers are not hidden. runtime.CallersFrames expands the
// inlined calls of the result.
//
// The walk stops at the end of the chain (the goroutine's entry frame,
// called from runtime.goexit), when pc is full, at the top of the
// goroutine's stack in a Go -> C -> Go callback (the last pc stored is then
// in runtime.cgocallback, the error nil: the Go frames below the C code are
// not reached), or at a frame record whose saved frame pointer is
// misaligned, not strictly above the previous one, or more than the maximum
// goroutine stack above the first; then it returns the frames found so far
// and a *CorruptError. In race builds its loop is not instrumented. On a
// GOARCH without frame pointers (anything but amd64 and arm64) it returns 0
// and ErrNotSupported.
//
//go:noinline
//go:norace
//go:nocheckptr
func CallersFP(skip int, pc []uintptr) (int, error) {
	// Frame 0 is CallersFP's own (self, a pc in it); the walk starts at
	// its frame record, frame 1. The common case, skip 1, is the walk
	// from there with nothing to skip, its loop inlined here (see
	// live.FrameAndPC); noinline: the record must be CallersFP's own.
	start, self := live.FrameAndPC()
	if skip == 1 && len(pc) != 0 && !live.BoundaryKnown() {
		if n, ok := live.FPLoop(start, start, pc); ok {
			return n, nil
		}
	}
	return live.CallersFPAt(start, self, skip, pc)
}
