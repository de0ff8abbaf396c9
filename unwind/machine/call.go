// Calls and returns: a function's prologue and epilogue as the CPU runs them (activations, return stacks, task switch).

package machine

import (
	"errors"
	"fmt"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/mem"
	"github.com/unwindkit/unwindkit/ptrauth"
	"github.com/unwindkit/unwindkit/scs"
)

// retStack is a return stack in modelled memory: count word, then {ret, fp}.
type retStack struct {
	region *mem.Region
	n      int
}

func (r *retStack) push(ret, frame uint64) error {
	if r.n >= retStackEntries {
		return errors.New("machine: return stack full")
	}
	a := r.region.Base + fp.RetStackEntriesOff + fp.RetStackEntrySize*uint64(r.n)
	r.region.Store(a, ret)
	r.region.Store(a+8, frame)
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
	if c.kind == CtxIRQ {
		return 1
	}
	return 2
}

// Switch makes t the CPU's running task (cpu_switch_to). The CPU must be in
// task context; t must not be running on another CPU.
func (c *CPU) Switch(t *Task) error {
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if t == nil || t.m != m {
		return errors.New("machine: Switch to a task of another machine")
	}
	if k := c.Context(); k != CtxTask {
		return fmt.Errorf("%w: cpu%d: Switch in %s context", scs.ErrNesting, c.id, k)
	}
	if t.cpu >= 0 && t.cpu != c.id {
		return fmt.Errorf("machine: task %q is running on cpu%d", t.Name, t.cpu)
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

// ID returns the CPU number.
func (c *CPU) ID() int { return c.id }

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
		return fmt.Errorf("machine: cpu%d has no task: Switch first", c.id)
	}
	return nil
}

// begin and end bracket a state change in the CPU's one sequence lock,
// the SCS model's (through internal/scsdriver): the count is odd in between, so
// concurrent unwinders retry rather than read a torn state, and the
// model's own changes inside the bracket are part of the same change.
func (c *CPU) begin() { c.m.drv.Begin(c.id) }

func (c *CPU) end() { c.publish(); c.m.drv.End(c.id) }

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
			return fmt.Errorf("machine: %s is a leaf and calls nothing", caller.f.spec.Name)
		}
		return fmt.Errorf("machine: %s has no call site for %q", caller.f.spec.Name, name)
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
		return fmt.Errorf("machine: %s stack overflow calling %s", ctx.kind, callee.spec.Name)
	}
	if callee.probed && t.kprobe.n >= retStackEntries || callee.traced && t.graph.n >= retStackEntries {
		return fmt.Errorf("machine: return stack full calling %s", callee.spec.Name)
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
			return fmt.Errorf("machine: calling %s: %w", callee.spec.Name, err)
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
		return fmt.Errorf("machine: cpu%d: nothing to return from: %s is the base of the %s context",
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
			return fmt.Errorf("machine: %s: frame record at %#x overwritten", f.spec.Name, a.frameAt)
		}
	}
	if f.scs {
		v, err := m.scs.Pop(c.id)
		if err != nil {
			return fmt.Errorf("machine: returning from %s: %w", f.spec.Name, err)
		}
		if v != a.saved {
			_ = m.scs.Push(c.id, v)
			return fmt.Errorf("machine: returning from %s: shadow call stack holds %#x, pushed %#x", f.spec.Name, v, a.saved)
		}
	}
	if f.pac {
		if _, err := m.cfg.Layout.Auth(a.saved, a.entrySP, m.cfg.Key, m.cfg.Algorithm, ptrauth.KeyIA); err != nil {
			return fmt.Errorf("machine: autiasp in %s: %w", f.spec.Name, err)
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
