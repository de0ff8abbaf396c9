// Package scs is the copy unwinder of the arm64 Linux kernel's shadow call
// stack (SCS), and the model of that shadow call stack it reads.
//
// Two kinds of reader use it. A crash-dump tool, a debugger or a profiler
// that read a shadow stack out of memory itself builds a View over those
// bytes (NewSnapshotView) and calls Save or Frames: nothing else in the
// package is needed. The machine model (package unwind/machine) drives a
// Model, the per-CPU shadow stacks, saved pointers and context nesting of
// a running kernel, and unwinds it the same way.
//
// # The copy unwinder
//
// Save copies return addresses into a caller's buffer: from the newest
// entry (x18-8) down to the base of the current context, then into each
// interrupted context outward (SDEI critical, SDEI normal, IRQ, task), using
// whatever the policy left behind. It reads each slot at most once with an
// atomic load (READ_ONCE), never reads the empty slot at a saved top (the
// seed's v2 read one slot too many there), strips every entry's pointer
// authentication code with the View's ptrauth.Layout, applies skip exactly
// (stack_trace_save semantics) and fills at most len(store). Save is small
// enough for the compiler to inline; its body checks each segment and
// copies it in one pass, with the PAC strip inlined: there is no function
// call and no callback.
//
// A View is the immutable description Save reads: one Segment per live
// context, innermost first. Model.View builds one atomically from a running
// CPU (see "Reading a running model" below); a
// View for a memory snapshot of a real program is a plain struct
// (NewSnapshotView). Save fills a buffer; Frames is the rich variant, an
// iterator like package fp's: each frame says which context it came from,
// where its slot was and whether it is an interrupted PC.
//
// # Memory
//
// A Segment reads one of two kinds of memory. Memory the caller owns
// (bytes it read from a dump, a file, a debugger) is plain read-only data:
// Segment.Data, little-endian, Data[0] being the byte at Segment.Base,
// which Save reads with ordinary loads and never writes (NewSnapshotView
// builds such a View). The model's own shadow stacks have a writer, so
// they are words the model reads and writes with sync/atomic: the driver
// provides them through AllocFunc (base address and []uint64, for example
// the backing words of its own address-space model, so that a dump of it
// shows the stacks), and a View of the model carries them in unexported
// fields, with the generations below. NewAllocator provides fresh Go
// memory for a model nobody else needs to see. checkSegs is the one
// statement of the rules a segment's memory, base, size, end magic and top
// must satisfy; Save and Frames both call it.
//
// # What is modelled
//
// The shadow call stack is clang's -fsanitize=shadow-call-stack as the
// kernel uses it (include/linux/scs.h, kernel/scs.c,
// arch/arm64/include/asm/scs.h, arch/arm64/kernel/entry.S,
// arch/arm64/kernel/sdei.c). It grows upward; x18 points at the next free
// slot, so the newest entry is at x18-8. A non-leaf function's prologue
// pushes its return address with str x30, [x18], #8 and its epilogue pops it
// with ldr x30, [x18, #-8]!. Each shadow stack is Config.Size bytes (4096 by
// default, one page as in current kernels; 1024 as in older kernels and
// 16384 as in Android user space also work) and its last word holds
// EndMagic. The kernel's scs_corrupted() reports a stack whose pointer is
// sp - base >= size - 1 bytes past its base, or whose magic changed; a full
// stack whose next push would overwrite the magic is not corrupt yet, and
// the model reports that push as an error (Push) rather than performing it.
//
// A Model is a set of CPUs (Config.NumCPU). Each CPU has per-CPU shadow
// stacks for hard IRQs and for normal and critical SDEI events (allocated
// through the driver's alloc function, so they live in the driver's
// modelled memory), and runs one Task at a time. A task's shadow stack base
// and saved pointer are its thread_info.scs_base and thread_info.scs_sp.
// Contexts nest on a CPU in one order: CtxTask, then IRQ, then CtxSDEINormal, then
// CtxSDEICritical. IRQs interrupt only the task (they do not nest, and no IRQ is
// taken inside SDEI); a normal SDEI event may interrupt the task or an IRQ; a
// critical event may interrupt any of them. The IRQ and SDEI shadow stacks
// restart at their base on every entry.
//
// Where the interrupted x18 is kept on entry is a Policy, because the
// mailing-list thread this package follows (the 2022 "kasan, arm64, scs,
// stacktrace: collect stack traces from Shadow Call Stack" series and its
// review) argues about exactly that:
//
//   - ThreadInfo (mainline today): call_on_irq_stack stores the task's x18
//     in thread_info.scs_sp and reloads it from there on exit; the SDEI
//     handler keeps the interrupted x18 in its saved registers, which the
//     unwinder finds through sdei_active_{normal,critical}_event.
//   - OnStack (mainline in 2022): call_on_irq_stack pushes x18 on the
//     interrupted stack (stp scs_sp, xzr, [sp, #-16]!) before switching;
//     an unwinder that reads only shadow stacks cannot find it and needs
//     the frame chain. SDEI keeps it in its saved registers, as under
//     every policy (__sdei_asm_handler's stp x18, x19, [x1,
//     #SDEI_EVENT_INTREGS + 16 * 9], already in 6.1), found through
//     sdei_active_{normal,critical}_event.
//   - PerCPU (the seed patch): the interrupted x18 goes to
//     irq_shadow_call_stack_saved_ptr or
//     sdei_shadow_call_stack_{normal,critical}_saved_ptr, reset to 0 on exit
//     so that a non-zero value means "live".
//
// Policy.SavedX18 is the one statement of that rule, per policy and
// context; the model, the machine model (package unwind/machine) and its expectations
// all read it.
//
// Every entry and exit counts the memory loads, stores and instructions the
// policy's real sequence performs (EntryCost, ExitCost,
// Model.Stats), so the maintainer's objection that "entry code must not pay
// for unwinding" is a number.
//
// # Driving the model
//
// The model is driven from outside, the way entry code and compiled
// prologues drive the real thing: New allocates the per-CPU regions and one
// idle task per CPU ("swapper/N"); NewTask and Switch create and switch
// tasks; Push and Pop model the prologue and epilogue; EnterIRQ, ExitIRQ,
// EnterSDEI and ExitSDEI model the entry code. Each operation validates its
// arguments and the CPU's state and returns an error, changing nothing, on
// misuse. One goroutine drives each CPU; View, Save, Context, X18 and Stats
// may be called from any goroutine at any time.
//
// # Reading a running model
//
// A View is taken at one instant: Model.View reads the per-CPU words (x18,
// the live contexts, the saved pointers, the current task) under the
// CPU's sequence lock, which every entry, exit and switch holds while it
// changes them. Pushes do not take that lock (they are the hot path of the
// model, as of the kernel), so the slots can change after the View was
// taken and while Save copies them. Each shadow stack therefore keeps a
// life generation: a push that writes below the highest top the stack has
// had since the generation last changed (that is, into a slot a reader may
// have seen live, after a pop or a context re-entry) first bumps the
// generation; pushes above it and pops leave it alone. The View records
// each stack's generation, read before its top, and Save loads the
// generations again after the copy (Frames after each slot): if one
// changed Save returns 0 and ErrChanged (Frames ends with ErrChanged),
// otherwise every slot they read still held its value of the View's
// instant. A trace from Model.Save (which retries on ErrChanged)
// or from Save over a Model's View is thus the CPU's shadow stacks at one
// instant, never a mix of two lifetimes. A View the caller builds over its
// own memory has no writer, carries no generation, and is not re-checked.
//
// # One nesting state and one sequence lock per CPU
//
// The Model owns, per CPU, the record of which contexts are live (its
// nesting state, which EnterIRQ, ExitIRQ, EnterSDEI, ExitSDEI and Switch
// enforce; Context reports it) and the sequence lock that readers check.
// A driver that keeps per-CPU state of its own next to the model's, as
// package machine's CPU keeps frame records, pt_regs and registers, does
// not keep a second copy of either: it asks the model's nesting rules
// before it changes anything, and brackets each of its steps with the
// model's own brackets, so the model's writes and the driver's are one
// change under one count. Those hooks are the machine's alone and not
// part of this package's API (it reaches them through an internal
// package). The lock lives here rather than in the driver because the
// layering only lets the driver import this package, and the model must
// stay consistent for its own readers without one.
//
// Known limit, reproduced and not hidden: when an exception is taken, the
// interrupted function's own PC is in ELR_EL1 (and then in the pt_regs on
// the interrupted stack), never on the shadow stack, and a leaf function's
// return address is still in x30. An SCS-only trace therefore lacks the
// interrupted function's frame at each context boundary. With
// Config.KeepInterruptedPC the entry code also stores the interrupted PC in
// a per-CPU variable (the fix the seed proposes for its v3), and Save
// inserts it at the boundary; EntryCost shows what that costs.
//
// Results: ErrChanged when the stacks of a running model changed since
// the View was taken; ErrNotSupported when the shadow call stack is disabled
// (errors.Is(err, unix.ENOSYS) holds, as stack_trace_save_shadow returns
// -ENOSYS); ErrInterruptedTopHidden, with the frames found so far, when the
// policy left the interrupted x18 where only a frame-pointer walk could find
// it; a *CorruptError (errors.Is ErrCorrupt) that names the rule and the
// address for corrupt state, again with the frames found so far. No input
// makes the unwinder panic or read outside a region.
package scs
