// Package machine is unwindkit's model of an arm64 Linux system, built to
// hold both unwinders to a ground truth: a [Machine] (New, [Config])
// with CPUs, tasks and a text region of real A64 instructions. Every
// declared [Func] gets the prologue and epilogue a compiler emits for its
// shape (paciasp, the shadow call stack push "str x30, [x18], #8",
// "stp x29, x30, [sp, #-N]!", "mov x29, sp", and back), and call sites are
// real bl instructions, so a return address is the address after a bl.
// Built-in functions model the kernel entry code: ret_from_fork at the
// bottom of every task, the el1h_64_irq vector and el1h_64_irq_handler,
// call_on_irq_stack (which saves x18 as the [Policy] says and switches to
// the IRQ stack and IRQ shadow call stack, following
// arch/arm64/kernel/entry.S), handle_arch_irq, __sdei_asm_handler and
// __sdei_handler (arch/arm64/kernel/entry.S and sdei.c), and
// stack_trace_save for out-of-line unwinder calls.
//
// CPU.Call, Return, EnterIRQ, ExitIRQ, EnterSDEI, ExitSDEI and Switch write
// what the real code writes: signed shadow call stack entries, frame
// records, pt_regs with a PT_REGS meta record at exception entry, the
// FINAL record at each task's pt_regs, function-graph and kretprobe
// return stacks. Misuse fails and leaves the machine unchanged.
//
// CPU.Source and Task.Source return the front door's
// [github.com/unwindkit/unwindkit/unwind.Source] over the model's memory
// (built with unwind.NewSCSSource and unwind.NewFPSource, as any caller
// could), so unwind.Save and Source.Frames unwind the model like any other
// input; CPU.Unwind does it in one call, from any goroutine.
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
// # Skip
//
// [SaveOptions].Skip removes frames from the innermost end after
// unwinding, as the kernel's stack_trace_save(store, size, skipnr). An
// unwinder invoked [Inline] in a function reports that function's return
// address first; invoked [OutOfLine] (through stack_trace_save, which has
// its own frame) it reports the call site first, so OutOfLine with skip
// k+1 equals Inline with skip k: the seed thread's "skipnr + 1".
//
// # One state machine and one lock per CPU
//
// The CPU keeps no nesting state or sequence lock of its own: the SCS
// model (package scs, present in a disabled form when Config.SCS is off)
// owns both, and lets its driver reach them through an internal package
// (they are not scs's public API). Exception entries and exits ask the
// model's nesting rules before they write anything (a refused transition
// wraps scs.ErrNesting and changes nothing), CPU.Context is the model's,
// and every step (Call, Return, the entries and exits, Switch) is one
// change of the model's per-CPU sequence, inside which
// the model's own pushes, pops and saved pointers change too. CPU.Unwind
// and CPU.Seq read that one count; the registers concurrent unwinders need
// are published in atomic fields inside each change, so Call and Return
// allocate nothing.
//
// The machine's times are Go's, not a kernel's: compare techniques with
// each other, not with hardware.
package machine
