package kernel_test

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/kcapture"
	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/kernel"
)

// TestDrgn03Tasks holds the FP walks of the 7.2 capture to a second
// reference nobody here wrote: drgn 0.3 (Debian sid's python3-drgn
// 0.3.0-1, which unwinds with the vmlinux's DWARF CFI), over the raw
// vmcores of the three stops (drgn03tasks.py; shipped as
// deb-7.2/drgn-STOP.txt.gz). Every task of sysrq-t's dump (stop t) not
// running on a CPU (57: the blocked ones and the runnable ones waiting)
// has exactly drgn's frames, pc for pc. The tasks running on a CPU at each
// stop (walked from the CPU's registers, across the IRQ stack and
// pt_regs) have drgn's frames too, except by one rule: where an
// exception interrupted a function before it linked its frame record,
// drgn (CFI) has its caller from pt_regs' regs[30] and the walk, like
// the kernel's unwinder (which calls the lr after a PT_REGS boundary
// unreliable), does not; the extra frame's pc is that regs[30].
func TestDrgn03Tasks(t *testing.T) {
	dir := "../../testdata/kernel/deb-7.2"
	cp, err := kcapture.OpenCapture(dir)
	if err != nil {
		t.Fatal(err)
	}
	blocked, running, lrs := 0, 0, 0
	for i := range cp.Expected.Stops {
		s := &cp.Expected.Stops[i]
		dl := readDrgn(t, fmt.Sprintf("%s/drgn-%s.txt.gz", dir, s.Name))
		ver, dt := dl.version, dl.tasks
		if ver != "0.3.0" {
			t.Errorf("%s: drgn %q, want 0.3.0", s.Name, ver)
		}
		k, err := cp.Kernel(s)
		if err != nil {
			t.Fatal(err)
		}
		// The trimmed dumps hold the task list only at stop t; at every
		// stop each CPU's current task is known (per_cpu(__entry_task)).
		rep := k.Unwind(s.Name == "t")
		for _, c := range rep.CPUs {
			cur, _, err := k.Current(c.CPU)
			d := dt[cur]
			if err != nil || d == nil {
				t.Errorf("%s: cpu %d: current task %#x (%v) not in drgn's list", s.Name, c.CPU, cur, err)
				continue
			}
			if c.End != fp.EndFinal || d.err != "" {
				// A CPU in user mode has no kernel frames; drgn then has
				// the user pc or an error.
				if pstate := k.V.CPUs[c.CPU].Regs.Pstate; pstate>>2&3 != 0 {
					t.Errorf("%s: cpu %d (EL%d): walk %v %v, drgn %q", s.Name, c.CPU, pstate>>2&3, c.End, c.Err, d.err)
				}
				continue
			}
			running++
			n, err := drgnExtraLRs(k, c.Frames, d.pcs())
			if err != nil {
				t.Errorf("%s: cpu %d, task %d %s: %v\nwalk %s\ndrgn %s", s.Name, c.CPU, d.pid, d.comm, err, syms(k, pcsOf(c.Frames)), syms(k, d.pcs()))
			}
			lrs += n
		}
		if s.Name != "t" {
			continue
		}
		// drgn's for_each_task follows init_task.tasks and leaves out
		// init_task itself (swapper/0, pid 0), which the walk lists.
		if rep.TasksErr != nil || len(dt) != len(rep.Tasks)-1 {
			t.Errorf("t: drgn lists %d tasks, the walk %d besides init_task (%v)", len(dt), len(rep.Tasks)-1, rep.TasksErr)
		}
		for _, tr := range rep.Tasks {
			if tr.Task.PID == 0 {
				continue
			}
			d := dt[tr.Task.Addr]
			if d == nil || d.comm != tr.Task.Comm || d.pid != tr.Task.PID {
				t.Errorf("t: task %d %s is not in drgn's list", tr.Task.PID, tr.Task.Comm)
				continue
			}
			if tr.Running {
				continue // its CPU's walk, above
			}
			if got := pcsOf(tr.Frames); tr.End != fp.EndFinal || d.err != "" || !slices.Equal(got, d.pcs()) {
				t.Errorf("t: blocked task %d %s: walk %v %v, drgn %q\nwalk %s\ndrgn %s", tr.Task.PID, tr.Task.Comm, tr.End, tr.Err, d.err, syms(k, got), syms(k, d.pcs()))
				continue
			}
			blocked++
		}
	}
	if blocked != 57 || running == 0 || lrs == 0 {
		t.Errorf("blocked tasks equal to drgn's %d (want 57), running %d, extra lr frames %d", blocked, running, lrs)
	}
	t.Logf("drgn 0.3: %d tasks not running at stop t have its frames exactly; %d walks of running tasks equal it but for %d callers from an interrupted prologue's regs[30]", blocked, running, lrs)
}

// drgnExtraLRs checks that drgn's pcs are the walk's frames plus, right
// after some exception boundaries (an OriginRegsPC frame), the pc in
// regs[30] of the pt_regs crossed, and returns how many it added.
func drgnExtraLRs(k *kernel.Kernel, fs []unwind.Frame, pcs []uint64) (int, error) {
	n, j := 0, 0
	for i, f := range fs {
		if j >= len(pcs) || pcs[j] != f.PC {
			return n, fmt.Errorf("walk frame %d %s, drgn frame %d", i, k.Format(f.PC), j)
		}
		j++
		if f.Origin != fp.OriginRegsPC || j >= len(pcs) || i+1 < len(fs) && pcs[j] == fs[i+1].PC {
			continue
		}
		// The meta record the walk followed is where the previous
		// frame's fp pointed; regs[30] is 29*8+8 into its pt_regs.
		var b [8]byte
		regs := fs[i-1].FP - k.Regs.StackFrame
		if err := k.V.ReadVirt(b[:], regs+k.Regs.X29+8); err != nil {
			return n, err
		}
		if lr := k.V.Layout.Strip(binary.LittleEndian.Uint64(b[:])); lr != pcs[j] {
			return n, fmt.Errorf("drgn frame %d %s after the boundary at %s is not pt_regs' regs[30] %s", j, k.Format(pcs[j]), k.Format(f.PC), k.Format(lr))
		}
		// The interrupted function had not linked its record: the
		// prologue analysis of its code in the dump says so.
		if p, err := k.PrologueAt(f.PC); err != nil || p.LinkedAt >= 0 || p.X30 != kernel.X30Live {
			return n, fmt.Errorf("drgn's extra frame %s after %s, whose prologue is %v (%v)", k.Format(pcs[j]), k.Format(f.PC), p, err)
		}
		j++
		n++
	}
	if j != len(pcs) {
		return n, fmt.Errorf("drgn has %d frames more", len(pcs)-j)
	}
	return n, nil
}

func pcsOf(fs []unwind.Frame) []uint64 {
	var out []uint64
	for _, f := range fs {
		out = append(out, f.PC)
	}
	return out
}

func syms(k *kernel.Kernel, pcs []uint64) string {
	var b strings.Builder
	for _, pc := range pcs {
		b.WriteString(k.Format(pc))
		b.WriteByte(' ')
	}
	return b.String()
}
