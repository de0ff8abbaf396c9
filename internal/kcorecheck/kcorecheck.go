// Package kcorecheck holds the comparison of a live kernel's task walks
// (/proc/kcore through unwind/kernel) with the kernel's own
// /proc/PID/stack, shared by the guest program that makes them
// (testdata/kernel/kcoreguest) and the tests that check the shipped
// results (testdata/kernel/kcore-*): the verdicts, each a named rule, and
// the results' format. The format is this repository's, not public API.
package kcorecheck

import (
	"fmt"
	"slices"
	"strings"

	"github.com/unwindkit/unwindkit/unwind/kernel"
)

// The verdicts of one comparison.
const (
	// Equal: the walk was consistent at its first attempt and printed as
	// /proc/PID/stack prints it, it is the kernel's own lines.
	Equal = "equal"
	// EqualRetried: the same, after one or more attempts that were not
	// consistent (the task ran during them).
	EqualRetried = "equal after retry"
	// RanBetween: the walk was consistent, but the task's cpu_context,
	// switch counts or on_cpu read after /proc/PID/stack differ from
	// those of the walk: the task ran between the two reads.
	RanBetween = "ran between the reads"
	// Running: the task was on a CPU: its cpu_context is stale, and
	// /proc/PID/stack walks it as racily as the live walk does.
	Running = "running: a stale cpu_context walked twice"
	// Reader: the task reading /proc/PID/stack is the one walked: the
	// kernel walks it from its own registers (the read syscall), the
	// live walk from its stale cpu_context.
	Reader = "the reader itself"
	// Inconsistent: no attempt was consistent and the task was never
	// on a CPU: what could not be read consistently, reported.
	Inconsistent = "not read consistently"
	// Exited: the task exited (or was exiting) during the round: its
	// /proc entry or its stack is gone.
	Exited = "exited"
	// Unexplained: none of the rules: a bug.
	Unexplained = "UNEXPLAINED"
)

// Comparison is one task's walk against its /proc/PID/stack.
type Comparison struct {
	Round    int    `json:"round"`
	TID      int    `json:"tid"`
	TGID     int    `json:"tgid"`
	Comm     string `json:"comm"`
	Verdict  string `json:"verdict"`
	Attempts int    `json:"attempts"`
	// Consistent is the walk's kernel.LiveResult.Consistent.
	Consistent bool     `json:"consistent"`
	Why        []string `json:"why,omitempty"`
	// Kcore are the walk's frames as /proc/PID/stack would print them
	// (kernel.ProcStack); KcoreErr how the walk ended, if not at the
	// final record.
	Kcore    []string `json:"kcore"`
	KcoreErr string   `json:"kcore_err,omitempty"`
	// Proc are the lines read from /proc (omitted when they are Kcore);
	// ProcErr the error reading them.
	Proc    []string `json:"proc,omitempty"`
	ProcErr string   `json:"proc_err,omitempty"`
	// Snapshot is set for the round whose reads the shipped snapshot
	// holds (vmcore.KeepReads).
	Snapshot bool `json:"snapshot,omitempty"`
	// SCSChecked is set when the task's shadow call stack copy was held
	// against its FP walk (CompareSCS): a kernel with shadow call stacks,
	// the task walked consistently and on no CPU. SCS are the copy's
	// entries as /proc/PID/stack would print them, SCSErr how it ended
	// if not at the stack's base, SCSNotes one line per frame only one
	// of the two has: the function and kernel.Kernel.Compare's rule.
	SCSChecked bool     `json:"scs_checked,omitempty"`
	SCS        []string `json:"scs,omitempty"`
	SCSErr     string   `json:"scs_err,omitempty"`
	SCSNotes   []string `json:"scs_notes,omitempty"`
}

// Round is one round's counts and times (nanoseconds, the guest's clock).
type Round struct {
	N        int            `json:"round"`
	Tasks    int            `json:"tasks"`
	Snapshot bool           `json:"snapshot,omitempty"`
	ListNS   int64          `json:"kcore_list_ns"` // kernel.Threads over /proc/kcore
	KcoreNS  int64          `json:"kcore_walk_ns"` // the TaskWalkLive calls and their ProcStack lines
	ProcDir  int64          `json:"proc_list_ns"`  // listing /proc/PID/task of the same tasks
	ProcNS   int64          `json:"proc_read_ns"`  // reading every /proc/.../stack
	Counts   map[string]int `json:"counts"`
	// SCSChecked counts the comparisons with SCSChecked set.
	SCSChecked int `json:"scs_checked,omitempty"`
}

// Results is what the guest program writes.
type Results struct {
	Kernel      string       `json:"kernel"`
	Uname       string       `json:"uname"`
	Rounds      []Round      `json:"rounds"`
	Comparisons []Comparison `json:"comparisons"`
}

// Verdicts lists every verdict but Unexplained.
var Verdicts = []string{Equal, EqualRetried, RanBetween, Running, Reader, Inconsistent, Exited}

// Classify decides c's verdict from the live walk lr (c.Kcore and c.Proc
// already set from it and from /proc), the task's state read after
// /proc/PID/stack (after, or afterErr), and whether the task is the
// reader. Equal lines are Equal (or EqualRetried) whatever else holds.
func Classify(c *Comparison, lr kernel.LiveResult, after kernel.LiveState, afterErr error, reader bool) {
	c.Attempts, c.Why, c.Consistent = lr.Attempts, lr.Why, lr.Consistent
	proc := c.Proc
	if proc == nil && c.ProcErr == "" {
		proc = c.Kcore
	}
	equal := c.ProcErr == "" && c.KcoreErr == "" && slices.Equal(proc, c.Kcore)
	switch {
	case equal && lr.Attempts == 1:
		c.Verdict = Equal
	case equal:
		c.Verdict = EqualRetried
	case reader:
		c.Verdict = Reader
	case c.ProcErr != "" || afterErr != nil:
		c.Verdict = Exited
	case lr.OnCPU || after.OnCPU != 0:
		c.Verdict = Running
	case !lr.Consistent:
		c.Verdict = Inconsistent
	case !lr.State.Same(after):
		c.Verdict = RanBetween
		c.Why = append(c.Why, fmt.Sprintf("after /proc: switches %d -> %d, pc %#x -> %#x, on_cpu %d", lr.State.Switches, after.Switches, lr.State.PC, after.PC, after.OnCPU))
	default:
		c.Verdict = Unexplained
	}
	if equal {
		c.Proc = nil
	}
}

// SCSUnexplained prefixes the notes of kernel.Kernel.Compare that no
// rule explains.
const SCSUnexplained = "UNEXPLAINED"

// CompareSCS holds the shadow call stack copy of the live walk lr
// against its FP walk (kernel.Kernel.Compare) when k has shadow call
// stacks and lr is consistent with the task on no CPU: a blocked task,
// whose copy runs from thread_info.scs_sp (cpu_switch_to's scs_save) down
// to the stack's base. The FP walk is what /proc/PID/stack prints (the
// comparison's verdict says whether it did); the copy must hold the
// same return addresses but for the frames the named rules explain.
func CompareSCS(c *Comparison, k *kernel.Kernel, lr kernel.LiveResult) error {
	if !k.HasSCS() || !lr.Consistent || lr.OnCPU {
		return nil
	}
	c.SCSChecked = true
	lines, err := k.ProcStack(lr.SCS)
	if err != nil {
		return err
	}
	c.SCS = lines
	if lr.SCSErr != nil {
		c.SCSErr = lr.SCSErr.Error()
	}
	cmp := k.Compare(lr.SCS, lr.Frames, lr.SCSErr, lr.Err)
	for _, r := range cmp.Rows {
		if r.InSCS == r.InFP {
			continue
		}
		f := r.FP
		if r.InSCS {
			f = r.SCS
		}
		c.SCSNotes = append(c.SCSNotes, k.Format(f.PC)+": "+r.Note)
	}
	return nil
}

// SCSProblem says what is wrong with c's shadow call stack comparison
// ("" when nothing is, or none was made): the copy ended in an error,
// or a frame only one of the copy and the FP walk has is unexplained.
func SCSProblem(c Comparison) string {
	if !c.SCSChecked {
		return ""
	}
	if c.SCSErr != "" {
		return "the SCS copy of a blocked task failed: " + c.SCSErr
	}
	for _, n := range c.SCSNotes {
		if _, note, _ := strings.Cut(n, ": "); strings.HasPrefix(note, SCSUnexplained) {
			return n
		}
	}
	return ""
}

// Check reports what is wrong with a shipped comparison: an unknown or
// Unexplained verdict, an Equal one whose lines differ (Proc given) or
// that has no lines, or a shadow call stack comparison with a problem
// (SCSProblem).
func Check(c Comparison) error {
	switch {
	case c.Verdict == Unexplained:
		return fmt.Errorf("round %d tid %d %s: unexplained difference: kcore %q (%s), proc %q (%s)", c.Round, c.TID, c.Comm, c.Kcore, c.KcoreErr, c.Proc, c.ProcErr)
	case !slices.Contains(Verdicts, c.Verdict):
		return fmt.Errorf("round %d tid %d %s: unknown verdict %q", c.Round, c.TID, c.Comm, c.Verdict)
	case (c.Verdict == Equal || c.Verdict == EqualRetried) && (c.Proc != nil || c.ProcErr != "" || c.KcoreErr != ""):
		return fmt.Errorf("round %d tid %d %s: verdict %q but the lines differ", c.Round, c.TID, c.Comm, c.Verdict)
	case c.Verdict == Equal && c.Attempts != 1, c.Verdict == EqualRetried && c.Attempts < 2:
		return fmt.Errorf("round %d tid %d %s: verdict %q after %d attempts", c.Round, c.TID, c.Comm, c.Verdict, c.Attempts)
	case SCSProblem(c) != "":
		return fmt.Errorf("round %d tid %d %s: shadow call stack: %s: scs %q, kcore %q", c.Round, c.TID, c.Comm, SCSProblem(c), c.SCS, c.Kcore)
	}
	return nil
}
