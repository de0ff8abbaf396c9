package scs

import (
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/percpu"
)

// AllocFunc allocates the memory of one shadow stack of size bytes for
// the model, placed in the driver's address space: it returns the base
// address and the memory as words, word i at base+8*i, at least size/8 of
// them. The model reads and writes the words with sync/atomic, and so must
// anyone else who reads them while the model runs (the driver's view of
// the same memory, a dump). kind is "scs"; name says whose shadow stack it
// is ("irq_shadow_call_stack/0", "task:swapper/0", ...).
type AllocFunc func(name, kind string, size uint64) (base uint64, words []uint64, err error)

// NewAllocator returns an AllocFunc for a model whose memory nobody else
// needs to see: each shadow stack is fresh Go memory, placed at addresses
// from base on, one after the other, each followed by an unmapped guard
// gap of one 4 KiB page (like vmalloc'd shadow stacks).
func NewAllocator(base uint64) AllocFunc {
	next := base
	return func(name, kind string, size uint64) (uint64, []uint64, error) {
		size = (size + 7) &^ 7
		at := next
		if at%8 != 0 || at+size+4096 < at {
			return 0, nil, fmt.Errorf("scs: no address space for %s at %#x", name, at)
		}
		next = at + size + 4096
		return at, make([]uint64, size/8), nil
	}
}

// stack is one shadow stack's memory as AllocFunc returned it, cut to the
// configured size: word i is at base+8*i.
type stack struct {
	base  uint64
	words []uint64
}

// load and store access the word at addr, which must be in the stack.
func (s *stack) load(addr uint64) uint64     { return atomic.LoadUint64(&s.words[(addr-s.base)/8]) }
func (s *stack) store(addr uint64, v uint64) { atomic.StoreUint64(&s.words[(addr-s.base)/8], v) }

// Task is a task's shadow call stack and its thread_info fields.
type Task struct {
	name string
	st   stack  // the shadow stack (no words when the SCS is disabled)
	base uint64 // thread_info.scs_base
	sp   atomic.Uint64
	cpu  atomic.Int64 // CPU it runs on, or -1
	life life         // the shadow stack's lifetimes, for readers
}

// Name returns the task's name.
func (t *Task) Name() string { return t.name }

// Base returns thread_info.scs_base.
func (t *Task) Base() uint64 { return t.base }

// SP returns thread_info.scs_sp: the task's x18 as last saved (by Switch,
// or by IRQ entry under ThreadInfo). It is stale while the task runs.
func (t *Task) SP() uint64 { return t.sp.Load() }

// CPU returns the CPU the task is current on, or -1.
func (t *Task) CPU() int { return int(t.cpu.Load()) }

// Live-context bits in the per-CPU active word.
const (
	bitIRQ  = 1 << CtxIRQ
	bitNorm = 1 << CtxSDEINormal
	bitCrit = 1 << CtxSDEICritical
)

// stats is one CPU's counters; only the CPU's driver writes them.
type stats struct {
	entries, exits         [NumContexts]atomic.Uint64
	switches, pushes, pops atomic.Uint64
	_                      [4]uint64
}

func bump(c *atomic.Uint64) { c.Store(c.Load() + 1) }

// Model is a set of CPUs with shadow call stacks. See the package
// documentation for the rules it enforces.
type Model struct {
	cfg   Config
	alloc AllocFunc

	// Per-CPU state. x18 is the register; active has bit c set while
	// context c is live; seq is a sequence lock around every multi-word
	// change (odd while one is in progress).
	x18, active, seq *percpu.Uint64
	cur              *percpu.Var[atomic.Pointer[Task]]
	stacks           *percpu.Var[[NumContexts]stack] // IRQ, SDEI shadow stacks; fixed after New

	// base[c]: irq_shadow_call_stack_ptr, sdei_shadow_call_stack_{normal,critical}_ptr.
	base [NumContexts]*percpu.Uint64
	// saved[c]: the PerCPU policy's *_saved_ptr.
	saved [NumContexts]*percpu.Uint64
	// sdeiRegs[c]: regs[18] of the SDEI handler's saved interrupted
	// registers (every policy saves them; see Policy.SavedX18 for which
	// unwinder reads them).
	sdeiRegs [NumContexts]*percpu.Uint64
	// slot: OnStack's stack address holding the task's x18 during an IRQ
	// (the real code finds it in sp; the model remembers it).
	slot *percpu.Uint64
	// pc[c]: the PC interrupted by entering c (KeepInterruptedPC).
	pc [NumContexts]*percpu.Uint64
	// lives[c]: the lifetimes of the per-CPU shadow stack of context c
	// (a task's is in its Task).
	lives *percpu.Var[[NumContexts]life]

	stats *percpu.Var[stats]
}

// New returns a model configured by cfg. alloc places the per-CPU IRQ and
// SDEI shadow stacks and every task's shadow stack in the driver's memory;
// New writes EndMagic into each one's last word and creates one idle task
// per CPU, named "swapper/N", current on CPU N.
func New(cfg Config, alloc AllocFunc) (*Model, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if alloc == nil && !cfg.Disabled {
		return nil, fmt.Errorf("scs: New needs an alloc function")
	}
	n := cfg.NumCPU
	m := &Model{cfg: cfg, alloc: alloc}
	u := func() *percpu.Uint64 {
		v, e := percpu.NewUint64(n)
		if e != nil && err == nil {
			err = e
		}
		return v
	}
	m.x18, m.active, m.seq, m.slot = u(), u(), u(), u()
	for c := CtxIRQ; c < NumContexts; c++ {
		m.base[c], m.saved[c], m.sdeiRegs[c], m.pc[c] = u(), u(), u(), u()
	}
	if err != nil {
		return nil, err
	}
	if m.cur, err = percpu.New[atomic.Pointer[Task]](n); err != nil {
		return nil, err
	}
	if m.stacks, err = percpu.New[[NumContexts]stack](n); err != nil {
		return nil, err
	}
	if m.stats, err = percpu.New[stats](n); err != nil {
		return nil, err
	}
	if m.lives, err = percpu.New[[NumContexts]life](n); err != nil {
		return nil, err
	}
	names := [NumContexts]string{CtxIRQ: "irq_shadow_call_stack", CtxSDEINormal: "sdei_shadow_call_stack_normal", CtxSDEICritical: "sdei_shadow_call_stack_critical"}
	for cpu := 0; cpu < n; cpu++ {
		if !cfg.Disabled {
			rs := m.stacks.Ptr(cpu)
			for c := CtxIRQ; c < NumContexts; c++ {
				st, err := m.newSCS(fmt.Sprintf("%s/%d", names[c], cpu))
				if err != nil {
					return nil, err
				}
				rs[c] = st
				m.base[c].Store(cpu, st.base)
				m.lives.Ptr(cpu)[c].hw.Store(st.base)
			}
		}
		t, err := m.NewTask(fmt.Sprintf("swapper/%d", cpu))
		if err != nil {
			return nil, err
		}
		t.cpu.Store(int64(cpu))
		m.cur.Ptr(cpu).Store(t)
		m.x18.Store(cpu, t.base)
	}
	return m, nil
}

func (m *Model) newSCS(name string) (stack, error) {
	base, words, err := m.alloc(name, "scs", m.cfg.Size)
	if err != nil {
		return stack{}, fmt.Errorf("scs: allocating %s: %w", name, err)
	}
	n := m.cfg.Size / 8
	if uint64(len(words)) < n || base%8 != 0 || base+m.cfg.Size < base {
		return stack{}, fmt.Errorf("scs: allocating %s: got %d bytes at %#x, want %d bytes, 8-byte aligned", name, len(words)*8, base, m.cfg.Size)
	}
	st := stack{base: base, words: words[:n:n]}
	st.store(base+m.cfg.Size-8, EndMagic)
	return st, nil
}

// Config returns the model's configuration, defaults filled in.
func (m *Model) Config() Config { return m.cfg }

// NumCPU returns the number of CPUs.
func (m *Model) NumCPU() int { return m.cfg.NumCPU }

// NewTask allocates a task's shadow stack (scs_prepare): thread_info.scs_base
// and scs_sp both point at its first slot, and its last word holds
// EndMagic. The task is not running until Switch makes it current.
// NewTask calls the alloc function given to New, so it must not run
// concurrently with other NewTask calls, nor with readers of the driver's
// memory if alloc adds regions to it; everything else may.
func (m *Model) NewTask(name string) (*Task, error) {
	t := &Task{name: name}
	t.cpu.Store(-1)
	if m.cfg.Disabled {
		return t, nil
	}
	st, err := m.newSCS("task:" + name)
	if err != nil {
		return nil, err
	}
	t.st, t.base = st, st.base
	t.sp.Store(st.base)
	t.life.hw.Store(st.base)
	return t, nil
}

func (m *Model) check(cpu int) error {
	if cpu < 0 || cpu >= m.cfg.NumCPU {
		return &percpu.RangeError{CPU: cpu, NumCPU: m.cfg.NumCPU}
	}
	return nil
}

// Context returns the innermost live context on cpu (CtxTask if cpu is out of
// range).
func (m *Model) Context(cpu int) Context {
	if m.check(cpu) != nil {
		return CtxTask
	}
	return innermost(m.active.Load(cpu))
}

func innermost(active uint64) Context {
	switch {
	case active&bitCrit != 0:
		return CtxSDEICritical
	case active&bitNorm != 0:
		return CtxSDEINormal
	case active&bitIRQ != 0:
		return CtxIRQ
	}
	return CtxTask
}

// X18 returns cpu's x18 (0 if cpu is out of range).
func (m *Model) X18(cpu int) uint64 {
	if m.check(cpu) != nil {
		return 0
	}
	return m.x18.Load(cpu)
}

// Current returns the task current on cpu (nil if cpu is out of range).
func (m *Model) Current(cpu int) *Task {
	if m.check(cpu) != nil {
		return nil
	}
	return m.cur.Ptr(cpu).Load()
}

// stackOf returns context c's shadow stack on cpu (cpu and c checked): the
// current task's for CtxTask, the per-CPU one otherwise.
func (m *Model) stackOf(cpu int, c Context) *stack {
	if c == CtxTask {
		return &m.cur.Ptr(cpu).Load().st
	}
	return &m.stacks.Ptr(cpu)[c]
}

// Base returns context c's shadow stack base on cpu: thread_info.scs_base
// of the current task for CtxTask, the per-CPU *_shadow_call_stack_ptr
// otherwise.
func (m *Model) Base(cpu int, c Context) uint64 {
	if m.check(cpu) != nil || c >= NumContexts {
		return 0
	}
	if c == CtxTask {
		return m.cur.Ptr(cpu).Load().base
	}
	return m.base[c].Load(cpu)
}

// bounds returns the current context's shadow stack and usable slot range
// [base, limit), limit being the end magic's address, and its lifetimes.
func (m *Model) bounds(cpu int) (st *stack, base, limit uint64, l *life) {
	c := innermost(m.active.Load(cpu))
	st = m.stackOf(cpu, c)
	return st, st.base, st.base + m.cfg.Size - 8, m.lifeOf(cpu, c)
}

// lifeOf returns the lifetimes of context c's shadow stack on cpu (c <
// NumContexts, cpu checked).
func (m *Model) lifeOf(cpu int, c Context) *life {
	if c == CtxTask {
		return &m.cur.Ptr(cpu).Load().life
	}
	return &m.lives.Ptr(cpu)[c]
}

// Push models a prologue's str x30, [x18], #8 on cpu: lr is stored exactly
// as given (sign it first to model paciasp) and x18 advances. The push that
// would overwrite the end magic is refused with a *CorruptError ("scs
// overflow"), as is a push through an x18 outside the current context's
// shadow stack.
func (m *Model) Push(cpu int, lr uint64) error {
	if err := m.check(cpu); err != nil {
		return err
	}
	if m.cfg.Disabled {
		return ErrNotSupported
	}
	sp := m.x18.Load(cpu)
	r, base, limit, l := m.bounds(cpu)
	switch {
	case sp%8 != 0:
		return errs.Corruptf(errs.RuleMisalignedSCSPointer, sp, "push on cpu %d", cpu)
	case sp == limit:
		return errs.Corruptf(errs.RuleSCSOverflow, sp, "push on cpu %d would overwrite the end magic", cpu)
	case sp < base || sp > limit:
		return errs.Corruptf(errs.RuleSCSPointerOutsideRegion, sp, "push on cpu %d, %s context stack is [%#x, %#x)", cpu, m.Context(cpu), base, limit)
	}
	l.write(sp)
	r.store(sp, lr)
	m.x18.Store(cpu, sp+8)
	bump(&m.stats.Ptr(cpu).pushes)
	return nil
}

// Pop models an epilogue's ldr x30, [x18, #-8]! on cpu and returns the
// loaded value. Popping at the current context's base is refused with a
// *CorruptError ("scs underflow").
func (m *Model) Pop(cpu int) (uint64, error) {
	if err := m.check(cpu); err != nil {
		return 0, err
	}
	if m.cfg.Disabled {
		return 0, ErrNotSupported
	}
	sp := m.x18.Load(cpu)
	r, base, limit, _ := m.bounds(cpu)
	switch {
	case sp%8 != 0:
		return 0, errs.Corruptf(errs.RuleMisalignedSCSPointer, sp, "pop on cpu %d", cpu)
	case sp == base:
		return 0, errs.Corruptf(errs.RuleSCSUnderflow, sp, "pop at the %s context's base on cpu %d", m.Context(cpu), cpu)
	case sp < base || sp > limit:
		return 0, errs.Corruptf(errs.RuleSCSPointerOutsideRegion, sp, "pop on cpu %d, %s context stack is [%#x, %#x)", cpu, m.Context(cpu), base, limit)
	}
	v := r.load(sp - 8)
	m.x18.Store(cpu, sp-8)
	bump(&m.stats.Ptr(cpu).pops)
	return v, nil
}

// begin and end bracket a multi-word state change for View's readers.
func (m *Model) begin(cpu int) { m.seq.Store(cpu, m.seq.Load(cpu)+1) }
func (m *Model) end(cpu int)   { m.seq.Store(cpu, m.seq.Load(cpu)+1) }

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
	act := m.active.Load(cpu)
	if act != 0 {
		return fmt.Errorf("%w: IRQ on cpu %d in %s context (IRQs do not nest and are masked in SDEI)", ErrNesting, cpu, innermost(act))
	}
	if m.cfg.Disabled {
		m.begin(cpu)
		m.active.Store(cpu, bitIRQ)
		m.end(cpu)
		bump(&m.stats.Ptr(cpu).entries[CtxIRQ])
		return nil
	}
	sp := m.x18.Load(cpu)
	where := m.cfg.Policy.SavedX18(CtxIRQ)
	if where == OnInterruptedStack {
		if slot%16 != 0 {
			return fmt.Errorf("scs: EnterIRQ on cpu %d: stack slot %#x not 16-byte aligned", cpu, slot)
		}
		if _, ok := m.cfg.Mem.Load(slot); !ok {
			return fmt.Errorf("scs: EnterIRQ on cpu %d: stack slot %#x unmapped", cpu, slot)
		}
		if _, ok := m.cfg.Mem.Load(slot + 8); !ok {
			return fmt.Errorf("scs: EnterIRQ on cpu %d: stack slot %#x unmapped", cpu, slot+8)
		}
	}
	m.begin(cpu)
	switch where {
	case InThreadInfo:
		m.cur.Ptr(cpu).Load().sp.Store(sp)
	case OnInterruptedStack:
		m.cfg.Mem.Store(slot, sp)
		m.cfg.Mem.Store(slot+8, 0)
		m.slot.Store(cpu, slot)
	case InPerCPU:
		m.saved[CtxIRQ].Store(cpu, sp)
	}
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
	if c := innermost(m.active.Load(cpu)); c != CtxIRQ {
		return fmt.Errorf("%w: IRQ exit on cpu %d in %s context", ErrNesting, cpu, c)
	}
	var sp uint64
	where := m.cfg.Policy.SavedX18(CtxIRQ)
	if !m.cfg.Disabled {
		switch where {
		case InThreadInfo:
			sp = m.cur.Ptr(cpu).Load().sp.Load()
		case OnInterruptedStack:
			v, ok := m.cfg.Mem.Load(m.slot.Load(cpu))
			if !ok {
				return fmt.Errorf("scs: ExitIRQ on cpu %d: stack slot %#x unmapped", cpu, m.slot.Load(cpu))
			}
			sp = v
		case InPerCPU:
			sp = m.saved[CtxIRQ].Load(cpu)
		}
	}
	m.begin(cpu)
	if !m.cfg.Disabled {
		switch where {
		case OnInterruptedStack:
			m.slot.Store(cpu, 0)
		case InPerCPU:
			m.saved[CtxIRQ].Store(cpu, 0)
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
	act := m.active.Load(cpu)
	if in := innermost(act); in >= c {
		return fmt.Errorf("%w: %s event on cpu %d in %s context", ErrNesting, c, cpu, in)
	}
	m.begin(cpu)
	if !m.cfg.Disabled {
		sp := m.x18.Load(cpu)
		m.sdeiRegs[c].Store(cpu, sp) // stp x18, x19, [x1, #SDEI_EVENT_INTREGS + 16 * 9]
		if m.cfg.Policy.SavedX18(c) == InPerCPU {
			m.saved[c].Store(cpu, sp)
		}
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
		return fmt.Errorf("%w: SDEI exit on cpu %d in %s context", ErrNesting, cpu, c)
	}
	m.begin(cpu)
	if !m.cfg.Disabled {
		sp := m.sdeiRegs[c].Load(cpu)
		if m.cfg.Policy.SavedX18(c) == InPerCPU {
			sp = m.saved[c].Load(cpu)
			m.saved[c].Store(cpu, 0)
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

// CheckCorruption mirrors the kernel's scs_corrupted() for cpu's current
// context: it returns a *CorruptError if x18 is sp - base >= size - 1 bytes
// past the context's base (unsigned, so x18 below the base counts too) or
// the end magic changed, and nil otherwise. It returns ErrNotSupported when
// the SCS is disabled.
func (m *Model) CheckCorruption(cpu int) error {
	if err := m.check(cpu); err != nil {
		return err
	}
	if m.cfg.Disabled {
		return ErrNotSupported
	}
	sp := m.x18.Load(cpu)
	r, base, limit, _ := m.bounds(cpu)
	if sp-base >= m.cfg.Size-1 {
		return errs.Corruptf(errs.RuleSCSOverflow, sp, "cpu %d %s context: %d bytes past base %#x, size %d", cpu, m.Context(cpu), sp-base, base, m.cfg.Size)
	}
	if v := r.load(limit); v != EndMagic {
		return errs.Corruptf(errs.RuleSCSEndMagicOverwritten, limit, "cpu %d %s context: %#x", cpu, m.Context(cpu), v)
	}
	return nil
}

// SetX18 writes v to cpu's x18 without any check: fault injection for
// tests and demonstrations of corrupt state.
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
	switch m.cfg.Policy.SavedX18(c) {
	case InPerCPU:
		m.saved[c].Store(cpu, v)
	case InSDEIRegs:
		m.sdeiRegs[c].Store(cpu, v)
	case InThreadInfo:
		m.cur.Ptr(cpu).Load().sp.Store(v)
	case OnInterruptedStack:
		if !m.cfg.Mem.Store(m.slot.Load(cpu), v) {
			return fmt.Errorf("scs: SetSaved: stack slot %#x unmapped", m.slot.Load(cpu))
		}
	}
	return nil
}

// Stats returns the counters summed over all CPUs, with the SCS-related
// cost of every entry, exit and switch performed so far.
func (m *Model) Stats() Stats {
	var s Stats
	for cpu := 0; cpu < m.cfg.NumCPU; cpu++ {
		c := m.stats.Ptr(cpu)
		for x := range NumContexts {
			s.Entries[x] += c.entries[x].Load()
			s.Exits[x] += c.exits[x].Load()
		}
		s.Switches += c.switches.Load()
		s.Pushes += c.pushes.Load()
		s.Pops += c.pops.Load()
	}
	if m.cfg.Disabled {
		return s
	}
	for x := CtxIRQ; x < NumContexts; x++ {
		s.Entry.add(EntryCost(m.cfg.Policy, x, m.cfg.KeepInterruptedPC), s.Entries[x])
		s.Entry.add(ExitCost(m.cfg.Policy, x, m.cfg.KeepInterruptedPC), s.Exits[x])
	}
	s.Switch.add(switchCost, s.Switches)
	return s
}

// snapshot is the per-CPU state View reads under the sequence lock.
type snapshot struct {
	active, x18, slot uint64
	task              *Task
	taskSP            uint64
	base, saved, regs [NumContexts]uint64
	pc                [NumContexts]uint64
	gen               [NumContexts]uint64 // each stack's life generation, read before any top
}

func (m *Model) read(cpu int, s *snapshot) {
	for {
		s1 := m.seq.Load(cpu)
		if s1&1 != 0 {
			runtime.Gosched()
			continue
		}
		// The generations first, then the tops (see life): a push that
		// lands between them makes the copy report ErrChanged rather
		// than go unnoticed.
		s.task = m.cur.Ptr(cpu).Load()
		s.gen[CtxTask] = s.task.life.gen.Load()
		ls := m.lives.Ptr(cpu)
		for c := CtxIRQ; c < NumContexts; c++ {
			s.gen[c] = ls[c].gen.Load()
		}
		s.active = m.active.Load(cpu)
		s.x18 = m.x18.Load(cpu)
		s.slot = m.slot.Load(cpu)
		s.taskSP = s.task.sp.Load()
		for c := CtxIRQ; c < NumContexts; c++ {
			s.base[c] = m.base[c].Load(cpu)
			s.saved[c] = m.saved[c].Load(cpu)
			s.regs[c] = m.sdeiRegs[c].Load(cpu)
			s.pc[c] = m.pc[c].Load(cpu)
		}
		if m.seq.Load(cpu) == s1 {
			return
		}
	}
}

// View returns a consistent snapshot of cpu's shadow stacks for Save and
// Frames: one Segment per live context, innermost first. It may be called
// from any goroutine while cpu's driver keeps running. The View describes
// the stacks at one instant and carries each stack's life generation at
// that instant (see "Reading a running model" in the package doc): Save
// and Frames on it return what the stacks held at that instant, or
// ErrChanged once the driver has rewritten a slot the View covers. When
// the SCS is disabled the View has Disabled set.
func (m *Model) View(cpu int) (View, error) {
	var v View
	err := m.ViewInto(cpu, &v)
	return v, err
}

// ViewInto is View writing into *v, which it overwrites entirely; it
// saves copying a View on hot paths.
func (m *Model) ViewInto(cpu int, v *View) error {
	// Field by field rather than *v = View{...}, which builds the whole
	// View on the stack and copies it.
	v.Layout = m.cfg.Layout
	v.Disabled, v.StopAtBoundary, v.N = false, false, 0
	if err := m.check(cpu); err != nil {
		clear(v.Segs[:])
		return err
	}
	if m.cfg.Disabled {
		clear(v.Segs[:])
		v.Disabled = true
		return nil
	}
	var s snapshot
	m.read(cpu, &s)
	rs := m.stacks.Ptr(cpu)
	// Live contexts, innermost first.
	var live [NumContexts]Context
	n := 0
	for c := CtxSDEICritical; c > CtxTask; c-- {
		if s.active&(1<<c) != 0 {
			live[n] = c
			n++
		}
	}
	live[n] = CtxTask
	n++
	clear(v.Segs[n:])
	top, from, addr, hidden := s.x18, InRegister, uint64(0), false
	for i := 0; i < n; i++ {
		c := live[i]
		seg := &v.Segs[i]
		seg.Context = c
		seg.Data = nil
		seg.Size = m.cfg.Size
		seg.Magic = true
		if c == CtxTask {
			seg.words, seg.Base = s.task.st.words, s.task.st.base
			seg.gen = &s.task.life.gen
		} else {
			seg.words, seg.Base = rs[c].words, rs[c].base
			seg.gen = &m.lives.Ptr(cpu)[c].gen
		}
		seg.genWant = s.gen[c]
		seg.Top, seg.TopFrom, seg.TopAddr, seg.Hidden = top, from, addr, hidden
		seg.InterruptedPC, seg.HasInterruptedPC = 0, false
		if c == CtxTask {
			break
		}
		// Where entering c left the interrupted context's x18.
		from, addr = m.cfg.Policy.SavedX18(c), 0
		switch from {
		case InPerCPU:
			top = s.saved[c]
		case InSDEIRegs:
			top = s.regs[c]
		case InThreadInfo:
			top = s.taskSP
		case OnInterruptedStack:
			addr = s.slot
		}
		if hidden = from.Hidden(); hidden {
			top = 0
		}
		if m.cfg.KeepInterruptedPC {
			seg.InterruptedPC, seg.HasInterruptedPC = s.pc[c], true
		}
	}
	v.N = n
	return nil
}

// TaskView returns a View of task t's shadow stack as t left it when it
// last stopped running (its thread_info.scs_sp): one segment, Top from
// InThreadInfo, re-checked like any View of the model (a task that runs
// again and rewrites the slots makes Save return ErrChanged). For the
// task current on a CPU use View. When the SCS is disabled the View has
// Disabled set.
func (m *Model) TaskView(t *Task) View {
	v := View{Layout: m.cfg.Layout, N: 1}
	if m.cfg.Disabled || t == nil {
		v.Disabled = m.cfg.Disabled
		v.N = 0
		return v
	}
	gen := t.life.gen.Load() // before the top, as View reads them
	v.Segs[0] = Segment{Context: CtxTask, words: t.st.words, Base: t.base, Size: m.cfg.Size, Magic: true,
		Top: t.sp.Load(), TopFrom: InThreadInfo, gen: &t.life.gen, genWant: gen}
	return v
}

// Save is View followed by the package-level Save on cpu, retried while
// the copy reports ErrChanged (at most saveTries times; then it returns 0
// and ErrChanged). What it returns is cpu's shadow stacks at one instant.
func (m *Model) Save(cpu int, store []uint64, skip int) (int, error) {
	var v View
	for try := 0; ; try++ {
		if err := m.ViewInto(cpu, &v); err != nil {
			return 0, err
		}
		n, err := Save(&v, store, skip)
		if err != ErrChanged || try+1 == saveTries {
			return n, err
		}
		runtime.Gosched()
	}
}

// saveTries bounds Model.Save's retries.
const saveTries = 100
