package kernel_test

import (
	"fmt"
	"github.com/unwindkit/unwindkit/fp"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/kcapture"
	"github.com/unwindkit/unwindkit/unwind/kernel"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// TestRunningTasksFromCPURegisters checks, at every shipped sysrq-t stop,
// that a task current on a CPU is walked (both techniques) from that
// CPU's registers, not from its stale cpu_context, whose walk gave one
// junk frame after __switch_to; and that the dump's NT_PRSTATUS pr_pid
// (QEMU: the CPU index + 1, here the pids of init and kthreadd) marks no
// task as running.
func TestRunningTasksFromCPURegisters(t *testing.T) {
	for _, dir := range captures(t) {
		cp, err := kcapture.OpenCapture(dir)
		if err != nil {
			t.Fatal(err)
		}
		for i := range cp.Expected.Stops {
			s := &cp.Expected.Stops[i]
			if s.Name != "t" {
				continue
			}
			k, err := cp.Kernel(s)
			if err != nil {
				t.Fatal(err)
			}
			ts, err := k.Tasks(0)
			if err != nil {
				t.Fatal(err)
			}
			running := 0
			for _, task := range ts {
				c := runningOn(k, task.Addr)
				for cpu, v := range k.V.CPUs {
					if v.PID == task.PID && c != cpu && c >= 0 {
						t.Errorf("%s: pid %d is pr_pid of cpu %d, but running on %d", dir, task.PID, cpu, c)
					}
				}
				if c < 0 {
					continue
				}
				running++
				cw, err := k.CPUWalk(c)
				if err != nil {
					t.Fatal(err)
				}
				want, _, werr := cw.Run()
				tw, err := k.TaskWalk(task)
				if err != nil {
					t.Errorf("%s: running task %d %s: %v", dir, task.PID, task.Comm, err)
					continue
				}
				got, _, gerr := tw.Run()
				if fmt.Sprint(kcapture.Strings(k, got), gerr) != fmt.Sprint(kcapture.Strings(k, want), werr) || tw.Start != fp.OriginStopPC {
					t.Errorf("%s: running task %d %s on cpu %d: walk %v (%v), the CPU's %v (%v)", dir, task.PID, task.Comm, c, kcapture.Strings(k, got), gerr, kcapture.Strings(k, want), werr)
				}
				if c != k.RunningOn(task.Addr) || !strings.Contains(strings.Join(tw.Notes, "; "), fmt.Sprintf("current on cpu %d", c)) {
					t.Errorf("%s: running task %d: RunningOn %d, notes %q", dir, task.PID, k.RunningOn(task.Addr), tw.Notes)
				}
				if k.HasSCS() {
					scsT, errT := k.SCSCopyTask(task)
					scsC, _, errC := k.SCSCopyCPU(c, want)
					if fmt.Sprint(kcapture.Strings(k, scsT), errT) != fmt.Sprint(kcapture.Strings(k, scsC), errC) {
						t.Errorf("%s: running task %d: SCS copy %v (%v), the CPU's %v (%v)", dir, task.PID, kcapture.Strings(k, scsT), errT, kcapture.Strings(k, scsC), errC)
					}
				}
				t.Logf("%s: pid %d %s running on cpu %d: %d frames from the CPU's registers", dir, task.PID, task.Comm, c, len(got))
			}
			if running != 2 {
				t.Errorf("%s: %d tasks running, want 2 (the writer and dd)", dir, running)
			}
		}
	}
}

// TestRunningInUserMode checks that a task current on a CPU that was in
// user mode is reported with no walk: its kernel stack holds no frame and
// its cpu_context is stale (scs-6.1-onstack's l-ipi stop: cpu 1 in EL0).
func TestRunningInUserMode(t *testing.T) {
	cp, err := kcapture.OpenCapture("../../testdata/kernel/scs-6.1-onstack")
	if err != nil {
		t.Fatal(err)
	}
	s := &cp.Expected.Stops[1]
	k, err := cp.Kernel(s)
	if err != nil {
		t.Fatal(err)
	}
	cur, _, err := k.Current(1)
	if err != nil || k.V.CPUs[1].Regs.Pstate&0xc != 0 {
		t.Fatalf("cpu 1: current %#x (%v), pstate %#x: want a CPU in EL0", cur, err, k.V.CPUs[1].Regs.Pstate)
	}
	task := kernel.Task{Addr: cur, PID: 1, Comm: "x"}
	w, err := k.TaskWalk(task)
	if err == nil || w != nil || !strings.Contains(err.Error(), "user mode on cpu 1") {
		t.Errorf("TaskWalk: %v, %v", w, err)
	}
	if fs, err := k.SCSCopyTask(task); err == nil || len(fs) != 0 || !strings.Contains(err.Error(), "user mode on cpu 1") {
		t.Errorf("SCSCopyTask: %v, %v", fs, err)
	}
}

// runningOn is the CPU whose current task is task, or -1.
func runningOn(k *kernel.Kernel, task uint64) int {
	for c := range k.V.CPUs {
		if cur, _, err := k.Current(c); err == nil && cur == task {
			return c
		}
	}
	return -1
}

// TestCurrentFromStackHoldingSP checks the last way to find a CPU's
// current task, for dumps without __entry_task and without SP_EL0: the
// task of the task list whose stack holds the CPU's sp. On Debian 6.12's
// sysrq-t stop with __entry_task removed from the symbols, it finds the
// same tasks as per_cpu(__entry_task) (both CPUs run on task stacks).
func TestCurrentFromStackHoldingSP(t *testing.T) {
	cp, err := kcapture.OpenCapture("../../testdata/kernel/deb-6.12")
	if err != nil {
		t.Fatal(err)
	}
	s := &cp.Expected.Stops[2]
	exact, err := cp.Kernel(s)
	if err != nil || s.Name != "t" {
		t.Fatal(s.Name, err)
	}
	var syms []vmcore.KSym
	for _, y := range cp.Syms {
		if y.Name != "__entry_task" {
			syms = append(syms, y)
		}
	}
	k, err := kernel.New(exact.V, syms, kernel.Options{BTF: exact.BTF, BTFFrom: "the same dump"})
	if err != nil {
		t.Fatal(err)
	}
	for cpu := range k.V.CPUs {
		want, _, err1 := exact.Current(cpu)
		got, how, err2 := k.Current(cpu)
		if err1 != nil || err2 != nil || got != want || !strings.Contains(how, "stack holds the CPU's sp") {
			t.Errorf("cpu %d: current %#x (%s, %v), per_cpu(__entry_task) %#x (%v)", cpu, got, how, err2, want, err1)
		}
	}
	// A CPU whose sp is on no task's stack: unknown, and said why.
	k.V.CPUs[0].Regs.SP = 0x1000
	if cur, _, err := k.Current(0); err == nil || !strings.Contains(err.Error(), "on no stack of the task list") {
		t.Errorf("sp on no stack: %#x, %v", cur, err)
	}
}
