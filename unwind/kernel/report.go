package kernel

import (
	"encoding/binary"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/scs"
	"github.com/unwindkit/unwindkit/unwind"
)

// Result is one walk's outcome.
type Result struct {
	// Walk is the walk's input (nil when it could not be set up). It
	// does not keep the stacks' bytes it read (a report of every task
	// would hold THREAD_SIZE per task): a later Run reads them again.
	Walk *Walk
	// Frames, End and Err are what Walk.Run returned.
	Frames []unwind.Frame
	End    fp.End
	Err    error
	// Final is the final frame record {fp, lr} at
	// &task_pt_regs(task)->stackframe, read after a walk that ended
	// there (up to 6.12 the kernel's unwinder never reads it: EL0 entry
	// zeroes it; since 6.13 it is the {0, 0} head of the FINAL meta
	// record the walk ended at).
	Final [2]uint64
}

// CPUResult is the walk of one CPU from its dumped registers, and its
// shadow call stack copy ([Kernel.SCSCopyCPU]).
type CPUResult struct {
	// CPU is the CPU's index in the dump.
	CPU int
	Result
	// SCS, SCSNotes and SCSErr are what Kernel.SCSCopyCPU returned.
	SCS      []unwind.Frame
	SCSNotes []string
	SCSErr   error
	// Prologue is how far the function holding the CPU's pc got through
	// its prologue ([Kernel.PrologueAt]); PrologueErr says why it is
	// unknown.
	Prologue    Prologue
	PrologueErr error
}

// TaskResult is the walk of one task from its cpu_context.
type TaskResult struct {
	// Task is the task walked.
	Task Task
	// Running is set for tasks that are some CPU's current task: their
	// cpu_context is stale.
	Running bool
	Result
	// SCS and SCSErr are what Kernel.SCSCopyTask returned.
	SCS    []unwind.Frame
	SCSErr error
}

// Report is every walk of one dump.
type Report struct {
	// CPUs holds one walk per CPU of the dump.
	CPUs []CPUResult
	// Tasks holds one walk per task of the task list; of a live kernel
	// or a snapshot of one ([vmcore.Vmcore.Virtual]) one per thread ([Kernel.Threads]), each the
	// last attempt of [Kernel.TaskWalkLive].
	Tasks []TaskResult
	// Live holds, for a live kernel, the TaskWalkLive result of each of
	// Tasks (same order): whether it was read consistently, and why not.
	Live []LiveResult
	// TasksErr is the error of the task-list walk.
	TasksErr error
	// SCSPolicy is where call_on_irq_stack keeps the interrupted x18
	// ([Kernel.X18Policy]), on kernels with shadow call stacks whose
	// policy was recognised (else the zero Policy, scs.ThreadInfo, and
	// SCSPolicyErr says why).
	SCSPolicy    scs.Policy
	SCSPolicyErr error
}

func run(w *Walk, err error) Result {
	if err != nil {
		return Result{End: fp.EndError, Err: err}
	}
	fs, end, err := w.Run()
	w.release()
	r := Result{Walk: w, Frames: fs, End: end, Err: err}
	if end == fp.EndFinal && w.TaskPtRegs != 0 {
		var b [16]byte
		if w.Mem.ReadVirt(b[:], w.TaskPtRegs+w.Regs.StackFrame) == nil {
			r.Final = [2]uint64{binary.LittleEndian.Uint64(b[:]), binary.LittleEndian.Uint64(b[8:])}
		} else {
			r.Final = [2]uint64{^uint64(0), ^uint64(0)}
		}
	}
	return r
}

// Unwind walks every CPU from its registers and, with tasks, every task
// of the task list from its cpu_context, each with both techniques (the
// shadow call stack copy fails with ErrNotSupported on kernels without
// CONFIG_SHADOW_CALL_STACK). A live kernel (/proc/kcore, or a snapshot
// of one: [vmcore.Vmcore.Virtual]) has no CPU registers: every thread is
// walked from its cpu_context with TaskWalkLive, as /proc/PID/stack
// walks it.
func (k *Kernel) Unwind(tasks bool) *Report {
	r := &Report{}
	if k.HasSCS() {
		var x X18Save
		x, r.SCSPolicyErr = k.X18Policy()
		r.SCSPolicy = x.Policy
	}
	var current []uint64
	for c := range k.V.CPUs {
		w, err := k.CPUWalk(c)
		cr := CPUResult{CPU: c, Result: run(w, err)}
		cr.SCS, cr.SCSNotes, cr.SCSErr = k.SCSCopyCPU(c, cr.Frames)
		cr.Prologue, cr.PrologueErr = k.PrologueAt(k.V.CPUs[c].Regs.PC)
		r.CPUs = append(r.CPUs, cr)
		t, _, _ := k.Current(c)
		current = append(current, t)
	}
	if !tasks {
		return r
	}
	var start uint64
	for _, t := range current {
		if t != 0 {
			start = t
			break
		}
	}
	if k.V.Virtual {
		ts, err := k.Threads(start)
		r.TasksErr = err
		for _, t := range ts {
			lr := k.TaskWalkLive(t, 0)
			lr.Running = lr.OnCPU
			r.Tasks = append(r.Tasks, lr.TaskResult)
			r.Live = append(r.Live, lr)
		}
		return r
	}
	ts, err := k.Tasks(start)
	r.TasksErr = err
	for _, t := range ts {
		tr := TaskResult{Task: t}
		for _, c := range current {
			tr.Running = tr.Running || c == t.Addr
		}
		w, err := k.TaskWalk(t)
		tr.Result = run(w, err)
		tr.SCS, tr.SCSErr = k.SCSCopyTask(t)
		r.Tasks = append(r.Tasks, tr)
	}
	return r
}
