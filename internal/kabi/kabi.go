// Package kabi holds the arm64 Linux kernel ABI constants the model shares:
// the layout of struct pt_regs, frame records and meta records
// (arch/arm64/include/asm/ptrace.h, asm/stacktrace/frame.h), the stack
// sizes (asm/memory.h), the PSTATE of an EL1 exception, and the layout
// of the return stacks that the function-graph tracer and kretprobes keep
// (as the model lays them out in memory). Package fp exports them as its
// own constants; the machine model in package unwind reads them from
// here. This is their one definition.
package kabi

// Frame records and meta records (struct frame_record,
// struct frame_record_meta).
const (
	FrameRecordSize = 16 // {fp, lr}
	MetaRecordSize  = 24 // {0, 0, type}
	MetaTypeOff     = 16 // offset of the type word in a meta record

	MetaNone   = 0 // FRAME_META_TYPE_NONE: reserved, corruption
	MetaFinal  = 1 // FRAME_META_TYPE_FINAL: the task's last record
	MetaPtRegs = 2 // FRAME_META_TYPE_PT_REGS: an exception boundary
)

// struct pt_regs (PT_REGS_SIZE and the offsets asm-offsets.c gives).
const (
	PtRegsSize               = 336    // sizeof(struct pt_regs)
	PtRegsX18Off             = 18 * 8 // regs[18]: the interrupted shadow call stack pointer
	PtRegsX29Off             = 29 * 8 // regs[29]: the interrupted frame pointer
	PtRegsLROff              = 30 * 8 // regs[30]: the interrupted link register
	PtRegsSPOff              = 248    // sp
	PtRegsPCOff              = 256    // pc
	PtRegsPstateOff          = 264    // pstate
	PtRegsOrigX0Off          = 272    // orig_x0
	PtRegsSyscallnoOff       = 280    // syscallno
	PtRegsSDEITTBR1Off       = 288    // sdei_ttbr1
	PtRegsStackFrameOff      = 296    // stackframe: the embedded meta record
	PtRegsLockdepHardirqsOff = 320    // lockdep_hardirqs
	PtRegsExitRCUOff         = 328    // exit_rcu
)

// PstateEL1h is the PSTATE of an exception taken from EL1 with SP_EL1
// (PSR_MODE_EL1h) and DAIF masked, as kernel_entry saves it.
const PstateEL1h = 0x3c5

// Stack sizes in bytes with 4 KiB pages.
const (
	TaskStackSize      = 16 << 10 // THREAD_SIZE
	TaskStackSizeKASAN = 32 << 10 // THREAD_SIZE with KASAN (KASAN_THREAD_SHIFT 1)
	IRQStackSize       = TaskStackSize
	SDEIStackSize      = IRQStackSize
	OverflowStackSize  = 4 << 10 // OVERFLOW_STACK_SIZE
)

// A return stack (function-graph ret_stack or kretprobe instances) at
// address A: the word at A is the entry count n; entry i (0 = oldest) is
// {ret, fp} at A+RetStackEntriesOff+RetStackEntrySize*i.
const (
	RetStackEntriesOff = 8
	RetStackEntrySize  = 16
)

// TaskPtRegs returns task_pt_regs for a task stack whose exclusive top is
// high: the pt_regs that hold the FINAL meta record.
func TaskPtRegs(high uint64) uint64 { return high - PtRegsSize }
