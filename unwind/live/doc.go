// Package live unwinds the running Go program by its frame pointers:
// [Callers] is a drop-in for runtime.Callers (the same logical frames,
// inlined calls expanded, wrappers hidden, runtime.goexit last) at a
// fraction of its cost, and [CallersFP] returns the raw frame-pointer
// chain. On amd64 and arm64 Go keeps a frame pointer in every frame
// ([fp] is the caller's frame pointer, [fp+8] the return address); the Go
// runtime's own runtime/tracestack.go walks them the same way for its
// execution tracer. Elsewhere Callers is runtime.Callers and CallersFP
// returns [ErrNotSupported].
//
// The package is small on purpose: a program that imports it links only
// the runtime's packages, the walker and the shared errors (package
// fault), not the arm64 model, ELF, the
// instruction decoder or JSON (checked by go list -deps in the tests of
// package unwind).
package live
