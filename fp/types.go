package fp

import "fmt"

// Layout of the objects the unwinder reads, in bytes (arm64 Linux). These
// are the kernel ABI (arch/arm64/include/asm/ptrace.h,
// asm/stacktrace/frame.h, asm/memory.h) of Linux 7.2, defined here once
// for the module: the machine model in package unwind/machine reads them
// from here. struct pt_regs has changed between versions: 7.2's (checked
// against Debian's 7.2.13 and its BTF, testdata/kernel/deb-7.2) ends with
// the meta record; the first meta-record kernels (6.13) had
// lockdep_hardirqs and exit_rcu after it (336 bytes), which arm64's move
// to the generic entry code took out; 6.1 and 6.12 have a 16-byte record at
// 304 in 336 bytes. A kernel's own layout goes in [Config.PtRegs].
const (
	// FrameRecordSize is the size of a frame record {fp, lr}
	// (struct frame_record): 16.
	FrameRecordSize = 16
	// MetaRecordSize is the size of a meta record {0, 0, type}
	// (struct frame_record_meta): 24.
	MetaRecordSize = 24
	// MetaTypeOff is the offset of the type word in a meta record: 16.
	MetaTypeOff = 16

	// PtRegsSize is sizeof(struct pt_regs), PT_REGS_SIZE: 320.
	PtRegsSize = 320
	// PtRegsX18Off is the offset of regs[18], the interrupted shadow call
	// stack pointer: 144.
	PtRegsX18Off = 18 * 8
	// PtRegsX29Off is the offset of regs[29], the interrupted frame
	// pointer: 232.
	PtRegsX29Off = 29 * 8
	// PtRegsLROff is the offset of regs[30], the interrupted link
	// register: 240.
	PtRegsLROff = 30 * 8
	// PtRegsSPOff is the offset of sp: 248.
	PtRegsSPOff = 248
	// PtRegsPCOff is the offset of pc, the interrupted program counter:
	// 256.
	PtRegsPCOff = 256
	// PtRegsPstateOff is the offset of pstate: 264.
	PtRegsPstateOff = 264
	// PtRegsOrigX0Off is the offset of orig_x0: 272.
	PtRegsOrigX0Off = 272
	// PtRegsSyscallnoOff is the offset of syscallno: 280.
	PtRegsSyscallnoOff = 280
	// PtRegsSDEITTBR1Off is the offset of sdei_ttbr1: 288.
	PtRegsSDEITTBR1Off = 288
	// PtRegsStackFrameOff is the offset of the embedded meta record
	// (pt_regs::stackframe), the last member: 296; its type word is at
	// PtRegsStackFrameOff+16.
	PtRegsStackFrameOff = 296
)

// Meta record types (FRAME_META_TYPE_*).
const (
	// MetaNone (0) is reserved; a meta record of this type is corruption.
	MetaNone = 0
	// MetaFinal (1) marks the last record of a task's stack, embedded in
	// the task's own pt_regs at the top of its stack.
	MetaFinal = 1
	// MetaPtRegs (2) marks a record embedded in a pt_regs pushed at an
	// exception boundary.
	MetaPtRegs = 2
)

// Default stack sizes in bytes (THREAD_SIZE, IRQ_STACK_SIZE,
// OVERFLOW_STACK_SIZE, SDEI_STACK_SIZE with 4 KiB pages).
const (
	// TaskStackSize is THREAD_SIZE without KASAN: 16 KiB.
	TaskStackSize = 16 << 10
	// TaskStackSizeKASAN is THREAD_SIZE with KASAN (KASAN_THREAD_SHIFT
	// 1): 32 KiB.
	TaskStackSizeKASAN = 32 << 10
	// IRQStackSize is IRQ_STACK_SIZE, which equals THREAD_SIZE (use
	// TaskStackSizeKASAN for a KASAN kernel).
	IRQStackSize = TaskStackSize
	// SDEIStackSize is SDEI_STACK_SIZE, which equals IRQ_STACK_SIZE.
	SDEIStackSize = IRQStackSize
	// OverflowStackSize is OVERFLOW_STACK_SIZE: 4 KiB.
	OverflowStackSize = 4 << 10
)

// Layout of a return stack (function-graph ret_stack or kretprobe
// instances) at address A: the word at A is the entry count n; entry i
// (0 = oldest, n-1 = newest) is {ret, fp} at
// A+RetStackEntriesOff+RetStackEntrySize*i.
const (
	// RetStackEntriesOff is the offset of entry 0 from the return stack's
	// address: 8.
	RetStackEntriesOff = 8
	// RetStackEntrySize is the size of one {ret, fp} entry: 16.
	RetStackEntrySize = 16
)

// TaskPtRegsAddr returns task_pt_regs for a task stack whose exclusive top
// is high and whose kernel's struct pt_regs has layout l (the zero layout:
// this package's constants, 7.2's): high - sizeof(struct pt_regs), the
// pt_regs that hold the FINAL record ([Config.TaskPtRegs]).
func TaskPtRegsAddr(high uint64, l PtRegsLayout) uint64 {
	if l.Size == 0 {
		return high - PtRegsSize
	}
	return high - l.Size
}

// StackKind is the kind of a stack (enum stack_type). Its String is the
// kind's lowercase name, e.g. "irq" (the line comment of its constant).
type StackKind uint8

//go:generate go tool stringer -type=StackKind -linecomment -output=stackkind_string.go

// Stack kinds. The zero value, Unknown, is the kind of a frame whose stack
// is not known (a start fp outside every stack).
const (
	Unknown      StackKind = iota // unknown
	Task                          // task
	IRQ                           // irq
	Overflow                      // overflow
	SDEINormal                    // sdei-normal
	SDEICritical                  // sdei-critical
	// Extra is any other stack the caller supplies: a signal alternate
	// stack, an EFI runtime stack, a snapshot region.
	Extra // extra
)

// Stack is one stack [Low, High) that the walk may read (struct
// stack_info), with its contents. A Stack with Low == 0 is inaccessible and
// ignored, as the kernel's stackinfo_get_unknown() is, so a driver can pass
// a zero Stack for a per-CPU stack it may not touch.
type Stack struct {
	// Kind is the kind of stack, reported in each [Frame.Stack].
	Kind StackKind
	// Low is the lowest address, 8-byte aligned.
	Low uint64
	// High is the exclusive top, 8-byte aligned.
	High uint64
	// Name names the stack in error messages, e.g. "cpu0 irq".
	Name string
	// Data is the stack's memory as the caller holds it: High-Low bytes,
	// Data[0] being the byte at Low, each 8-byte word little-endian (as
	// arm64 stores it). This is how memory from a dump, a core file or a
	// debugger is walked: slice each stack out of the bytes read. The
	// walk only reads Data, so Data must not change while a walk runs;
	// any number of walks may share it. Data that starts 8-byte aligned
	// (a slice of a make([]byte) at a multiple of 8) is read in place;
	// other Data is decoded into a copy when the walk first enters the
	// stack. Data may be nil only for a Stack of unwindkit's machine
	// model, whose stacks are read from the model's own memory.
	Data []byte
	// Holes are the parts of [Low, High) whose bytes the caller does not
	// hold (a page a crash dump lacks): Data holds zeros there. A step
	// that reads a hole fails there with an error naming the bytes it
	// needed and wrapping the Hole's Err (so errors.Is finds the dump's
	// sentinel, e.g. vmcore.ErrNotMapped), the frames before it kept: a
	// missing page is reported, never walked as zeros. Holes must lie
	// inside [Low, High) and must not change during a walk.
	Holes []Hole
}

// Hole is a part [Low, High) of a Stack whose bytes are missing, and why.
type Hole struct {
	Low, High uint64
	// Err says why the bytes are missing (the read error of the dump);
	// nil reads as "not held".
	Err error
}

// Origin says where a frame's PC came from: the module's one origin enum,
// used by every unwinder and reader of unwindkit (packages scs, unwind,
// unwind/core and unwind/kernel report their frames with it). Its first
// values are the kernel's enum kunwind_source
// (arch/arm64/kernel/stacktrace.c); then the two a shadow call stack
// copy needs, the two of a CPU stopped in a dump, and the Guarded
// Control Stack's. Its String is the
// origin's lowercase name, e.g. "regs-pc" (the line comment of its
// constant).
type Origin uint8

//go:generate go tool stringer -type=Origin,End,ABI -linecomment -output=types_string.go

// Frame origins. The zero value, OriginUnknown, is not an origin.
const (
	// OriginUnknown is not a valid origin (KUNWIND_SOURCE_UNKNOWN); a
	// Config with it starts as OriginCaller.
	OriginUnknown Origin = iota // unknown
	// OriginFrame: the lr of a frame record (KUNWIND_SOURCE_FRAME).
	OriginFrame // frame
	// OriginCaller: the start PC of an unwind of the current task (its
	// caller's return address, __builtin_return_address(0);
	// KUNWIND_SOURCE_CALLER).
	OriginCaller // caller
	// OriginTask: the saved PC of a blocked task (thread_saved_pc;
	// KUNWIND_SOURCE_TASK).
	OriginTask // task
	// OriginRegsPC: the pc of a pt_regs at an exception boundary (under
	// [ABIFinalRecord], the lr of the synthetic record {x29, elr} that EL1
	// entry writes into those pt_regs; KUNWIND_SOURCE_REGS_PC).
	OriginRegsPC // regs-pc
	// OriginSCS: a shadow call stack slot (package scs).
	OriginSCS // scs
	// OriginInterruptedPC: the interrupted pc a shadow call stack copy
	// reports at a context boundary, kept per-CPU (scs's
	// KeepInterruptedPC).
	OriginInterruptedPC // interrupted-pc
	// OriginStopPC: the pc of a CPU at a stop, from the registers a
	// crash dump holds (package unwind/kernel).
	OriginStopPC // stop-pc
	// OriginLR: x30 of a CPU stopped before the function at its pc linked
	// its frame record: the caller's return address is only in x30
	// (package unwind/kernel).
	OriginLR // lr-at-entry
	// OriginGCS: an entry of the arm64 Guarded Control Stack, pushed by
	// the hardware on every bl (package unwind/gcs).
	OriginGCS // gcs
)

// Flags records how a frame's PC was recovered (union unwind_flags).
type Flags uint8

const (
	// FlagGraph: the PC was the function-graph return trampoline and was
	// replaced from the graph return stack.
	FlagGraph Flags = 1 << iota
	// FlagKretprobe: the PC was the kretprobe trampoline and was replaced
	// from the kretprobe instances.
	FlagKretprobe
)

// Frame is one unwound frame with its provenance: the module's one frame
// type. The frame-pointer walk ([Frames]), the shadow call stack copy
// (package scs, whose Frame is this type) and the front door (package
// unwind, whose Frame is this type too) all yield it, and the readers of
// real memory (unwind/core, unwind/kernel) report their traces with it.
// It carries no name: naming is the symbolizer's (the front door's
// Source.Name). Its fields fit the registers of a call with an error
// beside it, so an iterator yields it without spilling to memory.
type Frame struct {
	// PC is the return address after PAC strip and trampoline recovery.
	PC uint64
	// Raw is the value as read (a record's lr, a pt_regs pc, a start PC or
	// a shadow stack slot), before strip and recovery.
	Raw uint64
	// FP is, for a frame-pointer walk's frame, the frame pointer after
	// this step: where the next record is expected. 0 for a shadow stack
	// copy's frames.
	FP uint64
	// Addr is, for a shadow stack slot (OriginSCS), the slot's address;
	// 0 otherwise.
	Addr uint64
	// Origin says where PC came from.
	Origin Origin
	// Stack is the kind of stack holding the object PC was read from (for
	// a walk's first frame: the stack holding the start FP). For a shadow
	// call stack copy's frames it is the kind of stack the slot's context
	// runs on: Task, IRQ, SDEINormal or SDEICritical (scs.ContextOf maps
	// it back to the context).
	Stack StackKind
	// Flags are the trampoline recoveries applied to PC (0: none).
	Flags Flags
}

// Recovered reports whether a trampoline (function graph or kretprobe)
// was replaced by the real return address.
func (f Frame) Recovered() bool { return f.Flags != 0 }

// String returns the frame's PC in hex and its origin in brackets:
// "0xffff800080012345 [scs]".
func (f Frame) String() string {
	return fmt.Sprintf("%#x [%s]", f.PC, f.Origin)
}

// End says how a walk ended. Its String is the end's lowercase name, e.g.
// "final".
type End uint8

const (
	// EndNone: the walk has not ended yet (the zero value: unknown).
	EndNone End = iota // none
	// EndFinal: the walk reached the FINAL meta record in the task's
	// pt_regs: the trace is complete.
	EndFinal // final
	// EndZeroFP: with Config.ZeroFPEnds, a frame pointer of 0 ended a
	// user-space chain: the trace is complete.
	EndZeroFP // zero-fp
	// EndStopped: the consumer stopped the walk (callback returned false,
	// iteration broke off, or the store was full and more frames follow).
	EndStopped // stopped
	// EndError: the walk failed; the error says why and where.
	EndError // error
)

// Complete reports whether the walk reached the outermost frame
// (EndFinal or EndZeroFP).
func (e End) Complete() bool { return e == EndFinal || e == EndZeroFP }
