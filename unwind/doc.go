// Package unwind is unwindkit's front door: one Source, one Save and one
// Frames over either unwinder — the shadow call stack copy of package
// [github.com/unwindkit/unwindkit/scs] and the frame-pointer walk of
// package [github.com/unwindkit/unwindkit/fp] — and CompareTraces, which
// lines up the two techniques' traces of the same stack and explains each
// frame only one of them has.
//
// A Source is what an unwinder reads. [NewSCSSource] builds one from an
// [scs.View] (the shadow call stack region, its base and x18),
// [NewFPSource] from an [fp.Config] (the stacks, x29 and pc),
// [NewGCSSource] from a thread's Guarded Control Stack (arm64's hardware
// shadow stack of user space: its bytes, base and GCSPR_EL0; package
// unwind/gcs models it); all take the caller's own memory, so a crash-dump tool, a debugger or a profiler
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
// Each product has its own package under unwind, above the front door.
// An arrow is "imports" (the module's public packages; each may also
// import the module's internal packages and package
// [github.com/unwindkit/unwindkit/fault], the errors every package
// shares); nothing imports upward, and only unwind/kernel imports a
// sibling (it reads its dump through unwind/vmcore). TestLayering checks
// this drawing against go list:
//
//	unwind              → scs, fp, depot                           Source, Save, Frames, SaveToDepot, CompareTraces, Symbolizer
//	unwind/live         → (internal only)                          Callers, CallersFP: the running Go program
//	unwind/live/stackid → depot                                    stack IDs in one pass: the running program's stack walked, hashed and deduplicated
//	unwind/machine      → unwind, scs, fp, depot, ptrauth          the modelled arm64 machine with its ground truth
//	unwind/snapshot     → unwind, scs, fp, ptrauth                 captures of real arm64 threads (JSON)
//	unwind/prologue     → (internal only)                          the arm64 prologue scanner (ELF files, debug/elf, x/arch)
//	unwind/core         → unwind, scs, fp, ptrauth                 arm64 ELF core files: threads, both unwinders per thread
//	unwind/vmcore       → ptrauth                                  arm64 kernel vmcores: VMCOREINFO, page tables, kallsyms, BTF
//	unwind/kernel       → unwind, unwind/vmcore, fp, scs, ptrauth  a vmcore unwound with the rules of the kernel that wrote it
//	unwind/debuginfo    → (internal only)                          file:line and inlined frames from DWARF, read lazily (debug/dwarf)
//	unwind/gcs          → fp                                       arm64's Guarded Control Stack: a thread's model and the copy unwinder
//
// Below the front door (DESIGN.md's layering): fault imports the standard
// library only; ptrauth and percpu are leaves (fault and the internal
// packages at most); fp → ptrauth; scs → ptrauth, percpu, fp (for the
// one vocabulary of frames, fp.Frame and fp.Origin); depot → none;
// unwind → scs, fp, depot. The internal packages import fault, each
// other, ptrauth and percpu, never a package above them
// (internal/benchbody, the benchmarks' shared bodies, and
// internal/kcapture, the reader of testdata/kernel's capture fixtures
// for the module's tests and tools, excepted).
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
