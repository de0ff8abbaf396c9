package kernel

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/unwindkit/unwindkit/fp"
)

// A live kernel (/proc/kcore, [vmcore.Vmcore.Live]) changes while it is
// read. What a live walk promises
//
// A task walk of a live kernel reads the task's cpu_context, its
// context-switch counts (nvcsw + nivcsw, incremented each time the task
// is switched out) and its on_cpu flag, then the stack, then all of them
// again, and then the frame records the walk used once more
// ([Kernel.TaskWalkLive]). The walk is Consistent only when the task was
// on no CPU at both reads and the context, the counts and every record
// used are unchanged: a task that is not on a CPU and is not switched
// out again in between did not run in between (to run it is switched in,
// which sets on_cpu, and out, which counts), so its own stack did not
// change and the frames are those of one moment, the moment it last
// blocked. Otherwise the walk is repeated, a bounded number of times,
// and the last attempt is reported with what differed on each attempt.
// A task on a CPU is never Consistent: its cpu_context is stale (written
// when it last blocked) and its stack changes under the reader, so its
// frames, like the kernel's own /proc/PID/stack of a running task, are
// of no one moment; it is reported as OnCPU. Nothing is promised about
// two tasks: each is consistent on its own, at its own moment.

// liveKeys are the task_struct members a live walk reads besides those of
// the task list (nvcsw and nivcsw are required, on_cpu when BTF has it).
var liveKeys = []string{"task_struct.nvcsw", "task_struct.nivcsw", "task_struct.on_cpu"}

// LiveResult is a task walked from a live kernel ([Kernel.TaskWalkLive]).
type LiveResult struct {
	// TaskResult is the last attempt's walk; its Task holds the
	// cpu_context the walk started from (read at that attempt).
	TaskResult
	// Attempts is the number of walks made (at least 1).
	Attempts int
	// Consistent is set when the last attempt saw the task on no CPU,
	// with the same cpu_context and switch counts before and after the
	// walk and the same frame records on reading them again.
	Consistent bool
	// OnCPU is set when the task was on a CPU at a read of the last
	// attempt: its cpu_context is stale.
	OnCPU bool
	// State is the task's state at the last attempt's first read.
	State LiveState
	// Why says, per attempt that was not consistent, what differed.
	Why []string
}

// LiveState is what a live walk reads of a task before and after the
// walk ([Kernel.LiveState]).
type LiveState struct {
	// FP, SP and PC are the task's cpu_context.
	FP, SP, PC uint64
	// Switches is nvcsw + nivcsw.
	Switches uint64
	// OnCPU is task->on_cpu (0 when BTF lacks the member).
	OnCPU uint32
}

// Same reports whether s and o show a task that did not run between the
// two reads: on no CPU at either, the same cpu_context and switch counts.
func (s LiveState) Same(o LiveState) bool {
	return s.OnCPU == 0 && o.OnCPU == 0 && s.FP == o.FP && s.SP == o.SP && s.PC == o.PC && s.Switches == o.Switches
}

// LiveState reads the cpu_context, the switch counts and on_cpu of the
// task_struct at task.
func (k *Kernel) LiveState(task uint64) (LiveState, error) { return k.liveState(task) }

func (k *Kernel) liveState(task uint64) (LiveState, error) {
	var s LiveState
	ctx, err := k.offset("task_struct.thread.cpu_context")
	if err != nil {
		return s, err
	}
	nv, err1 := k.offset("task_struct.nvcsw")
	niv, err2 := k.offset("task_struct.nivcsw")
	if err1 != nil || err2 != nil {
		return s, fmt.Errorf("task %#x: switch counts unknown: task_struct.nvcsw/nivcsw not in the BTF", task)
	}
	for _, f := range []struct {
		dst *uint64
		off uint64
	}{{&s.FP, ctx + k.off["cpu_context.fp"]}, {&s.SP, ctx + k.off["cpu_context.sp"]}, {&s.PC, ctx + k.off["cpu_context.pc"]}} {
		if *f.dst, err = k.read64(task + f.off); err != nil {
			return s, fmt.Errorf("task %#x: cpu_context: %w", task, err)
		}
	}
	a, err := k.read64(task + nv)
	if err != nil {
		return s, fmt.Errorf("task %#x: nvcsw: %w", task, err)
	}
	b, err := k.read64(task + niv)
	if err != nil {
		return s, fmt.Errorf("task %#x: nivcsw: %w", task, err)
	}
	s.Switches = a + b
	if o, ok := k.off["task_struct.on_cpu"]; ok {
		var w [4]byte
		if err := k.mem.ReadVirt(w[:], task+o); err != nil {
			return s, fmt.Errorf("task %#x: on_cpu: %w", task, err)
		}
		s.OnCPU = binary.LittleEndian.Uint32(w[:])
	}
	return s, nil
}

// DefaultLiveAttempts is how often TaskWalkLive walks a task at most
// when given 0.
const DefaultLiveAttempts = 4

// TaskWalkLive walks task t of a live kernel from its cpu_context (as
// stack_trace_save_tsk does for a task other than the caller, whether or
// not it runs), at most attempts times (0: DefaultLiveAttempts) until a
// walk is consistent (see the package's "what a live walk promises"),
// and with the shadow call stack copy on kernels that have one. t's
// cpu_context is read again at each attempt; t's Addr, PID and Comm are
// kept.
func (k *Kernel) TaskWalkLive(t Task, attempts int) LiveResult {
	if attempts <= 0 {
		attempts = DefaultLiveAttempts
	}
	var r LiveResult
	for r.Attempts < attempts {
		r.Attempts++
		why, err := k.liveAttempt(t, &r)
		if err != nil {
			r.Why = append(r.Why, fmt.Sprintf("attempt %d: %v", r.Attempts, err))
			r.Consistent, r.TaskResult.Result = false, Result{End: fp.EndError, Err: err}
			return r // the task's own fields cannot be read: retrying reads them again to no end
		}
		if why == "" {
			r.Consistent = true
			return r
		}
		r.Why = append(r.Why, fmt.Sprintf("attempt %d: %s", r.Attempts, why))
		if r.OnCPU && r.Attempts >= 2 {
			return r // running: it stays on its CPU, retrying does not help
		}
	}
	return r
}

// liveAttempt is one attempt of TaskWalkLive: "" when it was consistent,
// else what differed.
func (k *Kernel) liveAttempt(t Task, r *LiveResult) (string, error) {
	s0, err := k.liveState(t.Addr)
	if err != nil {
		return "", err
	}
	t.FP, t.SP, t.PC = s0.FP, s0.SP, s0.PC
	r.Task, r.State, r.OnCPU = t, s0, s0.OnCPU != 0
	st, err := k.TaskStack(t.Addr)
	var w *Walk
	if err == nil {
		w = &Walk{Mem: k.mem, ABI: k.ABI, Regs: k.Regs, Stacks: []Stack{st}, TaskPtRegs: fp.TaskPtRegsAddr(st.High, k.Regs),
			FP: t.FP, PC: t.PC, Start: fp.OriginTask, Layout: k.V.Layout}
	}
	var res Result
	var records [][2]uint64 // {address, index into the read copy}
	var copies [][]byte
	if err != nil {
		res = Result{End: fp.EndError, Err: err}
	} else {
		fs, end, werr := w.Run()
		res = Result{Walk: w, Frames: fs, End: end, Err: werr}
		// The frame records the walk used, as it read them.
		addrs := []uint64{w.FP}
		for _, f := range fs {
			addrs = append(addrs, f.FP)
		}
		for _, a := range addrs {
			if a == 0 || w.read == nil {
				continue
			}
			for _, s := range w.read.stacks {
				if a >= s.Low && a+16 <= s.High && a+16 > a {
					records = append(records, [2]uint64{a, uint64(len(copies))})
					copies = append(copies, s.Data[a-s.Low:a-s.Low+16])
					break
				}
			}
		}
		w.release()
		if end == fp.EndFinal {
			var b [16]byte
			if k.mem.ReadVirt(b[:], w.TaskPtRegs+w.Regs.StackFrame) == nil {
				res.Final = [2]uint64{binary.LittleEndian.Uint64(b[:]), binary.LittleEndian.Uint64(b[8:])}
			}
		}
	}
	r.Result = res
	if k.HasSCS() {
		r.SCS, r.SCSErr = k.SCSCopyTask(t)
	} else {
		r.SCS, r.SCSErr = nil, fmt.Errorf("%w: no shadow call stack", ErrNotSupported)
	}
	s1, err := k.liveState(t.Addr)
	if err != nil {
		return "", err
	}
	var why []string
	if s0.OnCPU != 0 || s1.OnCPU != 0 {
		r.OnCPU = true
		why = append(why, fmt.Sprintf("on a CPU (on_cpu %d, then %d): its cpu_context is stale", s0.OnCPU, s1.OnCPU))
	}
	if s1.Switches != s0.Switches {
		why = append(why, fmt.Sprintf("switched out %d time(s) during the walk (nvcsw+nivcsw %d, then %d)", s1.Switches-s0.Switches, s0.Switches, s1.Switches))
	}
	if s1.FP != s0.FP || s1.SP != s0.SP || s1.PC != s0.PC {
		why = append(why, fmt.Sprintf("cpu_context changed (fp %#x sp %#x pc %#x, then fp %#x sp %#x pc %#x)", s0.FP, s0.SP, s0.PC, s1.FP, s1.SP, s1.PC))
	}
	var b [16]byte
	for _, rec := range records {
		if err := k.mem.ReadVirt(b[:], rec[0]); err != nil || !bytes.Equal(b[:], copies[rec[1]]) {
			why = append(why, fmt.Sprintf("the frame record at %#x changed on reading it again", rec[0]))
			break
		}
	}
	if len(why) == 0 {
		return "", nil
	}
	return joinWhy(why), nil
}

func joinWhy(why []string) string {
	s := why[0]
	for _, w := range why[1:] {
		s += "; " + w
	}
	return s
}
