// Context transitions (IRQ and SDEI entries and exits, task switch) and the per-CPU nesting state and sequence lock they change under.

package scs

import (
	"fmt"

	"github.com/unwindkit/unwindkit/internal/scsdriver"
)

// begin and end bracket a multi-word state change for readers. They nest:
// only the outermost pair moves seq, so a driver's beginStep/endStep
// around several model calls is one change to readers.
func (m *Model) begin(cpu int) {
	d := m.depth.Load(cpu)
	if d == 0 {
		m.seq.Store(cpu, m.seq.Load(cpu)+1)
	}
	m.depth.Store(cpu, d+1)
}

func (m *Model) end(cpu int) {
	d := m.depth.Load(cpu)
	if d == 0 {
		return // an End without Begin changes nothing
	}
	m.depth.Store(cpu, d-1)
	if d == 1 {
		m.seq.Store(cpu, m.seq.Load(cpu)+1)
	}
}

// driver is a Model seen by its driver, package unwind/machine, through
// package internal/scsdriver (see "One nesting state and one sequence
// lock per CPU" in the package doc): the hooks that keep the driver's own
// per-CPU state and the model's one change are not this package's API.
type driver Model

func init() {
	scsdriver.Of = func(model any) scsdriver.Driver { return (*driver)(model.(*Model)) }
}

func (d *driver) Begin(cpu int)      { (*Model)(d).beginStep(cpu) }
func (d *driver) End(cpu int)        { (*Model)(d).endStep(cpu) }
func (d *driver) Seq(cpu int) uint64 { return (*Model)(d).seqOf(cpu) }
func (d *driver) CheckEnter(cpu int, c uint8) error {
	return (*Model)(d).checkEnter(cpu, Context(c))
}
func (d *driver) CheckExit(cpu int, c uint8) error {
	return (*Model)(d).checkExit(cpu, Context(c))
}

// beginStep opens one change of cpu's state for readers, spanning any
// number of the model's calls, for a driver that keeps per-CPU state of
// its own beside the model's: package machine's CPU brackets each of its
// steps (a call, an exception entry) so that its frame records, pt_regs
// and registers and the model's shadow stacks change together under cpu's
// one sequence lock. beginStep and endStep nest, and only cpu's driver
// calls them; endStep closes the innermost beginStep. An out-of-range cpu
// is ignored.
func (m *Model) beginStep(cpu int) {
	if m.check(cpu) == nil {
		m.begin(cpu)
	}
}

// endStep closes the change beginStep opened.
func (m *Model) endStep(cpu int) {
	if m.check(cpu) == nil {
		m.end(cpu)
	}
}

// seqOf returns cpu's sequence count (0 if cpu is out of range): odd while
// a change is in progress, advanced by two by each change. A reader that
// saw the same even count before and after reading state (the model's or,
// for a driver using beginStep and endStep, its own) read one instant.
// Push and Pop outside beginStep and endStep do not move it: the shadow
// stacks' contents are re-checked by their generations instead (see
// "Reading a running model" in the package doc).
func (m *Model) seqOf(cpu int) uint64 {
	if m.check(cpu) != nil {
		return 0
	}
	return m.seq.Load(cpu)
}

// checkEnter returns nil if cpu may enter context c now (CtxIRQ,
// CtxSDEINormal or CtxSDEICritical), or an error wrapping ErrNesting that
// says why not. It is the one statement of the nesting rules EnterIRQ and
// EnterSDEI enforce: IRQs interrupt only the task (they do not nest and
// are masked in SDEI handlers); a normal SDEI event interrupts the task
// or an IRQ; a critical one may also interrupt a normal event. A driver
// asks it before changing state of its own.
func (m *Model) checkEnter(cpu int, c Context) error {
	if err := m.check(cpu); err != nil {
		return err
	}
	in := innermost(m.active.Load(cpu))
	switch {
	case c == CtxIRQ && in != CtxTask:
		return fmt.Errorf("%w: IRQ on cpu %d in %s context (IRQs do not nest and are masked in SDEI)", ErrNesting, cpu, in)
	case c == CtxTask || c >= NumContexts:
		return fmt.Errorf("%w: %s is not entered by an exception", ErrNesting, c)
	case in >= c:
		return fmt.Errorf("%w: %s event on cpu %d in %s context", ErrNesting, c, cpu, in)
	}
	return nil
}

// checkExit returns nil if c is cpu's innermost context and not the task,
// so ExitIRQ or ExitSDEI may leave it, or an error wrapping ErrNesting.
func (m *Model) checkExit(cpu int, c Context) error {
	if err := m.check(cpu); err != nil {
		return err
	}
	if in := innermost(m.active.Load(cpu)); in != c || c == CtxTask {
		return fmt.Errorf("%w: %s exit on cpu %d in %s context", ErrNesting, c, cpu, in)
	}
	return nil
}

// EnterIRQ models taking a hard IRQ on cpu, which must be in task context:
// the policy saves x18 (ThreadInfo: thread_info.scs_sp; OnStack: stp x18,
// xzr at slot, which is sp-16 on the interrupted stack, 16-byte aligned, in
// Config.Mem, the driver then moving its sp; PerCPU:
// irq_shadow_call_stack_saved_ptr), x18 becomes the per-CPU IRQ shadow
// stack's base, and with KeepInterruptedPC pc is stored per-CPU.
func (m *Model) EnterIRQ(cpu int, slot, pc uint64) error {
	if err := m.check(cpu); err != nil {
		return err
	}
	if err := m.checkEnter(cpu, CtxIRQ); err != nil {
		return err
	}
	if m.cfg.Disabled {
		m.begin(cpu)
		m.active.Store(cpu, bitIRQ)
		m.end(cpu)
		bump(&m.stats.Ptr(cpu).entries[CtxIRQ])
		return nil
	}
	if err := m.checkKeep(cpu, CtxIRQ, slot); err != nil {
		return err
	}
	m.begin(cpu)
	m.keepX18(cpu, CtxIRQ, m.x18.Load(cpu), slot)
	if m.cfg.KeepInterruptedPC {
		m.pc[CtxIRQ].Store(cpu, pc)
	}
	m.x18.Store(cpu, m.base[CtxIRQ].Load(cpu))
	m.active.Store(cpu, bitIRQ)
	m.end(cpu)
	bump(&m.stats.Ptr(cpu).entries[CtxIRQ])
	return nil
}

// ExitIRQ models returning from the hard IRQ on cpu: x18 is restored from
// where the policy saved it (under PerCPU the saved pointer is then reset
// to 0).
func (m *Model) ExitIRQ(cpu int) error {
	if err := m.check(cpu); err != nil {
		return err
	}
	if err := m.checkExit(cpu, CtxIRQ); err != nil {
		return err
	}
	m.begin(cpu)
	if !m.cfg.Disabled {
		sp, err := m.takeX18(cpu, CtxIRQ)
		if err != nil {
			m.end(cpu)
			return err
		}
		m.lifeOf(cpu, CtxTask).raise(sp)
		m.x18.Store(cpu, sp)
	}
	m.active.Store(cpu, 0)
	m.end(cpu)
	bump(&m.stats.Ptr(cpu).exits[CtxIRQ])
	return nil
}

// EnterSDEI models an SDEI event of normal or critical priority on cpu. A
// normal event may interrupt the task or an IRQ; a critical one may also
// interrupt a normal event. The interrupted x18 goes to the handler's saved
// registers under every policy (__sdei_asm_handler saves all of them) and,
// under PerCPU, also to sdei_shadow_call_stack_{normal,critical}_saved_ptr;
// Policy.SavedX18 says which of the two the unwinder reads. x18 becomes
// the per-CPU SDEI shadow stack's base. slot is unused: no policy keeps
// SDEI's interrupted x18 on the interrupted stack. With KeepInterruptedPC
// pc is stored per-CPU.
func (m *Model) EnterSDEI(cpu int, critical bool, slot, pc uint64) error {
	if err := m.check(cpu); err != nil {
		return err
	}
	c, bit := CtxSDEINormal, uint64(bitNorm)
	if critical {
		c, bit = CtxSDEICritical, bitCrit
	}
	if err := m.checkEnter(cpu, c); err != nil {
		return err
	}
	if !m.cfg.Disabled {
		if err := m.checkKeep(cpu, c, slot); err != nil {
			return err
		}
	}
	act := m.active.Load(cpu)
	m.begin(cpu)
	if !m.cfg.Disabled {
		sp := m.x18.Load(cpu)
		// stp x18, x19, [x1, #SDEI_EVENT_INTREGS + 16 * 9]: under every
		// policy, with the other interrupted registers; then wherever the
		// policy's unwinder reads it (the same place, or the seed's
		// per-CPU pointer).
		m.sdeiRegs[c].Store(cpu, sp)
		m.keepX18(cpu, c, sp, slot)
		if m.cfg.KeepInterruptedPC {
			m.pc[c].Store(cpu, pc)
		}
		m.x18.Store(cpu, m.base[c].Load(cpu))
	}
	m.active.Store(cpu, act|bit)
	m.end(cpu)
	bump(&m.stats.Ptr(cpu).entries[c])
	return nil
}

// ExitSDEI models completing the innermost SDEI event on cpu: x18 comes
// back from the saved registers (under PerCPU from the saved pointer, which
// is then reset to 0).
func (m *Model) ExitSDEI(cpu int) error {
	if err := m.check(cpu); err != nil {
		return err
	}
	act := m.active.Load(cpu)
	c := innermost(act)
	if c != CtxSDEINormal && c != CtxSDEICritical {
		return m.checkExit(cpu, CtxSDEINormal) // the nesting error
	}
	m.begin(cpu)
	if !m.cfg.Disabled {
		sp, err := m.takeX18(cpu, c)
		if err != nil {
			m.end(cpu)
			return err
		}
		m.lifeOf(cpu, innermost(act&^(1<<c))).raise(sp)
		m.x18.Store(cpu, sp)
	}
	m.active.Store(cpu, act&^(1<<c))
	m.end(cpu)
	bump(&m.stats.Ptr(cpu).exits[c])
	return nil
}

// Switch models cpu_switch_to on cpu, which must be in task context: the
// outgoing task's x18 is saved to its thread_info.scs_sp and t's is loaded.
// As the scheduler's scs_overflow_check does before switching, an outgoing
// task whose shadow stack is corrupted stops the switch (the kernel
// panics; the model returns the *CorruptError and changes nothing). t must
// not be current on another CPU.
func (m *Model) Switch(cpu int, t *Task) error {
	if err := m.check(cpu); err != nil {
		return err
	}
	if t == nil {
		return fmt.Errorf("scs: Switch on cpu %d to a nil task", cpu)
	}
	if c := m.Context(cpu); c != CtxTask {
		return fmt.Errorf("%w: task switch on cpu %d in %s context", ErrNesting, cpu, c)
	}
	prev := m.cur.Ptr(cpu).Load()
	if t != prev && t.cpu.Load() >= 0 {
		return fmt.Errorf("scs: Switch on cpu %d: task %q is current on cpu %d", cpu, t.name, t.cpu.Load())
	}
	if !m.cfg.Disabled {
		if err := m.CheckCorruption(cpu); err != nil {
			return err
		}
	}
	m.begin(cpu)
	prev.sp.Store(m.x18.Load(cpu))
	prev.cpu.Store(-1)
	t.cpu.Store(int64(cpu))
	m.cur.Ptr(cpu).Store(t)
	t.life.raise(t.sp.Load())
	m.x18.Store(cpu, t.sp.Load())
	m.end(cpu)
	bump(&m.stats.Ptr(cpu).switches)
	return nil
}
