package kernel

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/unwindkit/unwindkit/fp"
)

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
	// cpu_context's fp, sp and pc are one read, nvcsw and nivcsw another
	// (neighbours in task_struct): fewer reads of /proc/kcore.
	cx, err := k.readWords(task, ctx+k.off["cpu_context.fp"], ctx+k.off["cpu_context.sp"], ctx+k.off["cpu_context.pc"])
	if err != nil {
		return s, fmt.Errorf("task %#x: cpu_context: %w", task, err)
	}
	s.FP, s.SP, s.PC = cx[0], cx[1], cx[2]
	sw, err := k.readWords(task, nv, niv)
	if err != nil {
		return s, fmt.Errorf("task %#x: nvcsw/nivcsw: %w", task, err)
	}
	s.Switches = sw[0] + sw[1]
	if o, ok := k.off["task_struct.on_cpu"]; ok {
		var w [4]byte
		if err := k.mem.ReadVirt(w[:], task+o); err != nil {
			return s, fmt.Errorf("task %#x: on_cpu: %w", task, err)
		}
		s.OnCPU = binary.LittleEndian.Uint32(w[:])
	}
	return s, nil
}

// maxWordSpan is the widest span readWords reads at once.
const maxWordSpan = 256

// readWords reads the 64-bit words at base+offs: in one read when they
// lie within maxWordSpan bytes, else one by one.
func (k *Kernel) readWords(base uint64, offs ...uint64) ([]uint64, error) {
	lo, hi := offs[0], offs[0]
	for _, o := range offs {
		lo, hi = min(lo, o), max(hi, o)
	}
	out := make([]uint64, len(offs))
	if hi-lo <= maxWordSpan {
		b := make([]byte, hi-lo+8)
		if err := k.mem.ReadVirt(b, base+lo); err != nil {
			return nil, err
		}
		for i, o := range offs {
			out[i] = binary.LittleEndian.Uint64(b[o-lo:])
		}
		return out, nil
	}
	for i, o := range offs {
		v, err := k.read64(base + o)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
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
	if at, changed := k.recordsChanged(records, copies); changed {
		why = append(why, fmt.Sprintf("the frame record at %#x changed on reading it again", at))
	}
	if len(why) == 0 {
		return "", nil
	}
	return joinWhy(why), nil
}

// recordsChanged reads the frame records again, the span from the first
// to the last at once when it is at most a stack, and reports the first
// that differs from what the walk read.
func (k *Kernel) recordsChanged(records [][2]uint64, copies [][]byte) (uint64, bool) {
	if len(records) == 0 {
		return 0, false
	}
	lo, hi := records[0][0], records[0][0]
	for _, r := range records {
		lo, hi = min(lo, r[0]), max(hi, r[0])
	}
	if hi-lo <= k.ThreadSize {
		span := make([]byte, hi-lo+16)
		if err := k.mem.ReadVirt(span, lo); err == nil {
			for _, r := range records {
				if !bytes.Equal(span[r[0]-lo:r[0]-lo+16], copies[r[1]]) {
					return r[0], true
				}
			}
			return 0, false
		}
	}
	var b [16]byte
	for _, r := range records {
		if err := k.mem.ReadVirt(b[:], r[0]); err != nil || !bytes.Equal(b[:], copies[r[1]]) {
			return r[0], true
		}
	}
	return 0, false
}

func joinWhy(why []string) string {
	s := why[0]
	for _, w := range why[1:] {
		s += "; " + w
	}
	return s
}
