// Package unwind is unwindkit's front door: one Source, one Save and one
// Frames over either unwinder — the shadow call stack copy of package
// [github.com/unwindkit/unwindkit/scs] and the frame-pointer walk of
// package [github.com/unwindkit/unwindkit/fp] — and CompareTraces, which
// lines up the two techniques' traces of the same stack and explains each
// frame only one of them has.
//
// A Source is what an unwinder reads. [NewSCSSource] builds one from an
// [scs.View] (the shadow call stack region, its base and x18),
// [NewFPSource] from an [fp.Config] (the stacks, x29 and pc); both take
// the caller's own memory, so a crash-dump tool, a debugger or a profiler
// unwinds what it read itself. [Source.SetSCS] and [Source.SetFP] refill
// a Source in place without allocating, for hot paths that record a trace
// on every event. [Save] copies return addresses into a caller's buffer;
// [Source.Frames] yields each frame with its provenance: its [Origin]
// (which slot or record it came from), its context, whether a trampoline
// was recovered. [SaveToDepot] is KASAN's kasan_save_stack in one call:
// unwind, store the trace in a [depot.Depot], get its handle.
//
// # Packages
//
// Each product has its own package under unwind, above the front door
// (an arrow is "imports"; nothing imports upward, and no subpackage
// imports another):
//
//	unwind            → scs, fp, depot   Source, Save, Frames, SaveToDepot, CompareTraces, Symbolizer
//	unwind/live       → (internal only)  Callers, CallersFP: the running Go program
//	unwind/machine    → unwind, scs, fp, depot  the modelled arm64 machine with its ground truth
//	unwind/snapshot   → unwind, scs, fp  captures of real arm64 threads (JSON)
//	unwind/prologue   → debug/elf, x/arch  the arm64 prologue scanner (ELF files)
//
// A program that only wants live Go stack traces imports unwind/live and
// links none of the model, debug/elf,
// golang.org/x/arch and encoding/json; the front door links none of those
// either (both checked by go list -deps in the tests).
//
// # Skip
//
// skip removes frames from the innermost end after unwinding, exactly as
// the kernel's stack_trace_save(store, size, skipnr): it counts frames,
// not functions that happen to be inlined. A Source can carry a skip of
// its own ([SourceOptions].Skip: a walk that starts at the pc of the
// function the unwinder runs in drops that pc); Save's skip comes on top.
package unwind
