// The Machine: configuration, memory layout (address map, stacks, pt_regs constants), text and tasks.

package machine

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/mem"
	"github.com/unwindkit/unwindkit/internal/scsdriver"
	"github.com/unwindkit/unwindkit/ptrauth"
	"github.com/unwindkit/unwindkit/scs"
	"github.com/unwindkit/unwindkit/unwind"
)

// Context is the execution context a CPU is in (scs.Context). Contexts
// nest: task, then hard IRQ, then SDEI normal, then SDEI critical.
type Context = scs.Context

// The contexts, scs's constants under their names there.
const (
	CtxTask         = scs.CtxTask
	CtxIRQ          = scs.CtxIRQ
	CtxSDEINormal   = scs.CtxSDEINormal
	CtxSDEICritical = scs.CtxSDEICritical
)

// Policy says where entry code keeps the interrupted context's x18
// (scs.Policy).
type Policy = scs.Policy

// The shadow call stack entry policies.
const (
	ThreadInfo = scs.ThreadInfo // mainline today: thread_info.scs_sp
	OnStack    = scs.OnStack    // 2022 mainline: pushed on the interrupted stack
	PerCPU     = scs.PerCPU     // the seed patch: per-CPU saved pointers
)

// Config configures a Machine. Start from DefaultConfig.
type Config struct {
	// NumCPU is the number of modelled CPUs (1 to 64).
	NumCPU int
	// SCS enables the shadow call stack (CONFIG_SHADOW_CALL_STACK).
	SCS bool
	// SCSSize is the size of every shadow call stack in bytes (default
	// 4096; 1024 as in older kernels and 16384 as in Android user space).
	SCSSize uint64
	// Policy says where the interrupted context's x18 is kept on entry.
	// PolicyUnknown (0) means ThreadInfo.
	Policy Policy
	// KeepInterruptedPC keeps the interrupted PC per-CPU at every entry, so
	// the SCS copy can report the interrupted function (the seed's fix).
	KeepInterruptedPC bool
	// FramePointers builds {fp, lr} frame records (CONFIG_FRAME_POINTER,
	// always on for arm64 kernels).
	FramePointers bool
	// PAC signs return addresses (-mbranch-protection=pac-ret) with Key and
	// Algorithm, the stack pointer as modifier, in Layout.
	PAC       bool
	Layout    ptrauth.Layout
	Key       ptrauth.Key
	Algorithm ptrauth.Algorithm
	// KASAN doubles the stacks to 32 KiB, as KASAN kernels do.
	KASAN bool
	// FGraph enables the function-graph tracer on every declared function.
	FGraph bool
	// Kretprobes probes the functions marked Kretprobe (every declared
	// function if none is marked).
	Kretprobes bool
	// Funcs declares the functions the tasks and handlers run.
	Funcs []Func
}

// DefaultConfig returns a one-CPU machine with the shadow call stack
// (ThreadInfo policy, one page), frame pointers, and no PAC: mainline
// arm64 with CONFIG_SHADOW_CALL_STACK.
func DefaultConfig() Config {
	return Config{
		NumCPU:        1,
		SCS:           true,
		SCSSize:       4096,
		Policy:        ThreadInfo,
		FramePointers: true,
		Layout:        KernelLayout(),
		Key:           ptrauth.Key{Hi: 0x0123456789abcdef, Lo: 0xfedcba9876543210},
		Algorithm:     ptrauth.QARMA5,
	}
}

// KernelLayout is the arm64 kernel's usual VA layout: 48-bit VAs in both
// halves, TBI on for user (TTBR0) addresses and off for kernel (TTBR1) ones.
func KernelLayout() ptrauth.Layout {
	l, err := ptrauth.NewLayoutHalves(
		ptrauth.Half{VABits: 48, TBI: true},
		ptrauth.Half{VABits: 48, TBI: false},
		ptrauth.PAuth2)
	if err != nil {
		panic(err)
	}
	return l
}

// Modelled address map: kernel text and a vmalloc-like area for stacks.
const (
	textBase  = 0xffff800080010000
	vmBase    = 0xffff800090000000
	guardSize = 0x4000
)

// pt_regs layout (arch/arm64/include/asm/ptrace.h): the kernel ABI's one
// definition is package fp.
const (
	ptRegsSize       = fp.PtRegsSize
	ptRegsX18        = fp.PtRegsX18Off
	ptRegsX29        = fp.PtRegsX29Off
	ptRegsX30        = fp.PtRegsLROff
	ptRegsSP         = fp.PtRegsSPOff
	ptRegsPC         = fp.PtRegsPCOff
	ptRegsPState     = fp.PtRegsPstateOff
	ptRegsStackFrame = fp.PtRegsStackFrameOff
	metaFinal        = fp.MetaFinal
	metaPtRegs       = fp.MetaPtRegs
	pstateEL1h       = 0x3c5 // PSR_MODE_EL1h with DAIF masked, as kernel_entry saves it for an exception from EL1
	retStackEntries  = 256   // the model's return stacks' capacity (a model choice, not ABI)
)

// Machine is a modelled arm64 system: CPUs, tasks, a text region of real
// A64 instructions, and the memory their stacks live in. Each CPU is driven
// by one goroutine at a time; any number of goroutines may unwind any CPU
// concurrently (see CPU.Unwind).
type Machine struct {
	cfg  Config
	mem  *mem.Memory
	text *text
	sym  *unwind.Symbolizer
	// scs is the SCS model, present (Disabled) even without the shadow
	// call stack: it owns each CPU's nesting state and sequence lock.
	scs *scs.Model
	// drv is scs's driver hooks (its sequence lock and nesting rules),
	// which are not scs's public API.
	drv   scsdriver.Driver
	cpus  []*CPU
	mu    sync.Mutex // tasks, Switch, the allocator
	tasks []*Task
	next  uint64 // allocator cursor

	graphTramp, kprobeTramp uint64
}

// Task is a modelled kernel task: a stack with its pt_regs and FINAL record
// at the top, a shadow call stack, and return stacks for the tracers.
type Task struct {
	Name     string
	m        *Machine
	stack    *mem.Region
	ptRegs   uint64
	graph    *retStack
	kprobe   *retStack
	scsState *scs.Task
	entry    *fn      // not yet started: ret_from_fork calls it on first Switch
	ctx      *context // its task context (live chain)
	cpu      int      // -1 when not running
}

// CPU is one modelled CPU. Its methods that change state (Call, Return,
// EnterIRQ, ...) must be called by one goroutine at a time; Unwind, Truth
// snapshots taken through Published, and the Save functions may run on
// other goroutines concurrently.
type CPU struct {
	m    *Machine
	id   int
	task *Task
	ctxs []*context // ctxs[0] is the current task's context

	irqStack, sdeiNormal, sdeiCritical, overflow *mem.Region
	sdeiRegs                                     [2]*mem.Region // registered event regs

	// The registers concurrent unwinders read, written by publish inside
	// each change (see begin) and read under the sequence lock.
	pubTask atomic.Pointer[taskStacks]
	pubX29  atomic.Uint64
	pubPC   atomic.Uint64
	pubCtx  atomic.Uint32
	free    []*activation // activations returned by leave, for enter
}

// New builds a machine from cfg. It fails with a clear error for an
// invalid configuration.
func New(cfg Config) (*Machine, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.SCSSize == 0 {
		cfg.SCSSize = 4096
	}
	if cfg.Policy == scs.PolicyUnknown {
		cfg.Policy = ThreadInfo
	}
	m := &Machine{cfg: cfg, mem: &mem.Memory{}, next: vmBase}
	if err := m.buildText(); err != nil {
		return nil, err
	}
	sm, err := scs.New(scs.Config{
		Size:              cfg.SCSSize,
		Policy:            cfg.Policy,
		NumCPU:            cfg.NumCPU,
		Layout:            cfg.Layout,
		KeepInterruptedPC: cfg.KeepInterruptedPC,
		Disabled:          !cfg.SCS,
		Mem:               m.mem,
	}, func(name, kind string, size uint64) (uint64, []uint64, error) {
		r, err := m.alloc(name, kind, size, size)
		if err != nil {
			return 0, nil, err
		}
		return r.Base, r.Words(), nil
	})
	if err != nil {
		return nil, err
	}
	m.scs, m.drv = sm, scsdriver.Of(sm)
	for i := 0; i < cfg.NumCPU; i++ {
		c := &CPU{m: m, id: i}
		var err error
		ss := m.stackSize()
		if c.irqStack, err = m.allocStack(fmt.Sprintf("cpu%d irq stack", i), "irq", ss); err != nil {
			return nil, err
		}
		if c.overflow, err = m.allocStack(fmt.Sprintf("cpu%d overflow stack", i), "overflow", 4096); err != nil {
			return nil, err
		}
		if c.sdeiNormal, err = m.allocStack(fmt.Sprintf("cpu%d sdei normal stack", i), "sdei-normal", ss); err != nil {
			return nil, err
		}
		if c.sdeiCritical, err = m.allocStack(fmt.Sprintf("cpu%d sdei critical stack", i), "sdei-critical", ss); err != nil {
			return nil, err
		}
		for p := range c.sdeiRegs {
			if c.sdeiRegs[p], err = m.alloc(fmt.Sprintf("cpu%d sdei event regs %d", i, p), "percpu", ptRegsSize, 16); err != nil {
				return nil, err
			}
		}
		m.cpus = append(m.cpus, c)
	}
	return m, nil
}

func (cfg *Config) validate() error {
	switch {
	case cfg.NumCPU < 1 || cfg.NumCPU > 64:
		return fmt.Errorf("machine: NumCPU %d outside [1, 64]", cfg.NumCPU)
	case cfg.SCS && cfg.SCSSize != 0 && (cfg.SCSSize < 64 || cfg.SCSSize%8 != 0 || cfg.SCSSize > 1<<20):
		return fmt.Errorf("machine: SCSSize %d: want a multiple of 8 in [64, 1 MiB]", cfg.SCSSize)
	case !cfg.SCS && cfg.KeepInterruptedPC:
		return errors.New("machine: KeepInterruptedPC needs the shadow call stack")
	case cfg.PAC && cfg.Layout == (ptrauth.Layout{}):
		return errors.New("machine: PAC on with the zero Layout (no PAC field)")
	case cfg.Policy != scs.PolicyUnknown && !slices.Contains(scs.Policies[:], cfg.Policy):
		return fmt.Errorf("machine: unknown SCS policy %d", cfg.Policy)
	case !cfg.FramePointers && (cfg.FGraph || cfg.Kretprobes):
		return errors.New("machine: the function-graph tracer and kretprobes need frame pointers in this model")
	}
	seen := map[string]bool{}
	for _, f := range cfg.Funcs {
		if f.Name == "" {
			return errors.New("machine: a function has no name")
		}
		if seen[f.Name] || isBuiltin(f.Name) {
			return fmt.Errorf("machine: function %q declared twice or shadows a builtin", f.Name)
		}
		seen[f.Name] = true
		if f.Locals < 0 || f.Locals > 4096 {
			return fmt.Errorf("machine: function %q: Locals %d outside [0, 4096]", f.Name, f.Locals)
		}
	}
	return nil
}

func isBuiltin(name string) bool {
	switch name {
	case FnRetFromFork, FnIRQVector, FnIRQHandler, FnCallOnIRQStack, FnHandleIRQ,
		FnSDEIAsmHandler, FnSDEIHandler, FnStackTraceSave, FnReturnToHandler, FnKretprobeTramp:
		return true
	}
	return false
}

func (m *Machine) stackSize() uint64 {
	if m.cfg.KASAN {
		return 32 << 10
	}
	return 16 << 10
}

// alloc places a region in the vmalloc-like area with a guard gap before it.
func (m *Machine) alloc(name, kind string, size, align uint64) (*mem.Region, error) {
	base := (m.next + guardSize + align - 1) &^ (align - 1)
	r, err := mem.NewRegion(name, kind, base, (size+7)&^7)
	if err != nil {
		return nil, err
	}
	if err := m.mem.Add(r); err != nil {
		return nil, err
	}
	m.next = r.End()
	return r, nil
}

func (m *Machine) allocStack(name, kind string, size uint64) (*mem.Region, error) {
	return m.alloc(name, kind, size, size)
}

func (m *Machine) buildText() error {
	cfg := m.cfg
	var userNames []string
	anyProbed := false
	for _, f := range cfg.Funcs {
		userNames = append(userNames, f.Name)
		anyProbed = anyProbed || f.Kretprobe
	}
	var fns []*fn
	addC := func(spec Func, user bool) *fn {
		if spec.Calls == nil && !spec.Leaf {
			spec.Calls = append([]string(nil), userNames...)
		}
		if !spec.Leaf && spec.Name != FnStackTraceSave {
			spec.Calls = append(spec.Calls, FnStackTraceSave)
		}
		f := &fn{spec: spec, kind: kindC}
		f.scs = cfg.SCS && !spec.NoSCS && !spec.Leaf
		f.frame = cfg.FramePointers && !spec.NoFrame && !spec.Leaf
		f.pac = cfg.PAC && !spec.NoPAC && !spec.Leaf
		if !spec.Leaf {
			f.frameSz = 16 + roundUp16(spec.Locals)
		}
		f.traced = user && cfg.FGraph
		f.probed = user && cfg.Kretprobes && (spec.Kretprobe || !anyProbed)
		fns = append(fns, f)
		return f
	}
	addAsm := func(name string, frame bool, calls ...string) {
		fns = append(fns, &fn{spec: Func{Name: name, Calls: calls}, kind: kindAsm, frame: frame, frameSz: 16})
	}
	addAsm(FnRetFromFork, false)
	addAsm(FnIRQVector, false, FnIRQHandler)
	addC(Func{Name: FnIRQHandler, Calls: []string{FnCallOnIRQStack}}, false)
	addAsm(FnCallOnIRQStack, true)
	addC(Func{Name: FnHandleIRQ}, false)
	addAsm(FnSDEIAsmHandler, true, FnSDEIHandler)
	addC(Func{Name: FnSDEIHandler}, false)
	addC(Func{Name: FnStackTraceSave, Calls: []string{}}, false)
	fns = append(fns, &fn{spec: Func{Name: FnReturnToHandler}, kind: kindTramp})
	fns = append(fns, &fn{spec: Func{Name: FnKretprobeTramp}, kind: kindTramp})
	for _, f := range cfg.Funcs {
		addC(f, true)
	}
	t, err := buildText(textBase, fns, cfg.FGraph)
	if err != nil {
		return err
	}
	if err := m.mem.Add(t.region); err != nil {
		return err
	}
	m.text = t
	syms := make([]unwind.Symbol, len(t.fns))
	for i, f := range t.fns {
		syms[i] = unwind.Symbol{Name: f.spec.Name, Addr: f.addr, Size: f.size}
	}
	m.sym = unwind.NewSymbolizer(syms)
	m.graphTramp = t.byName[FnReturnToHandler].addr
	m.kprobeTramp = t.byName[FnKretprobeTramp].addr
	return nil
}

// Config returns the machine's configuration.
func (m *Machine) Config() Config { return m.cfg }

// Symbolizer returns the symbolizer of the machine's text.
func (m *Machine) Symbolizer() *unwind.Symbolizer { return m.sym }

// NumCPU returns the number of CPUs.
func (m *Machine) NumCPU() int { return len(m.cpus) }

// CPU returns CPU i. It panics if i is out of range.
func (m *Machine) CPU(i int) *CPU {
	if i < 0 || i >= len(m.cpus) {
		panic(fmt.Sprintf("machine: CPU %d out of range [0, %d)", i, len(m.cpus)))
	}
	return m.cpus[i]
}

// FuncAddr returns the entry address of the named function.
func (m *Machine) FuncAddr(name string) (uint64, bool) {
	f, ok := m.text.byName[name]
	if !ok {
		return 0, false
	}
	return f.addr, true
}

// Instruction returns the 32-bit instruction at pc in the text region.
func (m *Machine) Instruction(pc uint64) (uint32, bool) { return m.text.region.Load32(pc) }

// NewTask creates a task whose first function is entry, called from
// ret_from_fork. The task is not running until a CPU switches to it.
func (m *Machine) NewTask(name, entry string) (*Task, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ef, ok := m.text.byName[entry]
	if !ok || isBuiltin(entry) {
		return nil, fmt.Errorf("machine: task %q: entry function %q not declared", name, entry)
	}
	t := &Task{Name: name, m: m, cpu: -1}
	var err error
	if t.stack, err = m.allocStack(name+" stack", "task", m.stackSize()); err != nil {
		return nil, err
	}
	for _, rs := range []**retStack{&t.graph, &t.kprobe} {
		r, err := m.alloc(name+" return stack", "retstack", fp.RetStackEntriesOff+fp.RetStackEntrySize*retStackEntries, 16)
		if err != nil {
			return nil, err
		}
		*rs = &retStack{region: r}
	}
	if t.scsState, err = m.scs.NewTask(name); err != nil {
		return nil, err
	}
	// The task's pt_regs at the top of its stack, with the FINAL record.
	t.ptRegs = fp.TaskPtRegsAddr(t.stack.End(), fp.PtRegsLayout{})
	t.stack.Store(t.ptRegs+ptRegsPState, 0) // EL0t: a user task's entry regs
	t.stack.Store(t.ptRegs+ptRegsStackFrame+fp.MetaTypeOff, metaFinal)
	rf := m.text.byName[FnRetFromFork]
	ctx := &context{kind: CtxTask, stack: t.stack, sp: t.ptRegs, x29: t.ptRegs + ptRegsStackFrame}
	ctx.acts = []*activation{{f: rf, pc: rf.blr + 4, entrySP: t.ptRegs}}
	t.ctx = ctx
	t.entry = ef // called by ret_from_fork's blr x19 when first switched to
	m.tasks = append(m.tasks, t)
	return t, nil
}

// Task returns the CPU's running task, or nil.
func (c *CPU) Task() *Task { return c.task }

// Context returns the CPU's current context. The SCS model's per-CPU
// nesting state is the one record of it; any goroutine may ask.
func (c *CPU) Context() Context { return c.m.scs.Context(c.id) }

// SCSStats returns the shadow call stack model's counters (entries, exits
// and the memory operations they cost); ok is false without an SCS.
func (m *Machine) SCSStats() (st scs.Stats, ok bool) {
	if !m.cfg.SCS {
		return st, false
	}
	return m.scs.Stats(), true
}
