// Exception entry paths: IRQ (kernel_entry, call_on_irq_stack) and SDEI (__sdei_asm_handler) entries and exits.

package machine

import (
	"fmt"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/mem"
	"github.com/unwindkit/unwindkit/scs"
)

// EnterIRQ takes a hard IRQ on the CPU: kernel_entry pushes pt_regs with a
// PT_REGS meta record on the task stack, el1h_64_irq_handler runs, and
// call_on_irq_stack saves x18 as the policy says, links a frame record and
// switches to this CPU's IRQ stack and IRQ shadow call stack, where
// handle_arch_irq becomes the base of the IRQ context. IRQs do not nest and
// are not taken inside SDEI handlers.
func (c *CPU) EnterIRQ() error {
	if err := c.ready(); err != nil {
		return err
	}
	ctx := c.cur()
	if err := c.m.drv.CheckEnter(c.id, uint8(CtxIRQ)); err != nil {
		return err
	}
	need := uint64(ptRegsSize + 16 + 16 + 16 + 64)
	if ctx.sp-ctx.stack.Base < need {
		return fmt.Errorf("machine: cpu%d: task stack overflow taking an IRQ", c.id)
	}
	c.begin()
	defer c.end()
	m := c.m
	interrupted := ctx.top()
	ipc := interrupted.pc
	// kernel_entry 1: pt_regs on the current stack, x29 -> regs->stackframe.
	regs := ctx.sp - ptRegsSize
	c.writePtRegs(ctx.stack, regs, ctx, ipc)
	vec := m.text.byName[FnIRQVector]
	va := &activation{f: vec, pc: vec.sites[FnIRQHandler] + 4, ret: ipc, saved: ipc, entrySP: ctx.sp,
		savedX29: ctx.x29, interrupted: true, ptRegs: regs}
	ctx.sp = regs
	ctx.x29 = regs + ptRegsStackFrame
	ctx.acts = append(ctx.acts, va)
	// bl el1h_64_irq_handler (C, on the task's SCS), bl call_on_irq_stack.
	if err := c.enter(ctx, va, m.text.byName[FnIRQHandler], vec.sites[FnIRQHandler]+4); err != nil {
		return c.abortEntry(ctx, 1, err)
	}
	ha := ctx.top()
	h := ha.f
	cois := m.text.byName[FnCallOnIRQStack]
	var slot uint64
	if m.cfg.SCS && m.cfg.Policy.SavedX18(CtxIRQ) == scs.OnInterruptedStack {
		// stp scs_sp, xzr, [sp, #-16]!
		ctx.sp -= 16
		slot = ctx.sp
	}
	if err := c.enter(ctx, ha, cois, h.sites[FnCallOnIRQStack]+4); err != nil {
		return c.abortEntry(ctx, 2, err)
	}
	ctx.slot = slot
	if err := m.scs.EnterIRQ(c.id, slot, ipc); err != nil {
		return c.abortEntry(ctx, 3, err)
	}
	irq := &context{kind: CtxIRQ, stack: c.irqStack, sp: c.irqStack.End(), x29: ctx.x29, parent: ctx}
	c.ctxs = append(c.ctxs, irq)
	if err := c.enter(irq, ctx.top(), m.text.byName[FnHandleIRQ], cois.blr+4); err != nil {
		c.ctxs = c.ctxs[:len(c.ctxs)-1]
		_ = m.scs.ExitIRQ(c.id)
		return c.abortEntry(ctx, 3, err)
	}
	return nil
}

// abortEntry unwinds a partly built entry path (n activations pushed).
func (c *CPU) abortEntry(ctx *context, n int, err error) error {
	for i := 1; i < n; i++ {
		_ = c.leave(ctx)
	}
	va := ctx.top()
	ctx.acts = ctx.acts[:len(ctx.acts)-1]
	ctx.sp = va.entrySP
	ctx.x29 = va.savedX29
	return err
}

func (c *CPU) writePtRegs(stack *mem.Region, regs uint64, ctx *context, pc uint64) {
	for off := uint64(0); off < ptRegsSize; off += 8 {
		stack.Store(regs+off, 0)
	}
	stack.Store(regs+ptRegsX29, ctx.x29)
	stack.Store(regs+ptRegsX30, ctx.x30)
	stack.Store(regs+ptRegsSP, ctx.sp)
	stack.Store(regs+ptRegsPC, pc)
	stack.Store(regs+ptRegsPState, pstateEL1h)
	stack.Store(regs+ptRegsStackFrame+fp.MetaTypeOff, metaPtRegs)
}

// ExitIRQ returns from the IRQ: handle_arch_irq must be the only function
// left in the IRQ context.
func (c *CPU) ExitIRQ() error {
	if err := c.ready(); err != nil {
		return err
	}
	ctx := c.cur()
	if err := c.m.drv.CheckExit(c.id, uint8(CtxIRQ)); err != nil {
		return err
	}
	if len(ctx.acts) != ctx.minDepth() {
		return fmt.Errorf("machine: cpu%d: ExitIRQ with %d functions still live above handle_arch_irq", c.id, len(ctx.acts)-1)
	}
	c.begin()
	defer c.end()
	m := c.m
	if err := c.leave(ctx); err != nil {
		return err
	}
	if err := m.scs.ExitIRQ(c.id); err != nil {
		return err
	}
	c.ctxs = c.ctxs[:len(c.ctxs)-1]
	tctx := c.cur()
	if err := c.leave(tctx); err != nil { // call_on_irq_stack
		return err
	}
	if tctx.slot != 0 {
		tctx.sp += 16 // ldp scs_sp, xzr, [sp], #16
		tctx.slot = 0
	}
	if err := c.leave(tctx); err != nil { // el1h_64_irq_handler
		return err
	}
	return c.exitException(tctx)
}

// exitException pops the vector activation: kernel_exit restores the
// interrupted registers from pt_regs.
func (c *CPU) exitException(ctx *context) error {
	va := ctx.top()
	regs := va.ptRegs
	x29, _ := ctx.stack.Load(regs + ptRegsX29)
	x30, _ := ctx.stack.Load(regs + ptRegsX30)
	pc, _ := ctx.stack.Load(regs + ptRegsPC)
	if pc != va.ret || x29 != va.savedX29 {
		return fmt.Errorf("machine: cpu%d: pt_regs at %#x overwritten", c.id, regs)
	}
	ctx.acts = ctx.acts[:len(ctx.acts)-1]
	ctx.sp = va.entrySP
	ctx.x29 = x29
	ctx.x30 = x30
	return nil
}

// EnterSDEI delivers an SDEI event: __sdei_asm_handler saves the
// interrupted registers in the per-CPU registered event, switches to the
// normal or critical SDEI stack and shadow call stack, links a frame record
// {interrupted fp, interrupted pc}, and calls __sdei_handler, the base of
// the new context. A normal event may interrupt a task or an IRQ; a
// critical one may also interrupt a normal event.
func (c *CPU) EnterSDEI(critical bool) error {
	if err := c.ready(); err != nil {
		return err
	}
	ctx := c.cur()
	kind := CtxSDEINormal
	stack := c.sdeiNormal
	if critical {
		kind, stack = CtxSDEICritical, c.sdeiCritical
	}
	if err := c.m.drv.CheckEnter(c.id, uint8(kind)); err != nil {
		return err
	}
	c.begin()
	defer c.end()
	m := c.m
	ipc := ctx.top().pc
	ev := c.sdeiRegs[0]
	if critical {
		ev = c.sdeiRegs[1]
	}
	ev.Store(ev.Base+ptRegsX29, ctx.x29)
	ev.Store(ev.Base+ptRegsX30, ctx.x30)
	ev.Store(ev.Base+ptRegsPC, ipc)
	// The interrupted x18 is saved with the other registers (stp x18, x19,
	// [x1, #SDEI_EVENT_INTREGS + 16 * 9]) under every policy: the one
	// rule, scs.Policy.SavedX18, puts nothing on the interrupted stack.
	var slot uint64
	if m.cfg.SCS && m.cfg.Policy.SavedX18(kind) == scs.OnInterruptedStack {
		ctx.sp -= 16
		slot = ctx.sp
	}
	if err := m.scs.EnterSDEI(c.id, critical, slot, ipc); err != nil {
		if slot != 0 {
			ctx.sp += 16
		}
		return err
	}
	ctx.slot = slot
	asm := m.text.byName[FnSDEIAsmHandler]
	nctx := &context{kind: kind, stack: stack, sp: stack.End() - 16, parent: ctx}
	// stp x29, x4, [sp, #-16]!; mov x29, sp: {interrupted fp, interrupted pc}
	stack.Store(nctx.sp, ctx.x29)
	stack.Store(nctx.sp+8, ipc)
	nctx.x29 = nctx.sp
	nctx.acts = []*activation{{f: asm, pc: asm.sites[FnSDEIHandler] + 4, ret: ipc, saved: ipc,
		entrySP: stack.End(), savedX29: ctx.x29, frameAt: nctx.sp, interrupted: true}}
	c.ctxs = append(c.ctxs, nctx)
	if err := c.enter(nctx, nctx.acts[0], m.text.byName[FnSDEIHandler], asm.sites[FnSDEIHandler]+4); err != nil {
		c.ctxs = c.ctxs[:len(c.ctxs)-1]
		_ = m.scs.ExitSDEI(c.id)
		if slot != 0 {
			ctx.sp += 16
			ctx.slot = 0
		}
		return err
	}
	return nil
}

// ExitSDEI completes the innermost SDEI event: __sdei_handler must be the
// only function left in its context.
func (c *CPU) ExitSDEI() error {
	if err := c.ready(); err != nil {
		return err
	}
	ctx := c.cur()
	if k := c.Context(); k != CtxSDEINormal && k != CtxSDEICritical {
		return c.m.drv.CheckExit(c.id, uint8(CtxSDEINormal)) // says why not
	}
	if len(ctx.acts) != 2 {
		return fmt.Errorf("machine: cpu%d: ExitSDEI with %d functions still live in the SDEI context", c.id, len(ctx.acts)-2)
	}
	c.begin()
	defer c.end()
	if err := c.leave(ctx); err != nil {
		return err
	}
	if err := c.m.scs.ExitSDEI(c.id); err != nil {
		return err
	}
	c.ctxs = c.ctxs[:len(c.ctxs)-1]
	p := c.cur()
	if p.slot != 0 {
		p.sp += 16
		p.slot = 0
	}
	return nil
}
