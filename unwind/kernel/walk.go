package kernel

import (
	"errors"
	"fmt"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/ptrauth"
	"github.com/unwindkit/unwindkit/unwind"
)

// Memory is kernel virtual memory (a [vmcore.Vmcore] is one).
type Memory interface {
	// ReadVirt reads len(b) bytes at the kernel virtual address va.
	ReadVirt(b []byte, va uint64) error
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

// Walk is the input of one walk, which [Walk.Run] hands to package fp's
// unwinder ([fp.Walk]) with the rules of ABI. A Walk is not safe for
// concurrent use (Run keeps the stacks' bytes it read).
type Walk struct {
	// Mem is the kernel memory walked.
	Mem Memory
	// ABI selects the kernel version's rules ([fp.ABIFor]).
	ABI fp.ABI
	// Regs is the layout of struct pt_regs (from the kernel's BTF).
	Regs fp.PtRegsLayout
	// Stacks are the stacks the walk may use (the task stack, and for a
	// CPU's current task its IRQ, overflow and SDEI stacks).
	Stacks []Stack
	// TaskPtRegs is task_pt_regs(task): task->stack + THREAD_SIZE -
	// sizeof(struct pt_regs).
	TaskPtRegs uint64
	// FP and PC start the walk.
	FP, PC uint64
	// Start is the [fp.Origin] of the first frame: fp.OriginTask (a
	// blocked task's saved fp and pc) or fp.OriginStopPC (a CPU's
	// registers; also what the zero value starts as).
	Start fp.Origin
	// LR, when non-zero, is reported as the second frame (fp.OriginLR): the
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

// stackBytes is the memory of a walk's stacks, read from Mem: the
// fp.Stack list over one byte slice per stack (a chunk Mem could not give
// reads as zeros and is one of the stack's fp.Holes, so that fp fails a
// step that reads it with the read error).
type stackBytes struct {
	key    []Stack    // the Stacks they were read for
	stacks []fp.Stack // Data and Holes set; empty stacks left out
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
		// walk touches. A chunk that cannot be read stays zero and is a
		// hole, so that a walk that reads it fails with the read error,
		// as reading the dump directly would.
		var holes []fp.Hole
		for a := s.Low; a < s.High; {
			n := min(readChunk-a%readChunk, s.High-a)
			if err := w.Mem.ReadVirt(data[a-s.Low:a-s.Low+n], a); err != nil {
				holes = append(holes, fp.Hole{Low: a, High: a + n, Err: fmt.Errorf("kernel: %w", err)})
			}
			a += n
		}
		r.stacks = append(r.stacks, fp.Stack{Kind: s.Kind, Low: s.Low, High: s.High, Data: data, Holes: holes})
	}
	w.read = r
	return r, nil
}

// release drops the stacks' bytes an earlier Run read: the next Run
// reads them again.
func (w *Walk) release() { w.read = nil }

// Config returns the [fp.Config] of the walk: its stacks with the bytes
// read from Mem (read once, on the first call or Run, and kept while
// Stacks do not change), its start, ABI, pt_regs layout, task pt_regs and
// PAC layout. It is what Run walks.
func (w *Walk) Config() (*fp.Config, error) {
	if w.Mem == nil {
		return nil, errors.New("kernel: walk without memory")
	}
	if w.ABI != fp.ABIFinalRecord && w.ABI != fp.ABIMetaRecord {
		return nil, fmt.Errorf("kernel: walk with unknown %v", w.ABI)
	}
	r, err := w.load()
	if err != nil {
		return nil, err
	}
	start := fp.OriginRegsPC // a CPU's dumped registers are its pt_regs
	if w.Start == fp.OriginTask {
		start = fp.OriginTask
	}
	return &fp.Config{
		Stacks: r.stacks, FP: w.FP, PC: w.PC, Start: start, Layout: w.Layout, TaskPtRegs: w.TaskPtRegs,
		ABI: w.ABI, PtRegs: w.Regs,
	}, nil
}

// Run walks the chain the way the kernel's unwinder of w.ABI does, with
// package fp's unwinder over the stacks' bytes ([Walk.Config]) through
// the front door ([unwind.NewFPSource]), and returns the frames,
// innermost first, and how it ended: fp.EndFinal, fp.EndStopped (Max
// frames) or fp.EndError. A walk that fails part-way returns the frames
// it had and an error naming the rule (an [fp.CorruptError]) or the read
// that failed.
func (w *Walk) Run() ([]unwind.Frame, fp.End, error) {
	c, err := w.Config()
	if err != nil {
		return nil, fp.EndError, err
	}
	max := w.Max
	if max <= 0 {
		max = 512
	}
	var out []unwind.Frame
	for f, err := range unwind.NewFPSource(c, unwind.SourceOptions{}).Frames() {
		if err != nil {
			return out, fp.EndError, err
		}
		if len(out) >= max {
			return out, fp.EndStopped, nil
		}
		if len(out) == 0 && w.Start != fp.OriginTask {
			f.Origin = fp.OriginStopPC
		}
		out = append(out, f)
		if len(out) == 1 && w.LR != 0 {
			out = append(out, unwind.Frame{PC: w.Layout.Strip(w.LR), Raw: w.LR, FP: w.FP, Origin: fp.OriginLR, Stack: f.Stack})
		}
	}
	return out, fp.EndFinal, nil
}
