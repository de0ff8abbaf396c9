package scs

import "fmt"

// Fault injection for the package's tests: not public API (issue 15).
// Methods declared in a _test.go file exist only in the test binary.

// SetX18 writes v to cpu's x18 without any check: fault injection for
// tests of corrupt state.
func (m *Model) SetX18(cpu int, v uint64) error {
	if err := m.check(cpu); err != nil {
		return err
	}
	if !m.cfg.Disabled {
		m.lifeOf(cpu, m.Context(cpu)).raise(v)
	}
	m.x18.Store(cpu, v)
	return nil
}

// SetSaved overwrites, without any check, the interrupted x18 that entering
// context c on cpu left behind, wherever the policy keeps it
// (thread_info.scs_sp, the stack slot, the SDEI saved registers, or the
// per-CPU saved pointer): fault injection. c must be CtxIRQ, CtxSDEINormal or
// CtxSDEICritical.
func (m *Model) SetSaved(cpu int, c Context, v uint64) error {
	if err := m.check(cpu); err != nil {
		return err
	}
	if c == CtxTask || c >= NumContexts {
		return fmt.Errorf("scs: SetSaved: %s has no saved pointer", c)
	}
	if act := m.active.Load(cpu); act&(1<<c) != 0 && !m.cfg.Disabled {
		// The stack whose top v is: the context c interrupted.
		m.lifeOf(cpu, innermost(act&(1<<c-1))).raise(v)
	}
	slot := m.slot.Load(cpu)
	if m.cfg.Policy.SavedX18(c) == OnInterruptedStack {
		if _, ok := m.cfg.Mem.Load(slot); !ok {
			return fmt.Errorf("scs: SetSaved: stack slot %#x unmapped", slot)
		}
	}
	m.keepX18(cpu, c, v, slot) // wherever the policy keeps it
	return nil
}
