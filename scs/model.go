// The Model: configuration, per-CPU state, tasks, Push and Pop, the corruption check and the counters.

package scs

import (
	"fmt"
	"sync/atomic"

	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/percpu"
)

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
	// depth counts the open begin/Begin calls (only the driver writes it).
	depth  *percpu.Uint64
	cur    *percpu.Var[atomic.Pointer[Task]]
	stacks *percpu.Var[[NumContexts]stack] // IRQ, SDEI shadow stacks; fixed after New

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
	m.x18, m.active, m.seq, m.slot, m.depth = u(), u(), u(), u(), u()
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
		return errs.Corruptf(RuleMisalignedSCSPointer, sp, "push on cpu %d", cpu)
	case sp == limit:
		return errs.Corruptf(RuleSCSOverflow, sp, "push on cpu %d would overwrite the end magic", cpu)
	case sp < base || sp > limit:
		return errs.Corruptf(RuleSCSPointerOutsideRegion, sp, "push on cpu %d, %s context stack is [%#x, %#x)", cpu, m.Context(cpu), base, limit)
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
		return 0, errs.Corruptf(RuleMisalignedSCSPointer, sp, "pop on cpu %d", cpu)
	case sp == base:
		return 0, errs.Corruptf(RuleSCSUnderflow, sp, "pop at the %s context's base on cpu %d", m.Context(cpu), cpu)
	case sp < base || sp > limit:
		return 0, errs.Corruptf(RuleSCSPointerOutsideRegion, sp, "pop on cpu %d, %s context stack is [%#x, %#x)", cpu, m.Context(cpu), base, limit)
	}
	v := r.load(sp - 8)
	m.x18.Store(cpu, sp-8)
	bump(&m.stats.Ptr(cpu).pops)
	return v, nil
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
		return errs.Corruptf(RuleSCSOverflow, sp, "cpu %d %s context: %d bytes past base %#x, size %d", cpu, m.Context(cpu), sp-base, base, m.cfg.Size)
	}
	if v := r.load(limit); v != EndMagic {
		return errs.Corruptf(RuleSCSEndMagicOverwritten, limit, "cpu %d %s context: %#x", cpu, m.Context(cpu), v)
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
