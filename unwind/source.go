package unwind

import (
	"errors"
	"fmt"
	"iter"
	"runtime"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/scs"
)

// Errors. ErrNotSupported and ErrCorrupt are unwindkit's shared sentinels,
// the same values in every package.
var (
	// ErrNotSupported: the asked-for mechanism is absent (the shadow call
	// stack or frame pointers are off, or this GOARCH keeps no frame
	// pointers). errors.Is(err, unix.ENOSYS) is true.
	ErrNotSupported = errs.ErrNotSupported
	// ErrCorrupt is wrapped by every *CorruptError.
	ErrCorrupt = errs.ErrCorrupt
	// ErrInterruptedTopHidden: the SCS copy reached a context whose x18 the
	// OnStack policy left on the interrupted stack.
	ErrInterruptedTopHidden = scs.ErrInterruptedTopHidden
	// ErrBusy: the CPU kept changing while another goroutine tried to
	// unwind it, and no consistent state was read.
	ErrBusy = errors.New("unwind: CPU state kept changing during the unwind")
)

// CorruptError describes corrupt state: the rule, the address, detail.
type CorruptError = errs.CorruptError

// Method selects an unwinding technique.
type Method uint8

const (
	// MethodAuto is the shadow call stack copy when the shadow call stack
	// is on, else the frame-pointer walk.
	MethodAuto Method = iota
	// MethodSCS copies return addresses off the shadow call stack.
	MethodSCS
	// MethodFP walks frame records.
	MethodFP
)

// String returns "auto", "scs" or "fp".
func (m Method) String() string {
	switch m {
	case MethodAuto:
		return "auto"
	case MethodSCS:
		return "scs"
	case MethodFP:
		return "fp"
	}
	return fmt.Sprintf("Method(%d)", uint8(m))
}

// SaveOptions are the options of an unwind besides the store.
type SaveOptions struct {
	// Skip removes this many frames from the innermost end.
	Skip int
	// StopAtBoundary ends an SCS copy at the first context boundary, as
	// KASAN's filter_irq_stacks cuts traces at the IRQ entry.
	StopAtBoundary bool
	// Reliable makes the FP walk fail at anything a reliable trace may not
	// contain (arch_stack_walk_reliable).
	Reliable bool
}

// Source is what an unwinder reads: one CPU's registers and memory at one
// moment, or a snapshot. It is immutable; Save and Frames may be called on
// it any number of times, concurrently.
type Source struct {
	method Method // MethodSCS or MethodFP
	scs    scs.View
	fp     fp.Config
	fpSkip int // frames the FP walk reports before the unwinder's caller
	sym    *Symbolizer
}

// Method returns the technique the source unwinds with.
func (s *Source) Method() Method { return s.method }

// Save copies the return addresses of src into store, innermost first,
// after removing skip frames, and returns how many it stored. A full store
// is not an error. A walk that fails part-way returns the frames it had
// and an error: ErrCorrupt (wrapped), ErrInterruptedTopHidden, or
// ErrNotSupported.
func Save(src *Source, store []uint64, skip int) (int, error) {
	if src.method == MethodSCS {
		return scs.Save(&src.scs, store, skip)
	}
	return fp.Save(&src.fp, store, skip+src.fpSkip)
}

// FrameSource says where a Frame's PC came from.
type FrameSource uint8

const (
	// SourceSCS: a shadow call stack slot.
	SourceSCS FrameSource = iota
	// SourceInterruptedPC: the interrupted pc kept per-CPU at a context
	// boundary (KeepInterruptedPC).
	SourceInterruptedPC
	// SourceFrame: the lr of a frame record.
	SourceFrame
	// SourceCaller: the start of an FP walk of the current task.
	SourceCaller
	// SourceTask: the saved pc of a blocked task.
	SourceTask
	// SourceRegsPC: the pc of a pt_regs at an exception boundary.
	SourceRegsPC
)

// String returns the source's lowercase name, e.g. "regs-pc".
func (s FrameSource) String() string {
	switch s {
	case SourceSCS:
		return "scs"
	case SourceInterruptedPC:
		return "interrupted-pc"
	case SourceFrame:
		return "frame"
	case SourceCaller:
		return "caller"
	case SourceTask:
		return "task"
	case SourceRegsPC:
		return "regs-pc"
	}
	return fmt.Sprintf("FrameSource(%d)", uint8(s))
}

// Frame is one unwound frame with its provenance.
type Frame struct {
	PC     uint64      // the return address, PAC stripped and recovered
	Raw    uint64      // the value as stored
	Symbol string      // function+offset, or hex
	Source FrameSource // where PC came from
	// Stack is the FP walk's stack kind (fp.Unknown for SCS frames).
	Stack fp.StackKind
	// Context is the context the frame's record or slot belongs to (for
	// FP frames, derived from the stack kind).
	Context Context
	// Recovered is true when a trampoline (function graph or kretprobe)
	// was replaced by the real return address.
	Recovered bool
}

// Frames returns src's frames with provenance, innermost first. The final
// pair carries the walk's error, if any, with a zero Frame.
func (src *Source) Frames() iter.Seq2[Frame, error] {
	return func(yield func(Frame, error) bool) {
		if src.method == MethodSCS {
			max := 8
			for _, sg := range src.scs.Segments() {
				if sg.Top >= sg.Base && sg.Top-sg.Base < 1<<24 {
					max += int((sg.Top-sg.Base)/8) + 1
				}
			}
			buf := make([]scs.Frame, max)
			n, err := scs.Frames(&src.scs, buf, 0)
			for _, f := range buf[:n] {
				fs := SourceSCS
				if f.Source == scs.FromInterruptedPC {
					fs = SourceInterruptedPC
				}
				if !yield(Frame{PC: f.PC, Raw: f.Raw, Symbol: src.name(f.PC), Source: fs, Context: f.Context}, nil) {
					return
				}
			}
			if err != nil {
				yield(Frame{}, err)
			}
			return
		}
		skip := src.fpSkip
		for f, err := range fp.Frames(&src.fp) {
			if err != nil {
				yield(Frame{}, err)
				return
			}
			if skip > 0 {
				skip--
				continue
			}
			fr := Frame{PC: f.PC, Raw: f.Raw, Symbol: src.name(f.PC), Stack: f.Stack, Recovered: f.Flags != 0,
				Context: stackContext(f.Stack)}
			switch f.Source {
			case fp.SourceFrame:
				fr.Source = SourceFrame
			case fp.SourceCaller:
				fr.Source = SourceCaller
			case fp.SourceTask:
				fr.Source = SourceTask
			case fp.SourceRegsPC:
				fr.Source = SourceRegsPC
			}
			if !yield(fr, nil) {
				return
			}
		}
	}
}

func (src *Source) name(pc uint64) string {
	if src.sym == nil {
		return fmt.Sprintf("%#x", pc)
	}
	return src.sym.Name(pc)
}

// pubState is the part of a CPU's registers that concurrent unwinders read.
type pubState struct {
	seq     uint64
	task    *Task
	stacks  []fp.Stack // the FP walk's accessible stacks for task
	x29, pc uint64
	ctx     Context
}

func (c *CPU) publish(seq uint64) {
	p := &pubState{seq: seq, task: c.task}
	if c.task != nil {
		if c.stacksTask != c.task {
			c.stacksTask, c.stacksList = c.task, c.stacks(c.task)
		}
		p.stacks = c.stacksList
	}
	if c.task != nil && len(c.ctxs) > 0 {
		ctx := c.cur()
		p.x29 = ctx.x29
		p.pc = ctx.top().pc
		p.ctx = ctx.kind
	}
	c.pub.Store(p)
}

// sourceInto fills src for an unwinder running inline in the CPU's current
// function, from the published state p, without allocating.
func (c *CPU) sourceInto(src *Source, p *pubState, method Method, opts SaveOptions) error {
	m := c.m
	if method == MethodAuto {
		method = MethodFP
		if m.cfg.SCS {
			method = MethodSCS
		}
	}
	if p == nil || p.task == nil {
		return fmt.Errorf("unwind: cpu%d has no task", c.id)
	}
	src.method, src.sym, src.fpSkip = method, m.sym, 0
	switch method {
	case MethodSCS:
		if m.scs == nil {
			return fmt.Errorf("unwind: shadow call stack copy: %w", ErrNotSupported)
		}
		if err := m.scs.ViewInto(c.id, &src.scs); err != nil {
			return err
		}
		src.scs.StopAtBoundary = opts.StopAtBoundary
	case MethodFP:
		if !m.cfg.FramePointers {
			return fmt.Errorf("unwind: frame-pointer walk: %w", ErrNotSupported)
		}
		t := p.task
		src.fp = fp.Config{
			Mem:    m.mem,
			Stacks: p.stacks,
			// Start from the running function's pc and x29
			// (kunwind_init_from_regs-like); its own pc is then
			// dropped, so the first frame is its caller's, as for an
			// unwinder inlined in it.
			FP:         p.x29,
			PC:         p.pc,
			Source:     fp.SourceCaller,
			Layout:     m.cfg.Layout,
			TaskPtRegs: t.ptRegs,
			Reliable:   opts.Reliable,
		}
		if m.cfg.FGraph {
			src.fp.GraphTrampoline = m.graphTramp
			src.fp.GraphStack = t.graph.region.Base
		}
		if m.cfg.Kretprobes {
			src.fp.KretprobeTrampoline = m.kprobeTramp
			src.fp.KretprobeStack = t.kprobe.region.Base
		}
		src.fpSkip = 1
	default:
		return fmt.Errorf("unwind: unknown method %v", method)
	}
	return nil
}

// stacks returns the stacks an FP walk of the CPU may read while it runs
// task t: the task stack and this CPU's IRQ, overflow and SDEI stacks.
func (c *CPU) stacks(t *Task) []fp.Stack {
	st := func(k fp.StackKind, r interface {
		End() uint64
	}, low uint64, name string) fp.Stack {
		return fp.Stack{Kind: k, Low: low, High: r.End(), Name: name}
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
// current function. Call it from the goroutine driving the CPU, or use
// Unwind from any goroutine.
func (c *CPU) Source(method Method, opts SaveOptions) (*Source, error) {
	src := new(Source)
	if err := c.sourceInto(src, c.pub.Load(), method, opts); err != nil {
		return nil, err
	}
	return src, nil
}

// SourceInto is Source filling src in place, without allocating: for hot
// paths that record a trace on every event (a KASAN-style allocator).
func (c *CPU) SourceInto(src *Source, method Method, opts SaveOptions) error {
	return c.sourceInto(src, c.pub.Load(), method, opts)
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
// ErrBusy). OutOfLine changes the CPU (it calls stack_trace_save and
// returns from it), so only the driving goroutine may use it.
func (c *CPU) Unwind(method Method, inv Invocation, store []uint64, opts SaveOptions) (int, error) {
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
func (c *CPU) UnwindSeq(method Method, store []uint64, opts SaveOptions) (n int, seq uint64, err error) {
	for try := 0; try < 1000; try++ {
		s1 := c.seq.Load()
		p := c.pub.Load()
		if s1&1 != 0 || p == nil || p.seq != s1 {
			runtime.Gosched()
			continue
		}
		var src Source
		err := c.sourceInto(&src, p, method, opts)
		if err == nil {
			n, err = Save(&src, store, opts.Skip)
		}
		if c.seq.Load() != s1 {
			runtime.Gosched()
			continue
		}
		return n, s1, err
	}
	return 0, 0, ErrBusy
}

// Seq returns the CPU's state sequence number: even when stable, bumped by
// two for every state change.
func (c *CPU) Seq() uint64 { return c.seq.Load() }

// stackContext maps an FP stack kind to the context that runs on it.
func stackContext(k fp.StackKind) Context {
	switch k {
	case fp.IRQ:
		return ContextIRQ
	case fp.SDEINormal:
		return ContextSDEINormal
	case fp.SDEICritical:
		return ContextSDEICritical
	}
	return ContextTask
}
