// Package fp is the consolidated arm64 frame-pointer unwinder: stacks,
// frame records, meta records, pt_regs, and the walk over them.
//
// It models the Linux kernel's arch/arm64/kernel/stacktrace.c and
// arch/arm64/include/asm/stacktrace/{common,frame}.h of Linux 6.13 to 7.2 (the
// kunwind_state unwinder with frame_record_meta), written from those rules
// rather than copied. The same {fp, lr} record at x29 is the AAPCS64 frame
// record, so the walker also serves user-space frames (see
// Config.ZeroFPEnds).
//
// # Model
//
// A frame record is {fp, lr}, 16 bytes at x29: fp is the caller's x29, lr
// the return address into the caller. A record {0, 0} is the head of a
// 24-byte meta record {0, 0, type}: MetaFinal ends the walk successfully,
// but only where the task's pt_regs keep their stackframe (TaskPtRegs +
// PtRegsStackFrameOff); MetaPtRegs marks an exception boundary: the record
// is embedded in a struct pt_regs (PtRegsSize bytes), whose pc is reported
// (OriginRegsPC) and whose regs[29] is where the walk continues. Any other
// type is corruption.
//
// That is the ABI since Linux 6.13 and the default ([ABIMetaRecord]).
// Kernels up to 6.12 ([ABIFinalRecord], Config.ABI) have no meta
// records: the walk ends when fp equals the task's pt_regs stackframe,
// checked before that record is read, a {0, 0} record is an ordinary one,
// and an exception boundary is crossed by following the synthetic record
// {x29, elr} that EL1 entry writes into pt_regs->stackframe; its lr is
// reported as OriginRegsPC. The pt_regs layout (Config.PtRegs) defaults
// to this package's constants; real kernels give theirs from BTF (6.1
// and 6.12 keep stackframe at 304). These are the rules package
// unwind/kernel applies to real vmcores.
//
// The walk reads memory only inside the accessible stacks listed in the
// Config (plus the function-graph and kretprobe return stacks, when
// enabled).
//
// # Memory
//
// The memory is plain data the caller owns: each Stack carries its bytes
// (Stack.Data, High-Low bytes, little-endian words, byte 0 at Low), and
// the return stacks theirs (Config.GraphStackData,
// Config.KretprobeStackData). Bytes read from a crash dump, an ELF core
// file or a debugger are walked by slicing each stack out of them; there
// is no interface to implement and no call per word. The walk views each
// stack's bytes as words (in place when they are 8-byte aligned, as any
// make([]byte) is; else from a copy made when it enters the stack), so
// the hot loop is the same for every kind of memory, and the bytes must
// not change during a walk, unless they are changed word by word with
// sync/atomic: the walk reads aligned words with atomic loads, so
// unwindkit's own machine model, whose CPUs write their stacks while
// other goroutines unwind them, hands fp views of its memory as Data.
//
// # Termination
//
// No depth limit is needed, exactly as in the kernel:
//   - fp must be 8-byte aligned;
//   - every object read (16-byte record, 24-byte meta record, whole
//     pt_regs) must lie entirely inside one accessible stack, checked
//     without overflow;
//   - within a stack, the low bound moves to just past each consumed object,
//     so the next object must be at a strictly higher address;
//   - a stack that is left is removed from the accessible set and can never
//     be entered again.
//
// Every step therefore consumes at least 16 bytes of a finite, shrinking
// set of stacks, so every walk ends: at FINAL (EndFinal), at fp == 0 for
// user-space chains (EndZeroFP), when the consumer stops (EndStopped), or
// with an error (EndError). Tests build loops, backward steps and
// cross-stack cycles and check each of them ends with ErrCorrupt.
//
// # Return addresses
//
// Each step strips the pointer-authentication code (ptrauth.Layout.Strip),
// then undoes the function-graph tracer (an lr equal to the return
// trampoline is replaced by the real address from the task's graph return
// stack, matched by fp with a cursor), then kretprobes (the same with the
// kretprobe instance list). A trampoline that cannot be recovered is
// corruption.
//
// # Consuming a walk
//
// Walk and Frames give every Frame with its origin and stack; Save is the
// copy path (stack_trace_save) with exact skip and no per-frame callback;
// Unwinder is the step-by-step state for drivers that want both.
// Config.Reliable gives arch_stack_walk_reliable's behaviour: the walk
// fails with ErrUnreliable at the first exception boundary or anything
// unusual, and whenever its consumer stops it before the task's FINAL
// record, a full store included (stack_trace_consume_entry stops the walk
// when the store fills, even exactly, and livepatch relies on that). Only
// Save, SaveEnd, Walk and the Unwinder can say "reliable"; the Frames
// iterator cannot report after its consumer breaks off.
package fp
