package fp

import (
	"github.com/unwindkit/unwindkit/ptrauth"
)

// Config is the input of a walk: the accessible stacks with their memory,
// where to start, and which return-address rewriting is live. A Config is
// only read, so one Config may drive any number of concurrent walks.
//
// The memory is the caller's: each [Stack] carries its bytes in
// [Stack.Data], and the return stacks theirs in [Config.GraphStackData]
// and [Config.KretprobeStackData]. The walk reads that memory only
// inside the slices, never outside them, with atomic word loads where the
// bytes are aligned words: the machine model of package unwind/machine
// hands fp views of its own memory, which a running CPU may be writing.
type Config struct {
	// Stacks are the accessible stacks (kunwind_stack_walk's stacks[]):
	// the task stack, and for the current task in a non-preemptible
	// context the per-CPU IRQ, overflow and SDEI stacks, plus any extra
	// stacks. They must not overlap, Low and High must be 8-byte aligned
	// and each Data must hold exactly High-Low bytes (checked when the
	// walk starts). Stacks with Low == 0 are ignored.
	Stacks []Stack
	// FP and PC are where the walk starts: for the current task the
	// caller's frame pointer and return address, for a blocked task
	// thread_saved_fp and thread_saved_pc, from a pt_regs its regs[29]
	// and pc.
	FP, PC uint64
	// Start is the [Origin] of the first frame, which says what FP and
	// PC are. The valid values are: the zero value [OriginUnknown], which
	// means [OriginCaller]; [OriginCaller] (the current task, FP and PC
	// of the unwinder's caller); [OriginTask] (a blocked task,
	// thread_saved_fp and thread_saved_pc); and [OriginRegsPC] (a
	// pt_regs' regs[29] and pc, kunwind_init_from_regs). [OriginFrame] is
	// the provenance of a frame record's lr, not a start: it and any
	// other value make the walk fail before its first frame.
	Start Origin
	// Layout says which bits of a return address are PAC (the zero Layout
	// has none).
	Layout ptrauth.Layout
	// TaskPtRegs is the address of the task's pt_regs (task_pt_regs, see
	// TaskPtRegsAddr). The FINAL meta record ends a walk only at
	// TaskPtRegs+PtRegs.StackFrame (under [ABIFinalRecord], an fp equal
	// to that address ends it). 0: no end is valid.
	TaskPtRegs uint64
	// GraphTrampoline is the function-graph tracer's return trampoline
	// (return_to_handler); 0 disables graph recovery.
	GraphTrampoline uint64
	// GraphStack is the address of the task's graph return stack (see
	// [RetStackEntriesOff]); 0 means the task has none (task->ret_stack
	// is NULL), and a trampoline lr is then left as it is, as the kernel
	// does.
	GraphStack uint64
	// GraphStackData is the memory of the graph return stack: byte 0 is
	// the byte at GraphStack (the little-endian entry count), the
	// entries follow. A count that needs more bytes than GraphStackData
	// holds is corruption. Read-only during a walk, like [Stack.Data].
	GraphStackData []byte
	// KretprobeTrampoline is the kretprobe trampoline; 0 disables
	// kretprobe recovery.
	KretprobeTrampoline uint64
	// KretprobeStack is the address of the task's kretprobe instances in
	// the same layout; 0 means none, so a trampoline lr is corruption.
	KretprobeStack uint64
	// KretprobeStackData is the memory of the kretprobe instances, byte 0
	// at KretprobeStack, as [Config.GraphStackData].
	KretprobeStackData []byte
	// Reliable gives arch_stack_walk_reliable's behaviour: the walk fails
	// with [ErrUnreliable] at the first exception boundary, at a start
	// from pt_regs, at an unrecovered trampoline, at any end but FINAL,
	// and whenever its consumer stops it: a [Walk] callback returning
	// false, [Unwinder.Stop], or a [Save] store that fills up (even
	// exactly, as stack_trace_consume_entry reports a full store). Only
	// [Save], [SaveEnd], [Walk] and [Unwinder] can give the verdict: see
	// [Frames].
	Reliable bool
	// ZeroFPEnds ends the walk successfully (EndZeroFP) when the frame
	// pointer to follow is 0, as AAPCS64 user-space chains end. The kernel
	// never sets it: a kernel chain ends at FINAL, and fp == 0 is
	// corruption.
	ZeroFPEnds bool
	// ABI is the frame-record ABI of the kernel walked: [ABIMetaRecord]
	// (6.13+ meta records; also what the zero value, ABIUnknown,
	// walks with) or [ABIFinalRecord] (up to
	// 6.12: the walk ends at the task's pt_regs stackframe before reading
	// it, and {0, 0} records are not meta records). Any other value makes
	// the walk fail before its first frame.
	ABI ABI
	// PtRegs is the layout of struct pt_regs (where the embedded record,
	// regs[29] and pc are); the zero value is this package's constants
	// ([PtRegsSize], [PtRegsStackFrameOff], ...). A layout whose fields do
	// not fit inside its Size makes the walk fail before its first frame.
	PtRegs PtRegsLayout
}
