package fp

import "fmt"

// ABI is the frame-record ABI of the kernel whose stacks are walked: how
// the walk recognises the end of a task's stack and an exception
// boundary ([Config.ABI]).
type ABI uint8

const (
	// ABIUnknown, the zero value, is no ABI; a Config with it walks with
	// [ABIMetaRecord], as a zero Start starts as OriginCaller.
	ABIUnknown ABI = iota // unknown
	// ABIMetaRecord is the ABI since Linux 6.13
	// (kunwind_next_frame_record_meta): a {0, 0} record heads a meta
	// record whose type is FINAL (the end, valid only at the task's
	// pt_regs) or PT_REGS (an exception boundary: report regs->pc,
	// continue from regs->regs[29]).
	ABIMetaRecord // meta-record
	// ABIFinalRecord is the ABI up to Linux 6.12 (unwind_next in
	// arch/arm64/kernel/stacktrace.c of 6.1, kunwind_next of 6.12): the
	// walk ends successfully (EndFinal) when fp equals
	// &task_pt_regs(task)->stackframe, checked before that record is read
	// (EL0 entry zeroes it). There are no meta records: a {0, 0} record
	// anywhere else is an ordinary record, so its lr 0 is reported and
	// the next step, at fp 0, fails as fp outside the stacks (or ends the
	// chain with [Config.ZeroFPEnds]), exactly as those kernels do. An
	// exception boundary is crossed by following the synthetic record
	// {x29, elr} that EL1 entry writes into pt_regs->stackframe like any
	// other record; the walk reports its lr with [OriginRegsPC] when the
	// pt_regs around it (on the same stack) hold that x29 and pc.
	ABIFinalRecord // final-record
)

// ABIFor returns the ABI of Linux major.minor.
func ABIFor(major, minor int) ABI {
	if major > 6 || major == 6 && minor >= 13 {
		return ABIMetaRecord
	}
	return ABIFinalRecord
}

// PtRegsLayout is the layout of struct pt_regs the walk reads, in bytes
// ([Config.PtRegs]). The zero value means this package's constants:
// [PtRegsSize], [PtRegsX29Off], [PtRegsPCOff], [PtRegsStackFrameOff]
// (Linux 7.2's: Size 320, StackFrame 296). A real kernel's layout comes
// from its BTF: Debian's 6.1 and 6.12 have Size 336 and StackFrame 304,
// 6.13's meta-record kernels Size 336 and StackFrame 296.
type PtRegsLayout struct {
	// Size is sizeof(struct pt_regs).
	Size uint64
	// X29 is the offset of regs[29], the interrupted frame pointer.
	X29 uint64
	// PC is the offset of pc, the interrupted program counter.
	PC uint64
	// StackFrame is the offset of stackframe, the record embedded in
	// pt_regs (a meta record, or under [ABIFinalRecord] a frame record).
	StackFrame uint64
}

// maxPtRegsSize bounds PtRegsLayout.Size (the kernels' are 320 and 336).
const maxPtRegsSize = 4096

// defaultPtRegs is the layout the zero PtRegsLayout stands for.
var defaultPtRegs = PtRegsLayout{Size: PtRegsSize, X29: PtRegsX29Off, PC: PtRegsPCOff, StackFrame: PtRegsStackFrameOff}

// checkABI checks c's ABI and pt_regs layout, returning an error that
// says which field is unusable.
func (c *Config) checkABI() error {
	if c.ABI != ABIUnknown && c.ABI != ABIMetaRecord && c.ABI != ABIFinalRecord {
		return fmt.Errorf("fp: Config.ABI %v is not an ABI of this package", c.ABI)
	}
	_, err := c.ptRegsLayout()
	return err
}

// ptRegs returns the walk's pt_regs layout: the Config's, or for the
// zero layout the package's constants. (Resolving it here, on the rare
// paths that read pt_regs, keeps Init as cheap as before the layout was
// configurable.)
func (u *Unwinder) ptRegs() *PtRegsLayout {
	if u.cfg.PtRegs.Size == 0 { // checkABI: a non-zero layout has a Size
		return &defaultPtRegs
	}
	return &u.cfg.PtRegs
}

// ptRegsLayout returns c's pt_regs layout with the zero value resolved,
// or an error saying which field is unusable.
func (c *Config) ptRegsLayout() (PtRegsLayout, error) {
	l := c.PtRegs
	if l == (PtRegsLayout{}) {
		return defaultPtRegs, nil
	}
	rec := uint64(MetaRecordSize)
	if c.ABI == ABIFinalRecord {
		rec = FrameRecordSize
	}
	switch {
	case l.Size == 0 || l.Size%8 != 0 || l.Size > maxPtRegsSize:
		return l, fmt.Errorf("fp: Config.PtRegs.Size %d is not a multiple of 8 in (0, %d]", l.Size, maxPtRegsSize)
	case l.X29%8 != 0 || l.X29 > l.Size-8:
		return l, fmt.Errorf("fp: Config.PtRegs.X29 %d is not an aligned word inside %d bytes", l.X29, l.Size)
	case l.PC%8 != 0 || l.PC > l.Size-8:
		return l, fmt.Errorf("fp: Config.PtRegs.PC %d is not an aligned word inside %d bytes", l.PC, l.Size)
	case l.StackFrame%8 != 0 || l.Size < rec || l.StackFrame > l.Size-rec:
		return l, fmt.Errorf("fp: Config.PtRegs.StackFrame %d does not leave a %d-byte record inside %d bytes", l.StackFrame, rec, l.Size)
	}
	return l, nil
}

// nextFinalABI is the step of ABIFinalRecord (unwind_next of 6.1,
// kunwind_next of 6.12). Rule: the walk ends when fp is the task's
// pt_regs stackframe, checked before that record is read (EL0 entry
// zeroes it; the kernel never looks). Otherwise the step is
// nextFrameRecord's, which reads {0, 0} as an ordinary record under this
// ABI, and a record that is the synthetic one of an exception boundary
// is labelled. Kept out of nextFrameRecord (and out of line) so that the
// default ABI's step is unchanged.
//
//go:noinline
func (u *Unwinder) nextFinalABI() status {
	if t := u.cfg.TaskPtRegs; t != 0 && u.fp == t+u.ptRegs().StackFrame {
		return stepFinal
	}
	if st := u.nextFrameRecord(); st != stepOK {
		return st
	}
	// The record just consumed is the last 16 bytes below cur.low.
	if fp := u.cur.low - FrameRecordSize; u.synthetic(&u.cur, fp, u.fp, u.pc) {
		// The exception boundary: the lr is the interrupted pc
		// (regs->pc), the fp its regs[29].
		u.origin = OriginRegsPC
		u.regs = fp - u.ptRegs().StackFrame
	}
	return stepOK
}

// synthetic reports whether the frame record {nfp, npc} at fp, read from
// s, is the one EL1 entry writes into pt_regs->stackframe under
// [ABIFinalRecord] (kernel_entry: stp x29, x22 (elr) into
// S_STACKFRAME): the pt_regs around it lie on the same stack and their
// regs[29] and pc hold the same values. It only labels the frame; the
// kernel follows the record like any other and consumes only its 16
// bytes.
func (u *Unwinder) synthetic(s *stackInfo, fp, nfp, npc uint64) bool {
	l := u.ptRegs()
	if fp < s.base+l.StackFrame {
		return false
	}
	regs := fp - l.StackFrame
	if l.Size > s.top-regs {
		return false
	}
	return s.load(regs+l.PC) == npc && s.load(regs+l.X29) == nfp
}
