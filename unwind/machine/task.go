package machine

import (
	"fmt"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/unwind"
)

// ErrTaskRunning is returned by Task.Source for a task that is running on
// a CPU: unwind it through CPU.Source or CPU.Unwind instead.
var ErrTaskRunning = fmt.Errorf("machine: task is running; unwind its CPU")

// Source returns a Source for the blocked task t, as the kernel's
// stack_trace_save_tsk unwinds a task that is not running (for
// /proc/PID/stack or sysrq-t): the FP walk starts at the pc and frame
// pointer saved when the task was switched out (its first frame has
// source TASK) and may read only the task's own stack; the SCS copy reads
// the task's shadow call stack from thread_info.scs_sp down to scs_base.
//
// The caller must keep t blocked while it uses the Source: a task that
// starts running again changes the memory under the unwinder, which then
// returns torn results or ErrCorrupt (never a panic).
func (t *Task) Source(method unwind.Method) (*unwind.Source, error) {
	m := t.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if t.cpu >= 0 {
		return nil, fmt.Errorf("%w (task %q on cpu%d)", ErrTaskRunning, t.Name, t.cpu)
	}
	method = method.Resolve(m.cfg.SCS)
	var src *unwind.Source
	switch method {
	case unwind.MethodSCS:
		if !m.cfg.SCS {
			return nil, fmt.Errorf("machine: shadow call stack copy: %w", unwind.ErrNotSupported)
		}
		v := m.scs.TaskView(t.scsState)
		src = unwind.NewSCSSource(&v, unwind.SourceOptions{Symbolizer: m.sym})
	case unwind.MethodFP:
		if !m.cfg.FramePointers {
			return nil, fmt.Errorf("machine: frame-pointer walk: %w", unwind.ErrNotSupported)
		}
		ctx := t.ctx
		var fc fp.Config // over views of the model's memory, read atomically
		fc.Stacks = []fp.Stack{{Kind: fp.Task, Low: t.stack.Base, High: t.stack.End(), Name: t.Name, Data: t.stack.View()}}
		fc.FP, fc.PC, fc.Start = ctx.x29, ctx.top().pc, fp.OriginTask
		fc.Layout, fc.TaskPtRegs = m.cfg.Layout, t.ptRegs
		if m.cfg.FGraph {
			fc.GraphTrampoline, fc.GraphStack, fc.GraphStackData = m.graphTramp, t.graph.region.Base, t.graph.region.View()
		}
		if m.cfg.Kretprobes {
			fc.KretprobeTrampoline, fc.KretprobeStack, fc.KretprobeStackData = m.kprobeTramp, t.kprobe.region.Base, t.kprobe.region.View()
		}
		src = unwind.NewFPSource(&fc, unwind.SourceOptions{Symbolizer: m.sym})
	case unwind.MethodGCS:
		return nil, fmt.Errorf("machine: the Guarded Control Stack (user space only; the model is a kernel's): %w", unwind.ErrNotSupported)
	default:
		return nil, fmt.Errorf("machine: unknown method %v", method)
	}
	return src, nil
}

// Truth returns the blocked task's ground truth, innermost first: entry 0
// is the pc it was switched out at. It returns nil for a running task
// (use CPU.Truth).
func (t *Task) Truth() []TruthFrame {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	if t.cpu >= 0 {
		return nil
	}
	return frames(truthOf(t.m, []*context{t.ctx}))
}

// Expect returns what Source(method) must unwind for the blocked task t:
// for the FP walk the saved pc and then every return address a frame
// record holds; for the SCS copy every return address its shadow call
// stack holds.
func (t *Task) Expect(method unwind.Method, opts SaveOptions) Expectation {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	if t.cpu >= 0 {
		return Expectation{Err: ErrTaskRunning}
	}
	ctxs := []*context{t.ctx}
	return expectOf(t.m, ctxs, truthOf(t.m, ctxs), method, true, opts)
}
