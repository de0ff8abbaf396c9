package kernel

import (
	"encoding/binary"
	"fmt"

	"github.com/unwindkit/unwindkit/fault"
	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/unwind"
)

// ErrNotSupported is returned (wrapped) by the shadow call stack copy of a
// kernel built without CONFIG_SHADOW_CALL_STACK.
var ErrNotSupported = errs.ErrNotSupported

// OriginSCS is a shadow call stack slot.
const OriginSCS Origin = 100

// noSCSPush are the kernel's assembly functions that create a frame record
// but do not push x30 on the shadow call stack (arch/arm64/kernel/entry.S).
var noSCSPush = map[string]bool{"call_on_irq_stack": true, "cpu_switch_to": true}

// stpX18 is `stp x18, xzr, [sp, #-16]!`: call_on_irq_stack keeping the
// interrupted x18 on the interrupted stack (the 2022 policy).
const stpX18 = 0xa9bf7ff2

// SCSPolicy says where the dump's call_on_irq_stack keeps the interrupted
// task's x18, read from its code in the dump: "on the stack" when it
// stores x18 with `stp x18, xzr, [sp, #-16]!`, else "thread_info"
// (scs_save into task->thread_info.scs_sp, mainline since 6.2 and the
// stable trees).
func (k *Kernel) SCSPolicy() (string, error) {
	a, ok := k.sym["call_on_irq_stack"]
	if !ok {
		return "", fmt.Errorf("call_on_irq_stack is not among the symbols")
	}
	var code [0x80]byte
	if err := k.V.ReadVirt(code[:], a); err != nil {
		return "", fmt.Errorf("call_on_irq_stack code: %w", err)
	}
	for i := 0; i+4 <= len(code); i += 4 {
		if binary.LittleEndian.Uint32(code[i:]) == stpX18 {
			return "on the stack", nil
		}
	}
	return "thread_info", nil
}

// HasSCS reports whether the kernel has shadow call stacks
// (thread_info.scs_sp exists in its BTF).
func (k *Kernel) HasSCS() bool {
	_, ok := k.off["thread_info.scs_sp"]
	return ok
}

// copySCS copies the shadow call stack [base, top) newest first, PACs
// stripped (scs.h: it grows upward; x18 is the next free slot).
func (k *Kernel) copySCS(base, top uint64, kind fp.StackKind) ([]Frame, error) {
	size := k.V.Info.PageSize // SCS_SIZE: PAGE_SIZE << SCS_ORDER (0)
	if top < base || top-base > size || top%8 != 0 || base%8 != 0 {
		return nil, errs.Corruptf(fault.RuleSCSPointerOutsideStack, top, "base %#x, SCS_SIZE %#x", base, size)
	}
	b := make([]byte, top-base)
	if err := k.V.ReadVirt(b, base); err != nil {
		return nil, fmt.Errorf("scs [%#x, %#x): %w", base, top, err)
	}
	var out []Frame
	for o := len(b) - 8; o >= 0; o -= 8 {
		raw := binary.LittleEndian.Uint64(b[o:])
		out = append(out, Frame{PC: k.V.Layout.Strip(raw), Raw: raw, FP: base + uint64(o), Origin: OriginSCS, Stack: kind})
	}
	return out, nil
}

func (k *Kernel) threadSCS(task uint64) (base, sp uint64, err error) {
	bo, err1 := k.offset("thread_info.scs_base")
	so, err2 := k.offset("thread_info.scs_sp")
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%s: thread_info has no scs_base/scs_sp: %w", k.V.Path, ErrNotSupported)
	}
	ti := k.off["task_struct.thread_info"]
	if base, err = k.read64(task + ti + bo); err != nil {
		return 0, 0, err
	}
	sp, err = k.read64(task + ti + so)
	return base, sp, err
}

// SCSCopyCPU copies the shadow call stacks of cpu from its x18: the
// per-CPU IRQ shadow stack when x18 is on it, then the interrupted task's
// from the x18 the entry code saved (where [Kernel.SCSPolicy] says; the
// on-stack slot is found above call_on_irq_stack's frame record, which fs,
// the CPU's FP walk, gives), else the task's own from x18. notes say
// which saved x18 was used.
func (k *Kernel) SCSCopyCPU(cpu int, fs []Frame) (out []Frame, notes []string, err error) {
	if !k.HasSCS() {
		return nil, nil, fmt.Errorf("%s: kernel built without CONFIG_SHADOW_CALL_STACK (no thread_info.scs_sp in BTF): %w", k.V.Path, ErrNotSupported)
	}
	task, _, err := k.Current(cpu)
	if err != nil {
		return nil, nil, err
	}
	tbase, tsp, err := k.threadSCS(task)
	if err != nil {
		return nil, nil, err
	}
	x18 := k.V.CPUs[cpu].Regs.X[18]
	size := k.V.Info.PageSize
	if a, err := k.percpu("irq_shadow_call_stack_ptr", cpu); err == nil {
		ibase, err := k.read64(a)
		if err != nil {
			return nil, nil, fmt.Errorf("irq_shadow_call_stack_ptr: %w", err)
		}
		if x18 >= ibase && x18 <= ibase+size && ibase != 0 {
			irq, err := k.copySCS(ibase, x18, fp.IRQ)
			out = append(out, irq...)
			if err != nil {
				return out, notes, err
			}
			notes = append(notes, fmt.Sprintf("x18 %#x on the IRQ shadow stack [%#x, %#x)", x18, ibase, ibase+size))
			pol, err := k.SCSPolicy()
			if err != nil {
				return out, notes, err
			}
			saved := tsp
			if pol == "on the stack" {
				saved = 0
				for i := 1; i < len(fs); i++ {
					if fs[i-1].Stack == fp.IRQ && fs[i].Stack == fp.Task {
						// fs[i] came from call_on_irq_stack's record at
						// fs[i-1].FP; x18 was pushed just above it.
						if saved, err = k.read64(fs[i-1].FP + 16); err != nil {
							return out, notes, err
						}
						break
					}
				}
				if saved == 0 {
					return out, notes, fmt.Errorf("on-stack policy: the FP walk did not cross from the IRQ stack to the task stack")
				}
				notes = append(notes, fmt.Sprintf("interrupted x18 %#x from the interrupted stack (call_on_irq_stack keeps it there)", saved))
			} else {
				notes = append(notes, fmt.Sprintf("interrupted x18 %#x from thread_info.scs_sp (scs_save in call_on_irq_stack)", saved))
			}
			if n, ok := k.ptRegsX18(fs, saved); ok {
				notes = append(notes, n)
			}
			ts, err := k.copySCS(tbase, saved, fp.Task)
			return append(out, ts...), notes, err
		}
	}
	notes = append(notes, fmt.Sprintf("x18 %#x on the task's shadow stack from %#x", x18, tbase))
	ts, err := k.copySCS(tbase, x18, fp.Task)
	return ts, notes, err
}

// ptRegsX18 compares regs[18] of the pt_regs at the walk's exception
// boundary with the saved x18 the copy used: kernel_entry saves x18 there
// before the C entry handlers push onto the interrupted shadow stack.
func (k *Kernel) ptRegsX18(fs []Frame, saved uint64) (string, bool) {
	for i := 1; i < len(fs); i++ {
		if fs[i].Origin != OriginPtRegs || fs[i-1].FP < k.Regs.StackFrame {
			continue
		}
		regs := fs[i-1].FP - k.Regs.StackFrame
		x18, err := k.read64(regs + k.off["pt_regs.regs"] + 18*8)
		if err != nil {
			return "", false
		}
		d := (int64(saved) - int64(x18)) / 8
		return fmt.Sprintf("pt_regs.regs[18] at the exception boundary %#x: %d entries below the saved x18 (pushed by the C entry handlers before call_on_irq_stack)", x18, d), true
	}
	return "", false
}

// SCSCopyTask copies a blocked task's shadow call stack from
// thread_info.scs_sp (cpu_switch_to's scs_save).
func (k *Kernel) SCSCopyTask(t Task) ([]Frame, error) {
	base, sp, err := k.threadSCS(t.Addr)
	if err != nil {
		return nil, err
	}
	return k.copySCS(base, sp, fp.Task)
}

// Compare lines up an SCS copy and an FP walk with
// [unwind.CompareTraces] and explains each frame only one has by the
// model's rule.
func (k *Kernel) Compare(scsF, fpF []Frame, scsErr, fpErr error) *unwind.Comparison {
	conv := func(fs []Frame) []unwind.Frame {
		out := make([]unwind.Frame, len(fs))
		for i, f := range fs {
			u := unwind.Frame{PC: f.PC, Raw: f.Raw, Symbol: k.Format(f.PC), Stack: f.Stack}
			switch f.Origin {
			case OriginSCS:
				u.Origin = unwind.OriginSCS
			case OriginRegsPC:
				u.Origin = unwind.OriginCaller
			case OriginTask:
				u.Origin = unwind.OriginTask
			case OriginPtRegs:
				u.Origin = unwind.OriginRegsPC
			default:
				u.Origin = unwind.OriginFrame
			}
			out[i] = u
		}
		return out
	}
	cmp := unwind.CompareTraces(nil, conv(scsF), conv(fpF))
	j, n := 0, 0
	for i := range cmp.Rows {
		r := &cmp.Rows[i]
		if !r.InFP {
			r.Note = k.scsOnly(n, scsF, fpF)
			n++
			continue
		}
		if r.InSCS {
			n++
		}
		if !r.InSCS {
			switch fpF[j].Origin {
			case OriginFrame:
				// The return address was saved by the callee's frame
				// record only: the callee must be assembly that keeps a
				// frame record without pushing on the SCS.
				callee := ""
				if j > 0 {
					if s, ok := k.Sym(fpF[j-1].PC); ok {
						callee = s.Name
					}
				}
				if noSCSPush[callee] {
					r.Note = "only FP: saved by " + callee + ", assembly that keeps a frame record but does not push on the SCS"
				} else {
					r.Note = "UNEXPLAINED: only FP, saved by " + callee + ", which should have pushed it on the SCS"
				}
			case OriginLR:
				r.Note = "only FP: x30 of a CPU stopped at a function's first instruction: its prologue had not pushed it on the SCS yet"
			case OriginRegsPC:
				r.Note = "only FP: the stopped pc, which no prologue pushed"
			case OriginTask:
				r.Note = "only FP: cpu_context.pc, the return address into __switch_to (cpu_switch_to is asm and does not push)"
			}
		}
		j++
	}
	cmp.SCSErr, cmp.FPErr = scsErr, fpErr
	return cmp
}

// NoteSCSOnlyPushedUnlinked starts the note of a frame only the SCS copy
// has because the stopped function's prologue pushed x30 on the SCS but
// had not linked its frame record ([Prologue.PushedUnlinked]).
const NoteSCSOnlyPushedUnlinked = "only SCS: x30 pushed by the stopped function's prologue before its frame record was linked"

// scsOnly explains the SCS copy's frame n that the FP walk lacks. The only
// rule: it is the newest entry of a copy started at a CPU's stopped pc
// (fpF[0]), and the prologue of the function holding that pc ran its SCS
// push but has not set x29, so the frame pointer is still the caller's
// and the caller's return address is in x30 and on the SCS only.
func (k *Kernel) scsOnly(n int, scsF, fpF []Frame) string {
	if n != 0 || len(fpF) == 0 || fpF[0].Origin != OriginRegsPC {
		return "UNEXPLAINED: only SCS, and not the newest entry of a CPU stopped in a prologue"
	}
	p, err := k.PrologueAt(fpF[0].PC)
	if err != nil {
		return "UNEXPLAINED: only SCS; prologue unknown: " + err.Error()
	}
	if !p.PushedUnlinked() {
		return "UNEXPLAINED: only SCS; prologue " + p.String()
	}
	return NoteSCSOnlyPushedUnlinked + " (" + p.String() + ")"
}
