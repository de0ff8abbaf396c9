package machine

import (
	"fmt"
	"runtime"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/internal/mem"
	"github.com/unwindkit/unwindkit/scs"
	"github.com/unwindkit/unwindkit/unwind"
)

// ErrChanged reports that the CPU kept changing while another goroutine
// tried to unwind it, and no consistent state was read. It is the same
// value as [scs.ErrChanged] (one sentinel per meaning).
var ErrChanged = errs.ErrChanged

// SaveOptions are the options of an unwind besides the store.
type SaveOptions struct {
	// Skip removes this many frames from the innermost end: from what
	// CPU.Unwind stores, from every Save and Frames of a CPU.Source, and
	// from what CPU.Expect expects; CPU.Compare marks those frames as
	// removed by Skip.
	Skip int
	// StopAtBoundary ends an SCS copy at the first context boundary, as
	// KASAN's filter_irq_stacks cuts traces at the IRQ entry.
	StopAtBoundary bool
	// Reliable makes the FP walk fail at anything a reliable trace may not
	// contain (arch_stack_walk_reliable).
	Reliable bool
}

// pubState is the part of a CPU's registers that concurrent unwinders
// read: a copy of the published fields, taken under the sequence lock.
type pubState struct {
	task    *Task
	stacks  []fp.Stack // the FP walk's accessible stacks for task
	x29, pc uint64
	ctx     Context
}

// taskStacks is the running task and the stacks an FP walk of the CPU may
// read while it runs; built once per Switch to another task.
type taskStacks struct {
	task   *Task
	stacks []fp.Stack
}

// publish stores the registers for concurrent unwinders; end calls it
// inside the change, so readers see it with the change's sequence.
func (c *CPU) publish() {
	if c.task == nil {
		return
	}
	if ts := c.pubTask.Load(); ts == nil || ts.task != c.task {
		c.pubTask.Store(&taskStacks{task: c.task, stacks: c.stacks(c.task)})
	}
	if len(c.ctxs) > 0 {
		ctx := c.cur()
		c.pubX29.Store(ctx.x29)
		c.pubPC.Store(ctx.top().pc)
		c.pubCtx.Store(uint32(ctx.kind))
	}
}

// loadPub reads the published registers (consistent if the sequence is
// even and unchanged around it).
func (c *CPU) loadPub() pubState {
	var p pubState
	if ts := c.pubTask.Load(); ts != nil {
		p.task, p.stacks = ts.task, ts.stacks
	}
	p.x29, p.pc, p.ctx = c.pubX29.Load(), c.pubPC.Load(), Context(c.pubCtx.Load())
	return p
}

// sourceInto fills src for an unwinder running inline in the CPU's current
// function, from the published state p, without allocating.
func (c *CPU) sourceInto(src *unwind.Source, p *pubState, method unwind.Method, opts SaveOptions) error {
	m := c.m
	method = method.Resolve(m.cfg.SCS)
	if p.task == nil {
		return fmt.Errorf("machine: cpu%d has no task", c.id)
	}
	switch method {
	case unwind.MethodSCS:
		if !m.cfg.SCS {
			return fmt.Errorf("machine: shadow call stack copy: %w", unwind.ErrNotSupported)
		}
		var v scs.View
		if err := m.scs.ViewInto(c.id, &v); err != nil {
			return err
		}
		v.StopAtBoundary = opts.StopAtBoundary
		src.SetSCS(&v, unwind.SourceOptions{Symbolizer: m.sym, Skip: opts.Skip})
	case unwind.MethodFP:
		if !m.cfg.FramePointers {
			return fmt.Errorf("machine: frame-pointer walk: %w", unwind.ErrNotSupported)
		}
		t := p.task
		var fc fp.Config
		fc.Stacks = p.stacks // views of the model's memory, read atomically
		// Start from the running function's pc and x29
		// (kunwind_init_from_regs-like); its own pc is then dropped, so
		// the first frame is its caller's, as for an unwinder inlined in
		// it.
		fc.FP, fc.PC, fc.Start = p.x29, p.pc, fp.OriginCaller
		fc.Layout, fc.TaskPtRegs, fc.Reliable = m.cfg.Layout, t.ptRegs, opts.Reliable
		if m.cfg.FGraph {
			fc.GraphTrampoline = m.graphTramp
			fc.GraphStack, fc.GraphStackData = t.graph.region.Base, t.graph.region.View()
		}
		if m.cfg.Kretprobes {
			fc.KretprobeTrampoline = m.kprobeTramp
			fc.KretprobeStack, fc.KretprobeStackData = t.kprobe.region.Base, t.kprobe.region.View()
		}
		src.SetFP(&fc, unwind.SourceOptions{Symbolizer: m.sym, Skip: 1 + opts.Skip})
	case unwind.MethodGCS:
		return fmt.Errorf("machine: the Guarded Control Stack (user space only; the model is a kernel's): %w", unwind.ErrNotSupported)
	default:
		return fmt.Errorf("machine: unknown method %v", method)
	}
	return nil
}

// stacks returns the stacks an FP walk of the CPU may read while it runs
// task t: the task stack and this CPU's IRQ, overflow and SDEI stacks.
func (c *CPU) stacks(t *Task) []fp.Stack {
	st := func(k fp.StackKind, r *mem.Region, low uint64, name string) fp.Stack {
		// Data is a view of the model's words, read atomically.
		return fp.Stack{Kind: k, Low: low, High: r.End(), Name: name, Data: r.View()[low-r.Base:]}
	}
	return []fp.Stack{
		st(fp.Task, t.stack, t.stack.Base, t.Name),
		st(fp.IRQ, c.irqStack, c.irqStack.Base, c.irqStack.Name),
		st(fp.Overflow, c.overflow, c.overflow.Base, c.overflow.Name),
		st(fp.SDEINormal, c.sdeiNormal, c.sdeiNormal.Base, c.sdeiNormal.Name),
		st(fp.SDEICritical, c.sdeiCritical, c.sdeiCritical.Base, c.sdeiCritical.Name),
	}
}

// Source returns a Source for an unwinder invoked inline in the CPU's
// current function. The Source removes opts.Skip frames from every Save
// and Frames, before Save's own skip. Call it from the goroutine driving the CPU, or use
// Unwind from any goroutine.
func (c *CPU) Source(method unwind.Method, opts SaveOptions) (*unwind.Source, error) {
	src := new(unwind.Source)
	if err := c.sourceInto(src, ptr(c.loadPub()), method, opts); err != nil {
		return nil, err
	}
	return src, nil
}

// SourceInto is Source filling src in place, without allocating: for hot
// paths that record a trace on every event (a KASAN-style allocator).
func (c *CPU) SourceInto(src *unwind.Source, method unwind.Method, opts SaveOptions) error {
	return c.sourceInto(src, ptr(c.loadPub()), method, opts)
}

// Invocation says how the modelled code invokes the unwinder.
type Invocation uint8

const (
	// Inline: the unwinder runs inside the current function (as if
	// always-inlined): the first frame is the current function's return
	// address.
	Inline Invocation = iota
	// OutOfLine: the current function calls stack_trace_save, which pushes
	// its own frame and return address: the first frame is the call site
	// in the current function. This is the seed's "skipnr + 1" situation.
	OutOfLine
)

// Unwind unwinds the CPU with method into store and returns how many
// frames it stored. Inline unwinds may run on any goroutine while another
// drives the CPU: they retry until they read a consistent state (or return
// ErrChanged). OutOfLine changes the CPU (it calls stack_trace_save and
// returns from it), so only the driving goroutine may use it.
func (c *CPU) Unwind(method unwind.Method, inv Invocation, store []uint64, opts SaveOptions) (int, error) {
	if inv == OutOfLine {
		if err := c.Call(FnStackTraceSave); err != nil {
			return 0, err
		}
		defer c.Return()
	}
	n, _, err := c.UnwindSeq(method, store, opts)
	return n, err
}

// UnwindSeq is Unwind (inline) that also returns the CPU's sequence number
// of the state it read, for tests that match results against recorded
// ground truths. It reads the published registers, unwinds, and retries
// if the CPU changed meanwhile (a seqlock read), at most 1000 times.
func (c *CPU) UnwindSeq(method unwind.Method, store []uint64, opts SaveOptions) (n int, seq uint64, err error) {
	for try := 0; try < 1000; try++ {
		s1 := c.m.drv.Seq(c.id)
		if s1&1 != 0 {
			runtime.Gosched()
			continue
		}
		p := c.loadPub()
		var src unwind.Source
		err := c.sourceInto(&src, &p, method, opts)
		if err == nil {
			n, err = unwind.Save(&src, store, 0) // src applies opts.Skip
		}
		if c.m.drv.Seq(c.id) != s1 {
			runtime.Gosched()
			continue
		}
		return n, s1, err
	}
	return 0, 0, ErrChanged
}

// Seq returns the CPU's state sequence number: even when stable, bumped by
// two for every state change.
func (c *CPU) Seq() uint64 { return c.m.drv.Seq(c.id) }

func ptr(p pubState) *pubState { return &p }
