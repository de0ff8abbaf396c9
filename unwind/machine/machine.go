package machine

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/kabi"
	"github.com/unwindkit/unwindkit/internal/mem"
	"github.com/unwindkit/unwindkit/ptrauth"
	"github.com/unwindkit/unwindkit/scs"
	"github.com/unwindkit/unwindkit/unwind"
)

// Context is the execution context a CPU is in (scs.Context). Contexts
// nest: task, then hard IRQ, then SDEI normal, then SDEI critical.
type Context = scs.Context

// The contexts.
const (
	ContextTask         = scs.CtxTask
	ContextIRQ          = scs.CtxIRQ
	ContextSDEINormal   = scs.CtxSDEINormal
	ContextSDEICritical = scs.CtxSDEICritical
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
// definition is package kabi, which package fp exports too.
const (
	ptRegsSize       = kabi.PtRegsSize
	ptRegsX18        = kabi.PtRegsX18Off
	ptRegsX29        = kabi.PtRegsX29Off
	ptRegsX30        = kabi.PtRegsLROff
	ptRegsSP         = kabi.PtRegsSPOff
	ptRegsPC         = kabi.PtRegsPCOff
	ptRegsPState     = kabi.PtRegsPstateOff
	ptRegsStackFrame = kabi.PtRegsStackFrameOff
	metaFinal        = kabi.MetaFinal
	metaPtRegs       = kabi.MetaPtRegs
	pstateEL1h       = kabi.PstateEL1h
	retStackEntries  = 256 // the model's return stacks' capacity (a model choice, not ABI)
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
	scs  *scs.Model
	cpus []*CPU
	// fpMem is an fp.Config holding only the model's memory (attached
	// once with mem.AttachFP): every FP Config of the model starts as a
	// copy of it, so attaching costs no escape per unwind.
	fpMem fp.Config

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

// retStack is a return stack in modelled memory: count word, then {ret, fp}.
type retStack struct {
	region *mem.Region
	n      int
}

func (r *retStack) push(ret, fp uint64) error {
	if r.n >= retStackEntries {
		return errors.New("unwind: return stack full")
	}
	a := r.region.Base + kabi.RetStackEntriesOff + kabi.RetStackEntrySize*uint64(r.n)
	r.region.Store(a, ret)
	r.region.Store(a+8, fp)
	r.n++
	r.region.Store(r.region.Base, uint64(r.n))
	return nil
}

func (r *retStack) pop() {
	r.n--
	r.region.Store(r.region.Base, uint64(r.n))
}

// activation is one live function on a context's chain.
type activation struct {
	f        *fn
	pc       uint64 // where f is now: its body, or the return address of its callee
	ret      uint64 // the real address f returns to (its caller's pc)
	saved    uint64 // the value f's prologue saved (signed, trampolined)
	entrySP  uint64
	savedX29 uint64
	frameAt  uint64 // address of f's frame record, 0 if none
	graph    bool   // pushed a function-graph return-stack entry
	kprobe   bool   // pushed a kretprobe instance
	// exception entries: the vector or the SDEI asm handler
	interrupted bool // ret is an interrupted pc, not a call's return
	ptRegs      uint64
}

type context struct {
	kind   Context
	stack  *mem.Region
	sp     uint64
	x29    uint64
	x30    uint64
	acts   []*activation
	slot   uint64 // OnStack: where x18 was pushed on the interrupted stack
	parent *context
}

func (c *context) top() *activation { return c.acts[len(c.acts)-1] }

// minDepth is the number of activations a context keeps until it ends:
// ret_from_fork and the task function; handle_arch_irq; the SDEI asm
// handler and __sdei_handler.
func (c *context) minDepth() int {
	if c.kind == ContextIRQ {
		return 1
	}
	return 2
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

// NewMachine builds a machine from cfg. It fails with a clear error for an
// invalid configuration.
func NewMachine(cfg Config) (*Machine, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.SCSSize == 0 {
		cfg.SCSSize = 4096
	}
	m := &Machine{cfg: cfg, mem: &mem.Memory{}, next: vmBase}
	mem.AttachFP(&m.fpMem, m.mem)
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
	m.scs = sm
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
		return fmt.Errorf("unwind: NumCPU %d outside [1, 64]", cfg.NumCPU)
	case cfg.SCS && cfg.SCSSize != 0 && (cfg.SCSSize < 64 || cfg.SCSSize%8 != 0 || cfg.SCSSize > 1<<20):
		return fmt.Errorf("unwind: SCSSize %d: want a multiple of 8 in [64, 1 MiB]", cfg.SCSSize)
	case !cfg.SCS && cfg.KeepInterruptedPC:
		return errors.New("unwind: KeepInterruptedPC needs the shadow call stack")
	case cfg.PAC && cfg.Layout == (ptrauth.Layout{}):
		return errors.New("unwind: PAC on with the zero Layout (no PAC field)")
	case int(cfg.Policy) >= len(scs.Policies):
		return fmt.Errorf("unwind: unknown SCS policy %d", cfg.Policy)
	case !cfg.FramePointers && (cfg.FGraph || cfg.Kretprobes):
		return errors.New("unwind: the function-graph tracer and kretprobes need frame pointers in this model")
	}
	seen := map[string]bool{}
	for _, f := range cfg.Funcs {
		if f.Name == "" {
			return errors.New("unwind: a function has no name")
		}
		if seen[f.Name] || isBuiltin(f.Name) {
			return fmt.Errorf("unwind: function %q declared twice or shadows a builtin", f.Name)
		}
		seen[f.Name] = true
		if f.Locals < 0 || f.Locals > 4096 {
			return fmt.Errorf("unwind: function %q: Locals %d outside [0, 4096]", f.Name, f.Locals)
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
		panic(fmt.Sprintf("unwind: CPU %d out of range [0, %d)", i, len(m.cpus)))
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
		return nil, fmt.Errorf("unwind: task %q: entry function %q not declared", name, entry)
	}
	t := &Task{Name: name, m: m, cpu: -1}
	var err error
	if t.stack, err = m.allocStack(name+" stack", "task", m.stackSize()); err != nil {
		return nil, err
	}
	for _, rs := range []**retStack{&t.graph, &t.kprobe} {
		r, err := m.alloc(name+" return stack", "retstack", kabi.RetStackEntriesOff+kabi.RetStackEntrySize*retStackEntries, 16)
		if err != nil {
			return nil, err
		}
		*rs = &retStack{region: r}
	}
	if t.scsState, err = m.scs.NewTask(name); err != nil {
		return nil, err
	}
	// The task's pt_regs at the top of its stack, with the FINAL record.
	t.ptRegs = kabi.TaskPtRegs(t.stack.End())
	t.stack.Store(t.ptRegs+ptRegsPState, 0) // EL0t: a user task's entry regs
	t.stack.Store(t.ptRegs+ptRegsStackFrame+kabi.MetaTypeOff, metaFinal)
	rf := m.text.byName[FnRetFromFork]
	ctx := &context{kind: ContextTask, stack: t.stack, sp: t.ptRegs, x29: t.ptRegs + ptRegsStackFrame}
	ctx.acts = []*activation{{f: rf, pc: rf.blr + 4, entrySP: t.ptRegs}}
	t.ctx = ctx
	t.entry = ef // called by ret_from_fork's blr x19 when first switched to
	m.tasks = append(m.tasks, t)
	return t, nil
}

// Switch makes t the CPU's running task (cpu_switch_to). The CPU must be in
// task context; t must not be running on another CPU.
func (c *CPU) Switch(t *Task) error {
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if t == nil || t.m != m {
		return errors.New("unwind: Switch to a task of another machine")
	}
	if k := c.Context(); k != ContextTask {
		return fmt.Errorf("%w: cpu%d: Switch in %s context", scs.ErrNesting, c.id, k)
	}
	if t.cpu >= 0 && t.cpu != c.id {
		return fmt.Errorf("unwind: task %q is running on cpu%d", t.Name, t.cpu)
	}
	if c.task == t {
		return nil
	}
	c.begin()
	defer c.end()
	if err := m.scs.Switch(c.id, t.scsState); err != nil {
		return err
	}
	if c.task != nil {
		c.task.cpu = -1
	}
	t.cpu = c.id
	c.task = t
	c.ctxs = []*context{t.ctx}
	if t.entry != nil {
		// First run: ret_from_fork's blr x19 calls the task's function.
		rf := t.ctx.acts[0]
		if err := c.enter(t.ctx, rf, t.entry, rf.f.blr+4); err != nil {
			return err
		}
		t.entry = nil
	}
	return nil
}

// Task returns the CPU's running task, or nil.
func (c *CPU) Task() *Task { return c.task }

// ID returns the CPU number.
func (c *CPU) ID() int { return c.id }

// Context returns the CPU's current context. The SCS model's per-CPU
// nesting state is the one record of it; any goroutine may ask.
func (c *CPU) Context() Context { return c.m.scs.Context(c.id) }

// Depth returns the number of live functions in the current context.
func (c *CPU) Depth() int {
	if len(c.ctxs) == 0 {
		return 0
	}
	return len(c.cur().acts)
}

func (c *CPU) cur() *context { return c.ctxs[len(c.ctxs)-1] }

func (c *CPU) ready() error {
	if c.task == nil {
		return fmt.Errorf("unwind: cpu%d has no task: Switch first", c.id)
	}
	return nil
}

// begin and end bracket a state change in the CPU's one sequence lock,
// the SCS model's (scs.Model.Begin): the count is odd in between, so
// concurrent unwinders retry rather than read a torn state, and the
// model's own changes inside the bracket are part of the same change.
func (c *CPU) begin() { c.m.scs.Begin(c.id) }
func (c *CPU) end()   { c.publish(); c.m.scs.End(c.id) }

// Call calls the named function from the current function, through its
// real bl call site. It fails, changing nothing, if the current function is
// a leaf or has no call site for name, or a stack would overflow.
func (c *CPU) Call(name string) error {
	if err := c.ready(); err != nil {
		return err
	}
	ctx := c.cur()
	caller := ctx.top()
	site, ok := caller.f.sites[name]
	if !ok {
		if caller.f.spec.Leaf {
			return fmt.Errorf("unwind: %s is a leaf and calls nothing", caller.f.spec.Name)
		}
		return fmt.Errorf("unwind: %s has no call site for %q", caller.f.spec.Name, name)
	}
	callee := c.m.text.byName[name]
	c.begin()
	defer c.end()
	return c.enter(ctx, caller, callee, site+4)
}

// enter runs callee's entry (tracer hooks, paciasp, SCS push, frame) on ctx
// with return address ret. On error nothing has changed.
func (c *CPU) enter(ctx *context, caller *activation, callee *fn, ret uint64) error {
	m, t := c.m, c.task
	sp := ctx.sp
	if sp-ctx.stack.Base < callee.frameSz+64 || sp > ctx.stack.End() {
		return fmt.Errorf("unwind: %s stack overflow calling %s", ctx.kind, callee.spec.Name)
	}
	if callee.probed && t.kprobe.n >= retStackEntries || callee.traced && t.graph.n >= retStackEntries {
		return fmt.Errorf("unwind: return stack full calling %s", callee.spec.Name)
	}
	a := c.newActivation()
	*a = activation{f: callee, pc: callee.body, ret: ret, entrySP: sp, savedX29: ctx.x29}
	lr := ret
	// Kretprobe first, then the graph tracer: the kernel recovers in the
	// opposite order (graph, then kretprobe), so the graph hook is outermost.
	if callee.probed {
		a.kprobe = true
		lr = m.kprobeTramp
	}
	if callee.traced {
		a.graph = true
		lr = m.graphTramp
	}
	if callee.pac {
		lr = m.cfg.Layout.Sign(lr, sp, m.cfg.Key, m.cfg.Algorithm)
	}
	if callee.scs {
		if err := m.scs.Push(c.id, lr); err != nil {
			return fmt.Errorf("unwind: calling %s: %w", callee.spec.Name, err)
		}
	}
	if a.kprobe {
		t.kprobe.push(ret, ctx.x29)
	}
	if a.graph {
		inner := ret
		if a.kprobe {
			inner = m.kprobeTramp
		}
		t.graph.push(inner, ctx.x29)
	}
	a.saved = lr
	switch {
	case callee.frame:
		sp -= callee.frameSz
		ctx.stack.Store(sp, ctx.x29)
		ctx.stack.Store(sp+8, lr)
		a.frameAt = sp
		ctx.x29 = sp
	case callee.frameSz > 0:
		sp -= callee.frameSz
		ctx.stack.Store(sp, lr)
	}
	ctx.sp = sp
	ctx.x30 = lr
	caller.pc = ret
	ctx.acts = append(ctx.acts, a)
	return nil
}

// Return returns from the current function to its caller. It fails,
// changing nothing, at the base of a context (use ExitIRQ or ExitSDEI) or
// of a task, or if the function's saved state was corrupted.
func (c *CPU) Return() error {
	if err := c.ready(); err != nil {
		return err
	}
	ctx := c.cur()
	if len(ctx.acts) <= ctx.minDepth() {
		return fmt.Errorf("unwind: cpu%d: nothing to return from: %s is the base of the %s context",
			c.id, ctx.top().f.spec.Name, ctx.kind)
	}
	c.begin()
	defer c.end()
	return c.leave(ctx)
}

// leave runs the epilogue of ctx's top activation.
func (c *CPU) leave(ctx *context) error {
	m, t := c.m, c.task
	a := ctx.top()
	f := a.f
	if a.frameAt != 0 {
		fpv, _ := ctx.stack.Load(a.frameAt)
		lrv, _ := ctx.stack.Load(a.frameAt + 8)
		if fpv != a.savedX29 || lrv != a.saved {
			return fmt.Errorf("unwind: %s: frame record at %#x overwritten", f.spec.Name, a.frameAt)
		}
	}
	if f.scs {
		v, err := m.scs.Pop(c.id)
		if err != nil {
			return fmt.Errorf("unwind: returning from %s: %w", f.spec.Name, err)
		}
		if v != a.saved {
			_ = m.scs.Push(c.id, v)
			return fmt.Errorf("unwind: returning from %s: shadow call stack holds %#x, pushed %#x", f.spec.Name, v, a.saved)
		}
	}
	if f.pac {
		if _, err := m.cfg.Layout.Auth(a.saved, a.entrySP, m.cfg.Key, m.cfg.Algorithm, ptrauth.KeyA); err != nil {
			return fmt.Errorf("unwind: autiasp in %s: %w", f.spec.Name, err)
		}
	}
	if a.graph {
		t.graph.pop()
	}
	if a.kprobe {
		t.kprobe.pop()
	}
	ctx.sp = a.entrySP
	ctx.x29 = a.savedX29
	ctx.x30 = a.ret
	ctx.acts = ctx.acts[:len(ctx.acts)-1]
	if len(ctx.acts) > 0 {
		ctx.top().pc = a.ret
	} else if ctx.parent != nil {
		ctx.parent.top().pc = a.ret
	}
	c.free = append(c.free, a)
	return nil
}

// newActivation returns a zeroed activation, reusing one leave freed:
// Call and Return allocate nothing in the steady state.
func (c *CPU) newActivation() *activation {
	if n := len(c.free); n > 0 {
		a := c.free[n-1]
		c.free = c.free[:n-1]
		*a = activation{}
		return a
	}
	return new(activation)
}

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
	if err := c.m.scs.CheckEnter(c.id, ContextIRQ); err != nil {
		return err
	}
	need := uint64(ptRegsSize + 16 + 16 + 16 + 64)
	if ctx.sp-ctx.stack.Base < need {
		return fmt.Errorf("unwind: cpu%d: task stack overflow taking an IRQ", c.id)
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
	if m.cfg.SCS && m.cfg.Policy.SavedX18(ContextIRQ) == scs.OnInterruptedStack {
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
	irq := &context{kind: ContextIRQ, stack: c.irqStack, sp: c.irqStack.End(), x29: ctx.x29, parent: ctx}
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
	stack.Store(regs+ptRegsStackFrame+kabi.MetaTypeOff, metaPtRegs)
}

// ExitIRQ returns from the IRQ: handle_arch_irq must be the only function
// left in the IRQ context.
func (c *CPU) ExitIRQ() error {
	if err := c.ready(); err != nil {
		return err
	}
	ctx := c.cur()
	if err := c.m.scs.CheckExit(c.id, ContextIRQ); err != nil {
		return err
	}
	if len(ctx.acts) != ctx.minDepth() {
		return fmt.Errorf("unwind: cpu%d: ExitIRQ with %d functions still live above handle_arch_irq", c.id, len(ctx.acts)-1)
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
		return fmt.Errorf("unwind: cpu%d: pt_regs at %#x overwritten", c.id, regs)
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
	kind := ContextSDEINormal
	stack := c.sdeiNormal
	if critical {
		kind, stack = ContextSDEICritical, c.sdeiCritical
	}
	if err := c.m.scs.CheckEnter(c.id, kind); err != nil {
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
	if k := c.Context(); k != ContextSDEINormal && k != ContextSDEICritical {
		return c.m.scs.CheckExit(c.id, ContextSDEINormal) // says why not
	}
	if len(ctx.acts) != 2 {
		return fmt.Errorf("unwind: cpu%d: ExitSDEI with %d functions still live in the SDEI context", c.id, len(ctx.acts)-2)
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

// SCSStats returns the shadow call stack model's counters (entries, exits
// and the memory operations they cost); ok is false without an SCS.
func (m *Machine) SCSStats() (st scs.Stats, ok bool) {
	if !m.cfg.SCS {
		return st, false
	}
	return m.scs.Stats(), true
}
