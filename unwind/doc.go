// Package unwind is unwindkit's front door: one Save and one Frames over
// either unwinder (the shadow call stack copy of package scs, the
// frame-pointer walk of package fp), the machine model that drives both,
// snapshots of real arm64 programs, and frame-pointer unwinding of the
// running Go program (Callers, CallersFP).
//
// # The machine model
//
// A Machine is a modelled arm64 Linux system (NewMachine, Config). Its text
// region holds real A64 instructions: every declared Func gets the
// prologue and epilogue a compiler emits for its shape (paciasp, the
// shadow call stack push "str x30, [x18], #8", "stp x29, x30, [sp, #-N]!",
// "mov x29, sp", and back), and call sites are real bl instructions, so a
// return address is the address after a bl. Built-in functions model the
// kernel entry code: ret_from_fork at the bottom of every task, the
// el1h_64_irq vector and el1h_64_irq_handler, call_on_irq_stack (which
// saves x18 as the Policy says and switches to the IRQ stack and IRQ shadow
// call stack, following arch/arm64/kernel/entry.S), handle_arch_irq,
// __sdei_asm_handler and __sdei_handler (arch/arm64/kernel/entry.S and
// sdei.c), and stack_trace_save for out-of-line unwinder calls.
//
// CPU.Call, Return, EnterIRQ, ExitIRQ, EnterSDEI, ExitSDEI and Switch write
// what the real code writes: signed shadow call stack entries, frame
// records, pt_regs with a PT_REGS meta record at exception entry, the
// FINAL record at each task's pt_regs, function-graph and kretprobe
// return stacks. Misuse fails and leaves the machine unchanged.
//
// CPU.Truth is the CPU's own record of the live call chain across
// contexts; CPU.Expect applies each technique's rules to it (a leaf's
// return address is only in x30; asm and __noscs functions push nothing on
// the shadow call stack; -fomit-frame-pointer functions link no record;
// the interrupted pc is not on the shadow call stack unless
// Config.KeepInterruptedPC; the OnStack policy hides the context an IRQ
// interrupted from an SCS-only unwinder; the SCS copy does not recover trampolines).
// The package's tests hold both unwinders to those expectations over
// random and fuzzed event sequences, and CPU.Compare explains every
// difference in words.
//
// # Snapshots of real programs
//
// LoadSnapshot (or OpenSnapshot) reads a capture of a real arm64 thread:
// registers, stack and shadow-call-stack regions, symbols, the PAC layout
// (va_bits, tbi) and optionally the known call chain; the format (version
// 1) is documented at LoadSnapshot and in testdata/README.md. Snapshot.Source
// gives the same Save/Frames over it: the SCS copy from x18 down to
// scs_base, the FP walk from x29 over every stack region. testdata/arm64
// holds captures of programs built by clang and GCC with
// -fsanitize=shadow-call-stack and pac-ret, run under qemu-aarch64, and the
// script that rebuilds them. OpenBinary scans an arm64 ELF file's
// prologues (SCS push/pop, PAC, frame records, patchable entries) and
// checks that a return address follows a call.
//
// # The running Go program
//
// Callers is a drop-in for runtime.Callers that walks Go's frame pointers
// (amd64, arm64) and reproduces the runtime's logical frames (inlined
// calls expanded, wrappers hidden, runtime.goexit last) from a cache;
// CallersFP returns the raw frame-pointer chain. Elsewhere Callers is
// runtime.Callers and CallersFP returns ErrNotSupported. The Go runtime's
// runtime/tracestack.go does the same walk for its execution tracer.
//
// # Skip
//
// skip removes frames from the innermost end after unwinding, exactly as
// the kernel's stack_trace_save(store, size, skipnr): it counts frames,
// not functions that happen to be inlined. An unwinder invoked Inline in a
// function reports that function's return address first; invoked
// OutOfLine (through stack_trace_save, which has its own frame) it reports
// the call site first, so OutOfLine with skip k+1 equals Inline with skip
// k: the seed thread's "skipnr + 1".
package unwind
