package main

import (
	"errors"
	"fmt"

	"github.com/unwindkit/unwindkit/fault"
	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/unwind/kernel"
)

// maxGuessedStacks bounds the stacks a guessed walk adds: a task stack,
// the IRQ stack and an overflow or SDEI stack between them at most.
const maxGuessedStacks = 4

// guessCPUWalk walks cpu from its registers when the kernel's own stack
// bounds are unknown (kernel.Kernel.CPUWalk failed: no BTF for
// task_struct.stack, or no current task without data symbols): the least a
// dump offers. Each stack is taken as the THREAD_SIZE block holding a
// frame record (stacks are THREAD_SIZE long and aligned to THREAD_ALIGN, a
// multiple of it): first the block of x29, then, each time the walk leaves
// the blocks it has, the block of the record it reached; the outermost
// block is taken as the task's, whose pt_regs holds the final record, and
// the others as IRQ stacks. Every guess is in the notes.
func guessCPUWalk(k *kernel.Kernel, cpu int, why error) (kernel.Result, []string) {
	r := &k.V.CPUs[cpu].Regs
	ts := k.ThreadSize
	notes := []string{fmt.Sprintf("GUESS: the kernel's stack bounds are unknown (%v): stacks taken as the THREAD_SIZE (%#x, itself a guess: 16 KiB or the page size, doubled by KASAN) blocks holding the frame records", why, ts)}
	block := func(a uint64) kernel.Stack {
		lo := a &^ (ts - 1)
		return kernel.Stack{Low: lo, High: lo + ts, Kind: fp.Task, How: fmt.Sprintf("guess: the THREAD_SIZE block holding %#x", a)}
	}
	start := r.X[29]
	if start < k.V.PageOffset {
		start = r.SP
	}
	stacks := []kernel.Stack{block(start)}
	w := &kernel.Walk{Mem: k.V, ABI: k.ABI, Regs: k.Regs, FP: r.X[29], PC: r.PC, Start: fp.OriginStopPC, Layout: k.V.Layout}
	if p, err := k.PrologueAt(r.PC); err == nil && p.X30 == kernel.X30Live {
		w.LR = r.X[30]
		notes = append(notes, fmt.Sprintf("cpu %d: x30 %#x reported second: %s", cpu, r.X[30], p))
	} else if err != nil {
		notes = append(notes, fmt.Sprintf("cpu %d: x30 %#x not reported: %v", cpu, r.X[30], err))
	}
	var res kernel.Result
	for {
		for i := range stacks {
			stacks[i].Kind = fp.IRQ
		}
		stacks[len(stacks)-1].Kind = fp.Task
		w.Stacks = append([]kernel.Stack(nil), stacks...)
		w.TaskPtRegs = stacks[len(stacks)-1].High - k.Regs.Size
		fs, end, err := w.Run()
		res = kernel.Result{Walk: w, Frames: fs, End: end, Err: err}
		var ce *fault.CorruptError
		if err == nil || len(stacks) == maxGuessedStacks || !errors.As(err, &ce) || ce.Rule != fault.RuleFPOutsideStacks || ce.Addr < k.V.PageOffset {
			break
		}
		stacks = append(stacks, block(ce.Addr))
		w = &kernel.Walk{Mem: k.V, ABI: k.ABI, Regs: k.Regs, FP: w.FP, PC: w.PC, Start: w.Start, LR: w.LR, Layout: w.Layout}
	}
	if len(stacks) > 1 {
		notes = append(notes, fmt.Sprintf("GUESS: %d stacks: the blocks before the last taken as IRQ stacks, the last as the task's (its pt_regs at the top holds the final record)", len(stacks)))
	}
	w.Notes = notes
	return res, notes
}
