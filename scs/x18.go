package scs

import "fmt"

// This file is the one home of "where the interrupted x18 is kept": the
// table (savedX18, read through Policy.SavedX18) and the three accessors
// every other place calls: keepX18 (entry code saving it), takeX18 (exit
// code restoring it) and peekX18 (a reader finding it). None of them knows
// a policy; they follow the table's Where, for whichever context.

// savedX18 is the one statement of where each policy keeps the x18 of the
// context interrupted by entering each context. SDEI's handler
// (__sdei_asm_handler in arch/arm64/kernel/entry.S) saves all the
// interrupted registers in the registered event, x18 among them (stp x18,
// x19, [x1, #SDEI_EVENT_INTREGS + 16 * 9]), under every configuration, and
// publishes the event in sdei_active_{normal,critical}_event; only the
// seed patch adds a per-CPU saved pointer as well, which its unwinder
// reads instead.
var savedX18 = [numPolicies][NumContexts]Where{
	ThreadInfo: {CtxIRQ: InThreadInfo, CtxSDEINormal: InSDEIRegs, CtxSDEICritical: InSDEIRegs},
	OnStack:    {CtxIRQ: OnInterruptedStack, CtxSDEINormal: InSDEIRegs, CtxSDEICritical: InSDEIRegs},
	PerCPU:     {CtxIRQ: InPerCPU, CtxSDEINormal: InPerCPU, CtxSDEICritical: InPerCPU},
}

// SavedX18 returns where entering context c under policy p keeps the
// interrupted context's x18, as the unwinder reads it: the model
// (Model.View), its entry and exit paths, its cost model (EntryCost) and
// the machine in package unwind/machine all ask here. CtxTask is never
// entered from another context: InRegister. An unknown policy or context
// also gives InRegister.
func (p Policy) SavedX18(c Context) Where {
	if p >= numPolicies || c >= NumContexts {
		return InRegister
	}
	return savedX18[p][c]
}

// UsesInterruptedStack reports whether p keeps some context's interrupted
// x18 on the interrupted stack (the driver then reserves the 16-byte slot
// and passes it to the entry, and Config.Mem is required).
func (p Policy) UsesInterruptedStack() bool {
	for c := CtxIRQ; c < NumContexts; c++ {
		if p.SavedX18(c) == OnInterruptedStack {
			return true
		}
	}
	return false
}

// Hidden reports whether a shadow stack pointer kept at w is out of reach
// of an unwinder that reads only shadow stacks and per-CPU or per-task
// words: true for OnInterruptedStack, where only the frame chain leads.
func (w Where) Hidden() bool { return w == OnInterruptedStack }

// checkKeep validates, before anything changes, what keepX18 will need for
// entering c on cpu: for OnInterruptedStack a 16-byte aligned slot mapped
// in Config.Mem.
func (m *Model) checkKeep(cpu int, c Context, slot uint64) error {
	if m.cfg.Policy.SavedX18(c) != OnInterruptedStack {
		return nil
	}
	if slot%16 != 0 {
		return fmt.Errorf("scs: entering %s on cpu %d: stack slot %#x not 16-byte aligned", c, cpu, slot)
	}
	for _, a := range [2]uint64{slot, slot + 8} {
		if _, ok := m.cfg.Mem.Load(a); !ok {
			return fmt.Errorf("scs: entering %s on cpu %d: stack slot %#x unmapped", c, cpu, a)
		}
	}
	return nil
}

// keepX18 stores sp, the x18 interrupted by entering c on cpu, where the
// policy keeps it (checkKeep passed): thread_info.scs_sp, stp x18, xzr at
// slot on the interrupted stack, the SDEI saved registers, or the per-CPU
// *_saved_ptr.
func (m *Model) keepX18(cpu int, c Context, sp, slot uint64) {
	switch m.cfg.Policy.SavedX18(c) {
	case InThreadInfo:
		m.cur.Ptr(cpu).Load().sp.Store(sp)
	case OnInterruptedStack:
		m.cfg.Mem.Store(slot, sp)
		m.cfg.Mem.Store(slot+8, 0)
		m.slot.Store(cpu, slot)
	case InSDEIRegs:
		m.sdeiRegs[c].Store(cpu, sp)
	case InPerCPU:
		m.saved[c].Store(cpu, sp)
	}
}

// takeX18 returns the x18 that leaving c on cpu restores, from where
// keepX18 put it, and releases that place (the stack slot is popped; the
// seed's per-CPU saved pointer is reset to 0, so non-zero means "live").
func (m *Model) takeX18(cpu int, c Context) (uint64, error) {
	switch m.cfg.Policy.SavedX18(c) {
	case InThreadInfo:
		return m.cur.Ptr(cpu).Load().sp.Load(), nil
	case OnInterruptedStack:
		v, ok := m.cfg.Mem.Load(m.slot.Load(cpu))
		if !ok {
			return 0, fmt.Errorf("scs: leaving %s on cpu %d: stack slot %#x unmapped", c, cpu, m.slot.Load(cpu))
		}
		m.slot.Store(cpu, 0)
		return v, nil
	case InSDEIRegs:
		return m.sdeiRegs[c].Load(cpu), nil
	case InPerCPU:
		v := m.saved[c].Load(cpu)
		m.saved[c].Store(cpu, 0)
		return v, nil
	}
	return 0, fmt.Errorf("scs: %s keeps no interrupted x18", c)
}

// peekX18 returns, for a reader under the sequence lock, where entering c
// on cpu kept the interrupted x18 and its value: the value is 0 and addr
// the stack slot when the place is hidden from an SCS-only unwinder. task
// is the task current on cpu as the reader loaded it.
func (m *Model) peekX18(cpu int, c Context, task *Task) (from Where, top, addr uint64) {
	from = m.cfg.Policy.SavedX18(c)
	switch from {
	case InThreadInfo:
		top = task.sp.Load()
	case OnInterruptedStack:
		addr = m.slot.Load(cpu)
	case InSDEIRegs:
		top = m.sdeiRegs[c].Load(cpu)
	case InPerCPU:
		top = m.saved[c].Load(cpu)
	}
	if from.Hidden() {
		top = 0
	}
	return from, top, addr
}
