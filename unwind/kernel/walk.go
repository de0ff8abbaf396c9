package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/ptrauth"
)

// Memory is kernel virtual memory (a [vmcore.Vmcore] is one).
type Memory interface {
	// ReadVirt reads len(b) bytes at the kernel virtual address va.
	ReadVirt(b []byte, va uint64) error
}

// ABI is the frame-record ABI of a kernel version: how its unwinder
// recognises the end of a task's stack and an exception boundary.
type ABI uint8

const (
	// ABIFinalRecord is the ABI up to 6.12 (arch/arm64/kernel/stacktrace.c
	// unwind_next/kunwind_next): the walk ends when fp equals
	// &task_pt_regs(task)->stackframe, before that record is read (EL0
	// entry zeroes it, EL1 entry writes a synthetic {x29, elr}); an
	// exception boundary is crossed by following that synthetic record
	// like any other, so the interrupted pc is reported as an ordinary
	// return address.
	ABIFinalRecord ABI = iota + 1
	// ABIMetaRecord is the ABI since 6.13: a {0, 0} record heads a meta
	// record whose type says FINAL (only valid at the task's pt_regs) or
	// PT_REGS (an exception boundary: report regs->pc and continue from
	// regs->regs[29]).
	ABIMetaRecord
)

// String names the ABI and the kernels that use it.
func (a ABI) String() string {
	switch a {
	case ABIFinalRecord:
		return "final frame record in pt_regs (<= 6.12)"
	case ABIMetaRecord:
		return "meta frame records (>= 6.13)"
	}
	return fmt.Sprintf("ABI(%d)", uint8(a))
}

// ABIFor returns the ABI of kernel major.minor.
func ABIFor(major, minor int) ABI {
	if major > 6 || major == 6 && minor >= 13 {
		return ABIMetaRecord
	}
	return ABIFinalRecord
}

// Stack is one stack the walk may use (struct stack_info).
type Stack struct {
	// Low and High bound the stack: [Low, High).
	Low, High uint64
	// Kind is the stack's kind (task, irq, overflow, sdei-*).
	Kind fp.StackKind
	// How says where the bounds came from (e.g. "task->stack (btf)").
	How string
}

// PtRegs is the layout of struct pt_regs the walk needs.
type PtRegs struct {
	// Size is sizeof(struct pt_regs); X29, PC and StackFrame are the
	// offsets of regs[29], pc and stackframe.
	Size, X29, PC, StackFrame uint64
}

// Source says where a frame's pc came from.
type Source uint8

const (
	// SourceRegsPC is a pc register: the dumped pc of a CPU.
	SourceRegsPC Source = iota + 1
	// SourceLR is x30 of a CPU stopped at a function's first
	// instruction: the prologue has not yet pushed the frame record, so
	// the caller's return address is only in x30.
	SourceLR
	// SourceTask is a blocked task's cpu_context.pc (thread_saved_pc).
	SourceTask
	// SourceFrame is the lr of a frame record.
	SourceFrame
	// SourcePtRegs is regs->pc at an exception boundary: read from a
	// PT_REGS meta record's pt_regs (6.13+ ABI), or the lr of the
	// synthetic record {x29, elr} EL1 entry writes into pt_regs (<= 6.12).
	SourcePtRegs
)

var sourceNames = [...]string{"?", "regs-pc", "lr-at-entry", "task", "frame", "pt_regs-pc"}

// String names the source.
func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return "?"
}

// Frame is one frame of a kernel walk.
type Frame struct {
	PC     uint64 // after the PAC strip
	Raw    uint64 // as read
	FP     uint64 // the frame pointer after this step
	Source Source
	Stack  fp.StackKind // stack holding the record PC was read from
}

// End says how a walk ended.
type End uint8

const (
	// EndError is a walk stopped by an error.
	EndError End = iota
	// EndFinal is the kernel's successful end: the task's final record.
	EndFinal
	// EndLimit is a walk stopped because the frame buffer was full.
	EndLimit
)

// Walk is the input of one walk.
type Walk struct {
	// Mem is the kernel memory walked.
	Mem Memory
	// ABI selects the kernel version's rules.
	ABI ABI
	// Regs is the layout of struct pt_regs.
	Regs PtRegs
	// Stacks are the stacks the walk may use (the task stack, and for a
	// CPU's current task its IRQ, overflow and SDEI stacks).
	Stacks []Stack
	// TaskPtRegs is task_pt_regs(task): task->stack + THREAD_SIZE -
	// sizeof(struct pt_regs).
	TaskPtRegs uint64
	// FP and PC start the walk; Source is the first frame's source.
	FP, PC uint64
	Source Source
	// LR, when non-zero, is reported as the second frame (SourceLR): the
	// CPU was stopped at the first instruction of the function at PC.
	LR uint64
	// Layout strips the PACs of return addresses.
	Layout ptrauth.Layout
	// Max bounds the frames (0: 512).
	Max int
}

// ErrCorrupt is the project's corruption sentinel.
var ErrCorrupt = errs.ErrCorrupt

// Run walks the chain the way the kernel's unwinder of w.ABI does and
// returns the frames, innermost first, and how it ended. A walk that fails
// part-way returns the frames it had and an error naming the rule.
func (w *Walk) Run() ([]Frame, End, error) {
	max := w.Max
	if max <= 0 {
		max = 512
	}
	if w.Mem == nil {
		return nil, EndError, errors.New("kernel: walk without memory")
	}
	if w.ABI != ABIFinalRecord && w.ABI != ABIMetaRecord {
		return nil, EndError, fmt.Errorf("kernel: walk with unknown %v", w.ABI)
	}
	src := w.Source
	if src == 0 {
		src = SourceRegsPC
	}
	out := []Frame{{PC: w.Layout.Strip(w.PC), Raw: w.PC, FP: w.FP, Source: src, Stack: w.kindOf(w.FP)}}
	if w.LR != 0 {
		out = append(out, Frame{PC: w.Layout.Strip(w.LR), Raw: w.LR, FP: w.FP, Source: SourceLR, Stack: w.kindOf(w.FP)})
	}
	// low[i] is the lowest address of stack i not yet consumed; 0 means
	// the walk has left that stack for good (unwind_consume_stack).
	low := make([]uint64, len(w.Stacks))
	for i, s := range w.Stacks {
		low[i] = s.Low
	}
	cur := -1
	fpv := w.FP
	final := w.TaskPtRegs + w.Regs.StackFrame
	for {
		// Rule (<= 6.12): the final frame is recognised by its address,
		// before it is read.
		if w.ABI == ABIFinalRecord && w.TaskPtRegs != 0 && fpv == final {
			return out, EndFinal, nil
		}
		if len(out) >= max {
			return out, EndLimit, nil
		}
		// Rule: fp is 8-byte aligned.
		if fpv&7 != 0 {
			return out, EndError, errs.Corrupt("misaligned fp", fpv)
		}
		// Rule: the record lies on an accessible stack above what was
		// consumed; it is consumed only if it is not a meta record
		// (kunwind_next_frame_record finds the stack first).
		i, err := w.find(low, fpv, 16)
		if err != nil {
			return out, EndError, err
		}
		var rec [16]byte
		if err := w.Mem.ReadVirt(rec[:16], fpv); err != nil {
			return out, EndError, fmt.Errorf("kernel: frame record at %#x: %w", fpv, err)
		}
		nfp, npc := binary.LittleEndian.Uint64(rec[:]), binary.LittleEndian.Uint64(rec[8:])
		if w.ABI == ABIMetaRecord && nfp == 0 && npc == 0 {
			f, done, err := w.meta(low, &cur, fpv)
			if err != nil || done {
				end := EndFinal
				if err != nil {
					end = EndError
				}
				return out, end, err
			}
			out = append(out, f)
			fpv = f.FP
			continue
		}
		w.commit(low, &cur, i, fpv, 16)
		src := SourceFrame
		if w.ABI == ABIFinalRecord && w.synthetic(fpv, nfp, npc) {
			src = SourcePtRegs
		}
		out = append(out, Frame{PC: w.Layout.Strip(npc), Raw: npc, FP: nfp, Source: src, Stack: w.Stacks[i].Kind})
		fpv = nfp
	}
}

// synthetic reports whether the record {nfp, npc} at fpv is the one EL1
// entry writes into pt_regs->stackframe: regs->regs[29] and regs->pc of
// the pt_regs around it hold the same values. It only labels the frame
// (the kernel follows the record like any other); the pt_regs must lie on
// the same stack.
func (w *Walk) synthetic(fpv, nfp, npc uint64) bool {
	if fpv < w.Regs.StackFrame || w.Regs.Size == 0 {
		return false
	}
	regs := fpv - w.Regs.StackFrame
	s := w.kindOfStack(fpv)
	if s == nil || regs < s.Low || regs+w.Regs.Size > s.High || regs+w.Regs.Size < regs {
		return false
	}
	var b [8]byte
	if w.Mem.ReadVirt(b[:], regs+w.Regs.PC) != nil || binary.LittleEndian.Uint64(b[:]) != npc {
		return false
	}
	return w.Mem.ReadVirt(b[:], regs+w.Regs.X29) == nil && binary.LittleEndian.Uint64(b[:]) == nfp
}

func (w *Walk) kindOfStack(a uint64) *Stack {
	for i := range w.Stacks {
		if a >= w.Stacks[i].Low && a < w.Stacks[i].High {
			return &w.Stacks[i]
		}
	}
	return nil
}

// meta handles a {0, 0} record under the 6.13+ ABI.
func (w *Walk) meta(low []uint64, cur *int, fpv uint64) (Frame, bool, error) {
	var t [8]byte
	if err := w.Mem.ReadVirt(t[:], fpv+16); err != nil {
		return Frame{}, false, fmt.Errorf("kernel: meta record type at %#x: %w", fpv+16, err)
	}
	switch typ := binary.LittleEndian.Uint64(t[:]); typ {
	case fp.MetaFinal:
		if w.TaskPtRegs != 0 && fpv == w.TaskPtRegs+w.Regs.StackFrame {
			return Frame{}, true, nil
		}
		return Frame{}, false, errs.Corruptf("final record not at task pt_regs", fpv, "task pt_regs stackframe is at %#x", w.TaskPtRegs+w.Regs.StackFrame)
	case fp.MetaPtRegs:
		if fpv < w.Regs.StackFrame {
			return Frame{}, false, errs.Corrupt("pt_regs outside stacks", fpv)
		}
		regs := fpv - w.Regs.StackFrame
		i, err := w.find(low, regs, w.Regs.Size)
		if err != nil {
			return Frame{}, false, err
		}
		w.commit(low, cur, i, regs, w.Regs.Size)
		var b [8]byte
		if err := w.Mem.ReadVirt(b[:], regs+w.Regs.PC); err != nil {
			return Frame{}, false, fmt.Errorf("kernel: pt_regs pc at %#x: %w", regs+w.Regs.PC, err)
		}
		pc := binary.LittleEndian.Uint64(b[:])
		if err := w.Mem.ReadVirt(b[:], regs+w.Regs.X29); err != nil {
			return Frame{}, false, fmt.Errorf("kernel: pt_regs x29 at %#x: %w", regs+w.Regs.X29, err)
		}
		x29 := binary.LittleEndian.Uint64(b[:])
		return Frame{PC: w.Layout.Strip(pc), Raw: pc, FP: x29, Source: SourcePtRegs, Stack: w.Stacks[i].Kind}, false, nil
	default:
		return Frame{}, false, errs.Corruptf("bad meta record type", fpv, "type %#x", typ)
	}
}

// find is unwind_find_stack plus the consumed-part check: the size bytes
// at sp must lie on an accessible stack, above everything consumed there.
func (w *Walk) find(low []uint64, sp, size uint64) (int, error) {
	for i, s := range w.Stacks {
		if sp < s.Low || sp >= s.High {
			continue
		}
		if low[i] == 0 {
			return i, errs.Corruptf("stack re-entered", sp, "%s stack [%#x, %#x) was left", s.Kind, s.Low, s.High)
		}
		if sp < low[i] || sp+size < sp || sp+size > s.High {
			return i, errs.Corruptf("fp not above consumed part of stack", sp, "%d bytes at %#x, %s stack usable [%#x, %#x)", size, sp, s.Kind, low[i], s.High)
		}
		return i, nil
	}
	return -1, errs.Corruptf("fp outside stacks", sp, "%d bytes at %#x are on no accessible stack", size, sp)
}

// commit is unwind_consume_stack: moving to another stack leaves the
// current one for good, and the low bound moves past the object.
func (w *Walk) commit(low []uint64, cur *int, i int, sp, size uint64) {
	if *cur >= 0 && *cur != i {
		low[*cur] = 0
	}
	*cur = i
	low[i] = sp + size
}

func (w *Walk) kindOf(a uint64) fp.StackKind {
	for _, s := range w.Stacks {
		if a >= s.Low && a < s.High {
			return s.Kind
		}
	}
	return fp.Unknown
}
