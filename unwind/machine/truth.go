package machine

import (
	"fmt"

	"github.com/unwindkit/unwindkit/unwind"
)

// TruthFrame is one entry of a CPU's ground truth: the live call chain as
// the CPU itself knows it, innermost first, across contexts.
type TruthFrame struct {
	// PC is the real address: the current pc of the innermost function,
	// otherwise the address a function will return to, or the pc an
	// exception interrupted.
	PC uint64
	// Func is the function PC is in.
	Func string
	// Context is the context of the function PC is in.
	Context Context
	// SavedBy says where PC is kept: "register" for the innermost pc,
	// "x30" when a leaf has not saved its return address, the saving
	// function's name for a prologue, "pt_regs" for an IRQ's interrupted
	// pc, "sdei frame record" for an SDEI event's.
	SavedBy string
	// Interrupted is true for the pc at which an exception interrupted a
	// context.
	Interrupted bool
	// OnSCS is true if the saving prologue pushed PC (or a trampoline
	// standing for it) on a shadow call stack.
	OnSCS bool
	// SCSValue is what the shadow call stack holds for PC once stripped:
	// PC itself, or the function-graph or kretprobe trampoline.
	SCSValue uint64
	// InFrame is true if a frame record or pt_regs holds PC, so the FP
	// unwinder can find it.
	InFrame bool
	// SCSContext is the context whose shadow call stack holds PC.
	SCSContext Context
}

type truthEntry struct {
	TruthFrame
	saverCtx *context
	ctx      *context
}

// Truth returns the CPU's ground truth, innermost first. Entry 0 is the
// current pc of the running function; an unwinder invoked from that
// function reports (a filtered view of) entries 1 onwards.
func (c *CPU) Truth() []TruthFrame {
	return frames(c.truth())
}

func frames(es []truthEntry) []TruthFrame {
	out := make([]TruthFrame, len(es))
	for i, e := range es {
		out[i] = e.TruthFrame
	}
	return out
}

func (c *CPU) truth() []truthEntry {
	if c.task == nil {
		return nil
	}
	return truthOf(c.m, c.ctxs)
}

// truthOf is the ground truth of the contexts ctxs (outermost first).
func truthOf(m *Machine, ctxs []*context) []truthEntry {
	type ref struct {
		a   *activation
		ctx *context
	}
	var all []ref
	for i := len(ctxs) - 1; i >= 0; i-- {
		ctx := ctxs[i]
		for j := len(ctx.acts) - 1; j >= 0; j-- {
			all = append(all, ref{ctx.acts[j], ctx})
		}
	}
	var out []truthEntry
	for k, r := range all {
		e := truthEntry{ctx: r.ctx}
		e.PC = r.a.pc
		e.Func = r.a.f.spec.Name
		e.Context = r.ctx.kind
		e.SCSValue = e.PC
		if k == 0 {
			e.SavedBy = "register"
			out = append(out, e)
			continue
		}
		s := all[k-1] // the saver: the activation just inside
		e.saverCtx = s.ctx
		e.SCSContext = s.ctx.kind
		switch {
		case s.a.interrupted && s.a.ptRegs != 0:
			e.SavedBy, e.Interrupted, e.InFrame = "pt_regs", true, true
		case s.a.interrupted:
			e.SavedBy, e.Interrupted, e.InFrame = "sdei frame record", true, true
		case s.a.f.spec.Leaf:
			e.SavedBy = "x30"
		default:
			e.SavedBy = s.a.f.spec.Name
			e.OnSCS = s.a.f.scs
			e.InFrame = s.a.frameAt != 0
			if s.a.graph {
				e.SCSValue = m.graphTramp
			} else if s.a.kprobe {
				e.SCSValue = m.kprobeTramp
			}
		}
		out = append(out, e)
	}
	return out
}

// Expectation is what an unwinder invoked from the CPU's current function
// must return according to the model's rules: the ground truth minus what
// the technique cannot see.
type Expectation struct {
	PCs []uint64
	// Err is the error the unwinder must return (nil, or
	// ErrInterruptedTopHidden for the OnStack policy past an IRQ's
	// boundary).
	Err error
	// Missing lists the truth entries the technique cannot see, with why.
	Missing []Missing
}

// Missing is a truth entry an unwinder cannot see, and the rule why.
type Missing struct {
	Frame TruthFrame
	Index int // the entry's position in the ground truth (Truth()[Index])
	Why   string
}

// Expect returns the expectation for method (SCS or FP), for an unwinder
// invoked inline in the current function.
func (c *CPU) Expect(method unwind.Method, opts SaveOptions) Expectation {
	return expectOf(c.m, c.ctxs, c.truth(), method, false, opts)
}

// expectOf applies method's rules to the truth es of the contexts ctxs.
// es[0] is the pc the innermost function is at; it is in a register, and
// only an FP walk that starts from it (a blocked task's saved pc, source
// TASK: fpReportsPC) reports it.
func expectOf(m *Machine, ctxs []*context, es []truthEntry, method unwind.Method, fpReportsPC bool, opts SaveOptions) Expectation {
	var x Expectation
	if len(es) == 0 {
		return x
	}
	switch method {
	case unwind.MethodFP:
		if fpReportsPC {
			x.PCs = append(x.PCs, es[0].PC)
		}
		for k, e := range es[1:] {
			if e.InFrame {
				x.PCs = append(x.PCs, e.PC)
				continue
			}
			x.Missing = append(x.Missing, Missing{e.TruthFrame, k + 1, fpWhy(e)})
		}
	case unwind.MethodSCS:
		x = expectSCS(m, ctxs, es[1:], opts)
	}
	if opts.Skip > 0 {
		if opts.Skip >= len(x.PCs) {
			x.PCs = nil
		} else {
			x.PCs = x.PCs[opts.Skip:]
		}
	}
	return x
}

// expectSCS applies the copy unwinder's rules: the current context's
// shadow call stack from its top down to its base, then, per interrupted
// context outward, the interrupted pc (only with KeepInterruptedPC, which
// the copy reports at the boundary) and that context's shadow call stack.
func expectSCS(m *Machine, ctxs []*context, es []truthEntry, opts SaveOptions) Expectation {
	var x Expectation
	used := make([]bool, len(es))
	why := make([]string, len(es))
	for i := len(ctxs) - 1; i >= 0; i-- {
		ctx := ctxs[i]
		if i < len(ctxs)-1 {
			// Crossing the boundary from ctxs[i+1] into ctx.
			if opts.StopAtBoundary {
				break
			}
			if m.cfg.KeepInterruptedPC {
				for k, e := range es {
					if e.Interrupted && e.ctx == ctx {
						x.PCs = append(x.PCs, e.PC)
						used[k] = true
					}
				}
			}
			if m.cfg.Policy.SavedX18(ctxs[i+1].kind).Hidden() {
				x.Err = unwind.ErrInterruptedTopHidden
				for k := range es {
					if !used[k] {
						why[k] = "OnStack policy: the interrupted x18 was pushed on the interrupted stack; only the frame chain leads to it"
					}
				}
				break
			}
		}
		for k, e := range es {
			if e.OnSCS && e.saverCtx == ctx {
				x.PCs = append(x.PCs, e.SCSValue)
				used[k] = true
			}
		}
	}
	for k, e := range es {
		if used[k] {
			continue
		}
		w := why[k]
		switch {
		case w != "":
		case e.Interrupted:
			w = "interrupted pc: not on the shadow call stack when the exception arrived (KeepInterruptedPC keeps it)"
		case e.OnSCS:
			w = "beyond the first context boundary"
		default:
			w = scsWhy(e)
		}
		x.Missing = append(x.Missing, Missing{e.TruthFrame, k + 1, w})
	}
	return x
}

func fpWhy(e truthEntry) string {
	switch e.SavedBy {
	case "x30":
		return "saved only in x30 by a leaf: no frame record holds it"
	}
	return fmt.Sprintf("%s builds no frame record (frame pointer omitted or asm without a record)", e.SavedBy)
}

func scsWhy(e truthEntry) string {
	switch e.SavedBy {
	case "x30":
		return "saved only in x30 by a leaf: leaves push nothing"
	}
	return fmt.Sprintf("%s does not push on the shadow call stack (asm or not instrumented)", e.SavedBy)
}
