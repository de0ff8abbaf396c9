package kernel

import (
	"encoding/binary"
	"fmt"

	"github.com/unwindkit/unwindkit/fault"
	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/scs"
	"github.com/unwindkit/unwindkit/unwind"
)

// ErrNotSupported is returned (wrapped) by the shadow call stack copy of a
// kernel built without CONFIG_SHADOW_CALL_STACK, of a kernel whose dynamic
// shadow call stack this boot left off, and of a dump without BTF, where
// whether the kernel has shadow call stacks is unknown (the error says
// which; see [Kernel.SCSState]).
var ErrNotSupported = errs.ErrNotSupported

// noSCSPush are the kernel's assembly functions that create a frame record
// but do not push x30 on the shadow call stack (arch/arm64/kernel/entry.S).
var noSCSPush = map[string]bool{"call_on_irq_stack": true, "cpu_switch_to": true}

// Encodings the x18 policy check matches in call_on_irq_stack (Arm ARM
// C6.2; the kernel's scs_save, ldr_this_cpu/str_this_cpu and
// get_current_task macros, arch/arm64/include/asm/{scs,assembler}.h).
const (
	insnStpX18XZR = 0xa9bf7ff2 // stp x18, xzr, [sp, #-16]!
	maskRd        = 0x1f
	insnMrsSPEL0  = 0xd5384100 // mrs xt, sp_el0 (get_current_task)
	insnMrsTPIDR1 = 0xd538d080 // mrs xt, tpidr_el1 (this_cpu_offset)
	insnMrsTPIDR2 = 0xd53cd040 // mrs xt, tpidr_el2 (the same under VHE)
	insnStrX18Imm = 0xf9000012 // str x18, [xn, #imm12*8]: mask 0xffc0001f
	insnStrX18Reg = 0xf8206812 // str x18, [xn, xm]: mask 0xffe0fc1f
	insnAdrp      = 0x90000000 // adrp xd, label: mask 0x9f000000
	insnAddImm64  = 0x91000000 // add xd, xn, #imm{, lsl #12}: mask 0xff800000
	insnBLR       = 0xd63f0000 // blr xn: mask 0xfffffc1f
)

// X18Save is where the dump's call_on_irq_stack keeps the interrupted
// task's x18, read from its code ([Kernel.X18Policy]).
type X18Save struct {
	// Policy is one of the three policies of package scs.
	Policy scs.Policy
	// Var is the per-CPU variable the x18 is stored into (scs.PerCPU:
	// irq_shadow_call_stack_saved_ptr), as call_on_irq_stack's adrp/add
	// compute it; 0 for the other policies.
	Var uint64
	// Why names the instructions that decided, with their offsets.
	Why string
}

// policyScan bounds the code of call_on_irq_stack read for the policy:
// the save comes before its call (blr), within its first instructions.
const policyScan = 0x80

// X18Policy reads the code of call_on_irq_stack up to its call (blr) and
// recognises where it keeps the interrupted x18 before switching to the
// IRQ shadow stack, one of the three policies of package scs:
//   - scs.ThreadInfo: `mrs xN, sp_el0; str x18, [xN, #off]` with off the
//     BTF's task_struct.thread_info + thread_info.scs_sp (scs_save);
//   - scs.OnStack: `stp x18, xzr, [sp, #-16]!`;
//   - scs.PerCPU: `adrp xN, var; add xN, xN, #lo; mrs xM, tpidr_el1;
//     str x18, [xN, xM]` (str_this_cpu), var being
//     irq_shadow_call_stack_saved_ptr when that is among the symbols.
//
// Code that stores x18 in none of these ways before the call is an
// error, as is a store that contradicts the BTF or the symbols.
func (k *Kernel) X18Policy() (X18Save, error) {
	a, ok := k.sym["call_on_irq_stack"]
	if !ok {
		return X18Save{}, fmt.Errorf("%s: call_on_irq_stack is not among the symbols", k.V.Path)
	}
	var code [policyScan]byte
	if err := k.mem.ReadVirt(code[:], a); err != nil {
		return X18Save{}, fmt.Errorf("%s: call_on_irq_stack code at %#x: %w", k.V.Path, a, err)
	}
	return k.x18Policy(a, code[:])
}

// regVal is what the policy scan knows of a register.
type regVal struct {
	kind uint8 // 0 unknown, valConst, valCurrent, valPerCPU
	v    uint64
}

const (
	valConst   = 1 + iota // an address from adrp (and add)
	valCurrent            // mrs xN, sp_el0: current task_struct
	valPerCPU             // mrs xN, tpidr_el1/2: this CPU's per-CPU offset
)

func (k *Kernel) x18Policy(a uint64, code []byte) (X18Save, error) {
	var r [32]regVal
	where := func(i int) string { return fmt.Sprintf("call_on_irq_stack+%#x", i) }
	for i := 0; i+4 <= len(code); i += 4 {
		w := binary.LittleEndian.Uint32(code[i:])
		pc := a + uint64(i)
		rd := w & maskRd
		switch {
		case w == insnStpX18XZR:
			return X18Save{Policy: scs.OnStack, Why: where(i) + ": stp x18, xzr, [sp, #-16]!"}, nil
		case w&^maskRd == insnMrsSPEL0:
			r[rd] = regVal{kind: valCurrent}
		case w&^maskRd == insnMrsTPIDR1 || w&^maskRd == insnMrsTPIDR2:
			r[rd] = regVal{kind: valPerCPU}
		case w&0x9f000000 == insnAdrp:
			imm := int64(w>>5&0x7ffff)<<2 | int64(w>>29&3)
			imm = imm << 43 >> 43 // sign-extend 21 bits
			r[rd] = regVal{kind: valConst, v: pc&^0xfff + uint64(imm<<12)}
		case w&0xff800000 == insnAddImm64:
			imm := uint64(w >> 10 & 0xfff)
			if w>>22&1 != 0 {
				imm <<= 12
			}
			if rn := w >> 5 & 31; r[rn].kind == valConst {
				r[rd] = regVal{kind: valConst, v: r[rn].v + imm}
			} else {
				r[rd] = regVal{}
			}
		case w&0xffc0001f == insnStrX18Imm:
			rn, off := w>>5&31, uint64(w>>10&0xfff)*8
			if r[rn].kind != valCurrent {
				return X18Save{}, fmt.Errorf("%s: %s: str x18, [x%d, #%d] into no known place (x%d is not current from sp_el0)", k.V.Path, where(i), rn, off, rn)
			}
			want, err := k.scsSPOff()
			if err == nil && want != off {
				return X18Save{}, fmt.Errorf("%s: %s: str x18, [current, #%d], but thread_info.scs_sp is at %d in task_struct (BTF)", k.V.Path, where(i), off, want)
			}
			return X18Save{Policy: scs.ThreadInfo, Why: fmt.Sprintf("mrs x%d, sp_el0 then %s: str x18, [x%d, #%d] (thread_info.scs_sp)", rn, where(i), rn, off)}, nil
		case w&0xffe0fc1f == insnStrX18Reg:
			rn, rm := w>>5&31, w>>16&31
			if r[rn].kind == valPerCPU {
				rn, rm = rm, rn
			}
			if r[rn].kind != valConst || r[rm].kind != valPerCPU {
				return X18Save{}, fmt.Errorf("%s: %s: str x18, [x%d, x%d] into no known place (want a per-CPU variable: adrp/add, mrs tpidr_el1)", k.V.Path, where(i), rn, rm)
			}
			v := r[rn].v
			if s, ok := k.sym["irq_shadow_call_stack_saved_ptr"]; ok && s != v {
				return X18Save{}, fmt.Errorf("%s: %s: str x18 into the per-CPU variable at %#x, but irq_shadow_call_stack_saved_ptr is at %#x", k.V.Path, where(i), v, s)
			}
			return X18Save{Policy: scs.PerCPU, Var: v, Why: fmt.Sprintf("%s: str x18, [x%d, x%d] into the per-CPU variable at %#x (irq_shadow_call_stack_saved_ptr)", where(i), rn, rm, v)}, nil
		case w&0xfffffc1f == insnBLR:
			return X18Save{}, fmt.Errorf("%s: %s: blr before any recognised store of x18 (thread_info: str x18, [current, #scs_sp]; on-stack: stp x18, xzr, [sp, #-16]!; per-CPU: str x18, [var, this_cpu]): x18 policy unknown", k.V.Path, where(i))
		}
	}
	return X18Save{}, fmt.Errorf("%s: call_on_irq_stack: no recognised store of x18 in its first %d bytes: x18 policy unknown", k.V.Path, len(code))
}

// scsSPOff is the offset of thread_info.scs_sp in task_struct.
func (k *Kernel) scsSPOff() (uint64, error) {
	so, err := k.offset("thread_info.scs_sp")
	if err != nil {
		return 0, err
	}
	return k.off["task_struct.thread_info"] + so, nil
}

// HasSCS reports whether the kernel's tasks and CPUs use shadow call
// stacks ([Kernel.SCSState] is nil).
func (k *Kernel) HasSCS() bool { return k.SCSState() == nil }

// SCSState says whether the kernel's tasks and CPUs use shadow call
// stacks: nil if they do, else an error wrapping [ErrNotSupported] that
// says why not. A kernel uses them when thread_info.scs_sp exists in its
// BTF (CONFIG_SHADOW_CALL_STACK) and, if it was built with a dynamic
// shadow call stack (CONFIG_DYNAMIC_SCS, which defines the static key
// dynamic_scs_enabled), this boot turned it on: such a kernel is compiled
// with pac-ret and patches its paciasp and autiasp into SCS pushes and
// pops at boot only on a CPU without pointer authentication; on one with
// it, x18 is an ordinary register, thread_info.scs_sp still exists, and
// no shadow stack is written.
func (k *Kernel) SCSState() error {
	if _, ok := k.off["thread_info.scs_sp"]; !ok {
		if k.Types == nil {
			// thread_info.scs_sp is looked up in BTF (or DWARF): without
			// it the answer is unknown, not "no shadow call stack".
			return fmt.Errorf("%s: whether the kernel has shadow call stacks is unknown (no BTF to look up thread_info.scs_sp): %w", k.V.Path, ErrNotSupported)
		}
		return fmt.Errorf("%s: kernel built without CONFIG_SHADOW_CALL_STACK (no thread_info.scs_sp in BTF): %w", k.V.Path, ErrNotSupported)
	}
	key, ok := k.sym["dynamic_scs_enabled"]
	if !ok {
		return nil // a shadow call stack compiled in: always on
	}
	// struct static_key_false { struct static_key key; }: the key's
	// atomic_t enabled is its first word (include/linux/jump_label.h).
	var b [4]byte
	if err := k.mem.ReadVirt(b[:], key); err != nil {
		return fmt.Errorf("%s: dynamic shadow call stack (CONFIG_DYNAMIC_SCS): whether this boot turned it on is unknown: dynamic_scs_enabled at %#x: %v: %w", k.V.Path, key, err, ErrNotSupported)
	}
	if on := int32(binary.LittleEndian.Uint32(b[:])); on <= 0 {
		return fmt.Errorf("%s: dynamic shadow call stack (CONFIG_DYNAMIC_SCS) off on this boot: dynamic_scs_enabled at %#x is %d (the CPUs have pointer authentication, so the kernel kept paciasp/autiasp and no shadow stack is written): %w", k.V.Path, key, on, ErrNotSupported)
	}
	return nil
}

// copySCS copies the shadow call stack [base, top) newest first, PACs
// stripped (scs.h: it grows upward; x18 is the next free slot), with
// package scs's copy through the front door ([scs.NewSnapshotView],
// [unwind.NewSCSSource]) over the bytes read from the dump.
func (k *Kernel) copySCS(base, top uint64, kind fp.StackKind) ([]unwind.Frame, error) {
	size := k.V.Info.PageSize // SCS_SIZE: PAGE_SIZE << SCS_ORDER (0)
	if top < base || top-base > size || top%8 != 0 || base%8 != 0 {
		return nil, errs.Corruptf(fault.RuleSCSPointerOutsideStack, top, "base %#x, SCS_SIZE %#x", base, size)
	}
	b := make([]byte, top-base)
	if err := k.mem.ReadVirt(b, base); err != nil {
		return nil, fmt.Errorf("scs [%#x, %#x): %w", base, top, err)
	}
	v := scs.NewSnapshotView(b, base, top, k.V.Layout)
	var out []unwind.Frame
	for f, err := range unwind.NewSCSSource(&v, unwind.SourceOptions{}).Frames() {
		if err != nil {
			return out, fmt.Errorf("scs [%#x, %#x): %w", base, top, err)
		}
		f.Stack = kind
		out = append(out, f)
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
// from the x18 the entry code saved (where [Kernel.X18Policy] says; the
// on-stack slot is found above call_on_irq_stack's frame record, which fs,
// the CPU's FP walk, gives), else the task's own from x18. notes say
// which saved x18 was used.
//
// When the function holding the CPU's pc has not pushed x30 yet and x30
// is the caller's return address ([Kernel.PrologueAt]: X30Live, no SCS
// push ran), x30 is the copy's first frame (OriginLR, PAC stripped), as
// in the FP walk; once the push ran it is the SCS's newest entry.
func (k *Kernel) SCSCopyCPU(cpu int, fs []unwind.Frame) (out []unwind.Frame, notes []string, err error) {
	if err := k.SCSState(); err != nil {
		return nil, nil, err
	}
	if cpu < 0 || cpu >= len(k.V.CPUs) {
		return nil, nil, fmt.Errorf("%s: no cpu %d", k.V.Path, cpu)
	}
	out, notes, err = k.scsCopyCPU(cpu, fs)
	r := &k.V.CPUs[cpu].Regs
	p, perr := k.PrologueAt(r.PC)
	switch {
	case perr != nil:
		notes = append(notes, fmt.Sprintf("x30 %#x not added: whether it is the caller's return address is unknown: %v", r.X[30], perr))
	case p.X30 == X30Live && p.SCSPushAt < 0:
		kind := fp.Task
		if len(out) > 0 {
			kind = out[0].Stack
		}
		lr := unwind.Frame{PC: k.V.Layout.Strip(r.X[30]), Raw: r.X[30], Origin: fp.OriginLR, Stack: kind}
		out = append([]unwind.Frame{lr}, out...)
		notes = append(notes, fmt.Sprintf("x30 %#x first: the caller's return address, not pushed on the SCS yet: %s", r.X[30], p))
	case p.X30 == X30Live:
		notes = append(notes, fmt.Sprintf("x30 %#x is the SCS's newest entry, pushed at +%#x: %s", r.X[30], p.SCSPushAt, p))
	default:
		notes = append(notes, fmt.Sprintf("x30 not added: %s", p))
	}
	return out, notes, err
}

func (k *Kernel) scsCopyCPU(cpu int, fs []unwind.Frame) (out []unwind.Frame, notes []string, err error) {
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
			pol, err := k.X18Policy()
			if err != nil {
				return out, notes, err
			}
			var saved uint64
			switch pol.Policy {
			case scs.OnStack:
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
				notes = append(notes, fmt.Sprintf("interrupted x18 %#x from the interrupted stack (%s)", saved, pol.Why))
			case scs.PerCPU:
				va := pol.Var + k.PerCPU[cpu] // percpu succeeded above: PerCPU[cpu] exists
				if saved, err = k.read64(va); err != nil {
					return out, notes, fmt.Errorf("%s: per-CPU saved x18 of cpu %d at %#x: %w", k.V.Path, cpu, va, err)
				}
				if saved == 0 {
					// Reset to 0 on exit: 0 while x18 is on the IRQ
					// shadow stack contradicts the entry code.
					return out, notes, errs.Corruptf(fault.RulePerCPUSavedX18Zero, va,
						"%s: cpu %d: x18 %#x is on the IRQ shadow stack, irq_shadow_call_stack_saved_ptr is 0", k.V.Path, cpu, x18)
				}
				notes = append(notes, fmt.Sprintf("interrupted x18 %#x from per_cpu(irq_shadow_call_stack_saved_ptr) at %#x (%s)", saved, va, pol.Why))
			default:
				saved = tsp
				notes = append(notes, fmt.Sprintf("interrupted x18 %#x from thread_info.scs_sp (%s)", saved, pol.Why))
			}
			if err := k.checkPtRegsX18(fs, tbase, saved); err != nil {
				return out, notes, err
			}
			ts, err := k.copySCS(tbase, saved, fp.Task)
			return append(out, ts...), notes, err
		}
	}
	notes = append(notes, fmt.Sprintf("x18 %#x on the task's shadow stack from %#x", x18, tbase))
	ts, err := k.copySCS(tbase, x18, fp.Task)
	return ts, notes, err
}

// checkPtRegsX18 checks regs[18] of the pt_regs at the walk's exception
// boundary against the saved x18 the copy uses: kernel_entry saves x18
// there before the C entry handlers push onto the interrupted shadow
// stack, so it must be at or below the saved x18, on the same shadow
// stack [base, base+SCS_SIZE). Anything else means the saved x18 is not
// the interrupted one (a wrong policy, a stale or corrupt value): an
// ErrCorrupt naming the field and its address.
func (k *Kernel) checkPtRegsX18(fs []unwind.Frame, base, saved uint64) error {
	for i := 1; i < len(fs); i++ {
		if fs[i].Origin != fp.OriginRegsPC || fs[i-1].FP < k.Regs.StackFrame {
			continue
		}
		regs := fs[i-1].FP - k.Regs.StackFrame
		at := regs + k.off["pt_regs.regs"] + 18*8
		x18, err := k.read64(at)
		if err != nil {
			return fmt.Errorf("%s: pt_regs.regs[18] at %#x: %w", k.V.Path, at, err)
		}
		if x18 < base || x18 > saved || saved > base+k.V.Info.PageSize {
			return errs.Corruptf(fault.RulePtRegsX18AboveSaved, at,
				"%s: pt_regs.regs[18] %#x at the exception boundary is not at or below the saved x18 %#x on the shadow stack [%#x, %#x)",
				k.V.Path, x18, saved, base, base+k.V.Info.PageSize)
		}
		return nil
	}
	return nil
}

// SCSCopyTask copies a blocked task's shadow call stack from
// thread_info.scs_sp (cpu_switch_to's scs_save). A task current on a CPU
// ([Kernel.RunningOn]) is copied from that CPU's x18 ([Kernel.SCSCopyCPU]
// over the CPU's FP walk): its thread_info.scs_sp is stale.
func (k *Kernel) SCSCopyTask(t Task) ([]unwind.Frame, error) {
	if err := k.SCSState(); err != nil {
		return nil, err
	}
	if c := k.RunningOn(t.Addr); c >= 0 {
		w, err := k.TaskWalk(t)
		if err != nil {
			return nil, err
		}
		fs, _, _ := w.Run()
		out, _, err := k.SCSCopyCPU(c, fs)
		return out, err
	}
	base, sp, err := k.threadSCS(t.Addr)
	if err != nil {
		return nil, err
	}
	return k.copySCS(base, sp, fp.Task)
}

// Compare lines up an SCS copy and an FP walk with
// [unwind.CompareTraces] and explains each frame only one has by the
// model's rule.
func (k *Kernel) Compare(scsF, fpF []unwind.Frame, scsErr, fpErr error) *unwind.Comparison {
	cmp := unwind.CompareTraces(kernelNames{k}, scsF, fpF)
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
			case fp.OriginFrame:
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
			case fp.OriginLR:
				r.Note = "only FP: x30 of a CPU stopped before its prologue linked the frame record, and the SCS copy lacks it"
			case fp.OriginStopPC:
				r.Note = "only FP: the stopped pc, which no prologue pushed"
			case fp.OriginTask:
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
func (k *Kernel) scsOnly(n int, scsF, fpF []unwind.Frame) string {
	if n != 0 || len(fpF) == 0 || fpF[0].Origin != fp.OriginStopPC {
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

// kernelNames names pcs as the kernel prints them (Kernel.Format).
type kernelNames struct{ k *Kernel }

func (n kernelNames) Name(pc uint64) string { return n.k.Format(pc) }
