package kernel

import (
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
// recognises the end of a task's stack and an exception boundary. The
// rules themselves live in package fp ([fp.ABI]); this names the kernel
// versions that use each.
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

// PtRegs is the layout of struct pt_regs the walk needs (the same
// fields as [fp.PtRegsLayout], read from the kernel's BTF).
type PtRegs struct {
	// Size is sizeof(struct pt_regs); X29, PC and StackFrame are the
	// offsets of regs[29], pc and stackframe.
	Size, X29, PC, StackFrame uint64
}

// Origin says where a frame's pc came from.
type Origin uint8

const (
	// OriginRegsPC is a pc register: the dumped pc of a CPU.
	OriginRegsPC Origin = iota + 1
	// OriginLR is x30 of a CPU stopped before the function's prologue
	// linked its frame record ([Kernel.PrologueAt]): the caller's return
	// address is only in x30 (and on the SCS if the push ran).
	OriginLR
	// OriginTask is a blocked task's cpu_context.pc (thread_saved_pc).
	OriginTask
	// OriginFrame is the lr of a frame record.
	OriginFrame
	// OriginPtRegs is regs->pc at an exception boundary: read from a
	// PT_REGS meta record's pt_regs (6.13+ ABI), or the lr of the
	// synthetic record {x29, elr} EL1 entry writes into pt_regs (<= 6.12).
	OriginPtRegs
)

var originNames = [...]string{"?", "regs-pc", "lr-at-entry", "task", "frame", "pt_regs-pc"}

// String names the origin.
func (s Origin) String() string {
	if int(s) < len(originNames) {
		return originNames[s]
	}
	return "?"
}

// Frame is one frame of a kernel walk.
type Frame struct {
	PC     uint64 // after the PAC strip
	Raw    uint64 // as read
	FP     uint64 // the frame pointer after this step
	Origin Origin
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

// Walk is the input of one walk, which [Walk.Run] hands to package fp's
// unwinder ([fp.Walk]) with the rules of ABI. A Walk is not safe for
// concurrent use (Run keeps the stacks' bytes it read).
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
	// FP and PC start the walk.
	FP, PC uint64
	// Start is the [Origin] of the first frame: [OriginTask] (a blocked
	// task's saved fp and pc) or [OriginRegsPC] (a CPU's registers).
	Start Origin
	// LR, when non-zero, is reported as the second frame (OriginLR): the
	// CPU was stopped before the function at PC linked its frame record.
	LR uint64
	// Layout strips the PACs of return addresses.
	Layout ptrauth.Layout
	// Max bounds the frames (0: 512).
	Max int
	// Notes say what decided the walk's start (set by [Kernel.CPUWalk]
	// and [Kernel.TaskWalk]): which task, whether x30 is reported and
	// which instructions of the stopped function decided it.
	Notes []string

	// read is what Run read from Mem, kept for later Runs.
	read *stackBytes
}

// ErrCorrupt is the project's corruption sentinel.
var ErrCorrupt = errs.ErrCorrupt

// maxStackSize bounds one stack read from the dump (THREAD_SIZE is at
// most 64 KiB; a larger stack comes from a corrupt dump).
const maxStackSize = 1 << 20

// readChunk is the unit in which stacks are read from Mem: the smallest
// arm64 page, so a page missing from a (trimmed) dump costs only itself.
const readChunk = 4096

// stackBytes is the memory of a walk's stacks, read from Mem: one byte
// slice per stack (a chunk Mem could not give reads as zeros and is
// listed in holes), and the fp.Stack list over them.
type stackBytes struct {
	key    []Stack    // the Stacks they were read for
	stacks []fp.Stack // Data set; empty stacks left out
	holes  []hole
}

// hole is a chunk of a stack that Mem could not read.
type hole struct {
	lo, hi uint64
	err    error
}

// load reads w.Stacks from w.Mem, or returns what an earlier Run read
// for the same stacks.
func (w *Walk) load() (*stackBytes, error) {
	if r := w.read; r != nil && len(r.key) == len(w.Stacks) {
		same := true
		for i := range r.key {
			same = same && r.key[i] == w.Stacks[i]
		}
		if same {
			return r, nil
		}
	}
	r := &stackBytes{key: append([]Stack(nil), w.Stacks...)}
	for _, s := range w.Stacks {
		if s.High <= s.Low {
			continue // empty: nothing the walk could use
		}
		if s.High-s.Low > maxStackSize {
			return nil, fmt.Errorf("kernel: %s stack [%#x, %#x) is larger than %d bytes", s.Kind, s.Low, s.High, maxStackSize)
		}
		data := make([]byte, s.High-s.Low)
		// Read chunk by chunk: a trimmed dump holds only the pages the
		// walk touches. A chunk that cannot be read stays zero and is
		// remembered, so that a walk that reads it fails with the read
		// error, as reading the dump directly would.
		for a := s.Low; a < s.High; {
			n := min(readChunk-a%readChunk, s.High-a)
			if err := w.Mem.ReadVirt(data[a-s.Low:a-s.Low+n], a); err != nil {
				r.holes = append(r.holes, hole{a, a + n, err})
			}
			a += n
		}
		r.stacks = append(r.stacks, fp.Stack{Kind: s.Kind, Low: s.Low, High: s.High, Data: data})
	}
	w.read = r
	return r, nil
}

// release drops the stacks' bytes an earlier Run read: the next Run
// reads them again.
func (w *Walk) release() { w.read = nil }

// unread returns the read error of a hole among the n bytes at a, or nil.
func (r *stackBytes) unread(a, n uint64) error {
	for _, h := range r.holes {
		if a < h.hi && a+n > h.lo && a+n > a {
			return fmt.Errorf("kernel: %d bytes at %#x: %w", n, a, h.err)
		}
	}
	return nil
}

// fpABI is the fp rule set of a.
func (a ABI) fpABI() fp.ABI {
	if a == ABIFinalRecord {
		return fp.ABIFinalRecord
	}
	return fp.ABIMetaRecord
}

// Config returns the [fp.Config] of the walk: its stacks with the bytes
// read from Mem (read once, on the first call or Run, and kept while
// Stacks do not change), its start, ABI, pt_regs layout, task pt_regs and
// PAC layout. It is what Run walks.
func (w *Walk) Config() (*fp.Config, error) {
	if w.Mem == nil {
		return nil, errors.New("kernel: walk without memory")
	}
	if w.ABI != ABIFinalRecord && w.ABI != ABIMetaRecord {
		return nil, fmt.Errorf("kernel: walk with unknown %v", w.ABI)
	}
	r, err := w.load()
	if err != nil {
		return nil, err
	}
	start := fp.OriginRegsPC // a CPU's dumped registers are its pt_regs
	if w.Start == OriginTask {
		start = fp.OriginTask
	}
	return &fp.Config{
		Stacks: r.stacks, FP: w.FP, PC: w.PC, Start: start, Layout: w.Layout, TaskPtRegs: w.TaskPtRegs,
		ABI:    w.ABI.fpABI(),
		PtRegs: fp.PtRegsLayout{Size: w.Regs.Size, X29: w.Regs.X29, PC: w.Regs.PC, StackFrame: w.Regs.StackFrame},
	}, nil
}

// Run walks the chain the way the kernel's unwinder of w.ABI does, with
// package fp's unwinder over the stacks' bytes ([Walk.Config]), and
// returns the frames, innermost first, and how it ended. A walk that
// fails part-way returns the frames it had and an error naming the rule
// (an [fp.CorruptError]) or the read that failed.
func (w *Walk) Run() ([]Frame, End, error) {
	c, err := w.Config()
	if err != nil {
		return nil, EndError, err
	}
	max := w.Max
	if max <= 0 {
		max = 512
	}
	r := w.read
	var u fp.Unwinder
	u.Init(c)
	var out []Frame
	prev := w.FP // the fp the step to the next frame starts from
	for u.Next() {
		if len(out) >= max {
			u.Stop()
			break
		}
		f := u.Frame()
		if len(out) > 0 {
			// A step that read a chunk missing from the dump fails
			// there, with the frames before it.
			if err := r.stepUnread(c, prev, f.Origin); err != nil {
				return out, EndError, err
			}
		}
		kf := Frame{PC: f.PC, Raw: f.Raw, FP: f.FP, Stack: f.Stack, Origin: OriginFrame}
		switch {
		case len(out) == 0:
			kf.Origin = w.Start
			if kf.Origin == 0 {
				kf.Origin = OriginRegsPC
			}
		case f.Origin == fp.OriginRegsPC:
			kf.Origin = OriginPtRegs
		}
		out = append(out, kf)
		if len(out) == 1 && w.LR != 0 {
			out = append(out, Frame{PC: w.Layout.Strip(w.LR), Raw: w.LR, FP: w.FP, Origin: OriginLR, Stack: f.Stack})
		}
		prev = f.FP
	}
	switch u.End() {
	case fp.EndFinal:
		if w.ABI == ABIMetaRecord {
			// The FINAL meta record was read.
			if err := r.unread(prev, fp.MetaRecordSize); err != nil {
				return out, EndError, err
			}
		}
		return out, EndFinal, nil
	case fp.EndStopped:
		return out, EndLimit, nil
	}
	err = u.Err()
	var ce *fp.CorruptError
	if w.ABI == ABIMetaRecord && errors.As(err, &ce) && ce.Addr == prev && !beforeRead[ce.Rule] {
		// The failing step read a {0, 0} record at prev and its type
		// word: if those were missing from the dump, the read is the
		// error, not what the zeros in their place broke.
		if rerr := r.unread(prev, fp.MetaRecordSize); rerr != nil {
			err = rerr
		}
	}
	return out, EndError, err
}

// beforeRead are the rules fp checks before it reads the record at fp.
var beforeRead = map[string]bool{fp.RuleMisalignedFP: true, fp.RuleFPOutsideStacks: true, fp.RuleFPNotIncreasing: true,
	fp.RuleStackReentered: true}

// stepUnread returns the read error if the step from fp prev to a frame
// of origin o read a chunk missing from the dump: the record at prev,
// and for an exception boundary of the meta-record ABI the type word and
// the pt_regs' pc and regs[29].
func (r *stackBytes) stepUnread(c *fp.Config, prev uint64, o fp.Origin) error {
	if err := r.unread(prev, fp.FrameRecordSize); err != nil {
		return err
	}
	if o != fp.OriginRegsPC || c.ABI != fp.ABIMetaRecord || prev < c.PtRegs.StackFrame {
		return nil
	}
	regs := prev - c.PtRegs.StackFrame
	for _, a := range []uint64{prev + fp.MetaTypeOff, regs + c.PtRegs.PC, regs + c.PtRegs.X29} {
		if err := r.unread(a, 8); err != nil {
			return err
		}
	}
	return nil
}
