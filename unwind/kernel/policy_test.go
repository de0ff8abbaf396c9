package kernel_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/arm64"
	"github.com/unwindkit/unwindkit/internal/kcapture"
	"github.com/unwindkit/unwindkit/scs"
	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/kernel"
)

// TestOnStackPolicyMatters checks on the real kernels that the two x18
// policies are really different entry code: with call_on_irq_stack keeping
// x18 on the stack, thread_info.scs_sp of the interrupted task is stale
// (last written at a context switch), so the copy must take the on-stack
// slot; with scs_save, thread_info.scs_sp is the saved x18 and the
// on-stack slot above call_on_irq_stack's record holds something else.
func TestOnStackPolicyMatters(t *testing.T) {
	for _, c := range []struct {
		dir    string
		policy scs.Policy
	}{
		{"../../testdata/kernel/scs-6.12", scs.ThreadInfo},
		{"../../testdata/kernel/scs-6.12-onstack", scs.OnStack},
		{"../../testdata/kernel/scs-6.1", scs.ThreadInfo},
		{"../../testdata/kernel/scs-6.1-onstack", scs.OnStack},
		{"../../testdata/kernel/scs-6.12-percpu", scs.PerCPU},
	} {
		cp, err := kcapture.OpenCapture(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		s := &cp.Expected.Stops[1]
		if s.Name != "l-ipi" {
			t.Fatalf("%s: stop 1 is %s", c.dir, s.Name)
		}
		k, err := cp.Kernel(s)
		if err != nil {
			t.Fatal(err)
		}
		rep := k.Unwind(false)
		r := rep.CPUs[s.StoppedCPU]
		task, _, _ := k.Current(s.StoppedCPU)
		_, tsp, err := kernel.ThreadSCS(k, task)
		if err != nil {
			t.Fatal(err)
		}
		var slot uint64
		for i := 1; i < len(r.Frames); i++ {
			if r.Frames[i-1].Stack == fp.IRQ && r.Frames[i].Stack == fp.Task {
				slot, _ = kernel.Read64(k, r.Frames[i-1].FP+16)
			}
		}
		// The per-CPU variable exists only in the kernel built with it
		// (scs-percpu.patch); where it does, it is the saved x18 and the
		// other two places hold something else.
		var pcpu uint64
		pv := kernel.SymAddr(k, "irq_shadow_call_stack_saved_ptr")
		if (pv != 0) != (c.policy == scs.PerCPU) {
			t.Errorf("%s: irq_shadow_call_stack_saved_ptr at %#x in a %s kernel", c.dir, pv, c.policy)
		}
		if pv != 0 {
			pcpu, _ = kernel.Read64(k, pv+k.PerCPU[s.StoppedCPU])
		}
		saved := tsp
		switch c.policy {
		case scs.OnStack:
			saved = slot
		case scs.PerCPU:
			saved = pcpu
		}
		if rep.SCSPolicy != c.policy || saved == 0 || tsp == slot || pcpu != 0 && (pcpu == tsp || pcpu == slot) {
			t.Errorf("%s: policy %q, thread_info.scs_sp %#x, on-stack slot %#x, per-CPU saved %#x", c.dir, rep.SCSPolicy, tsp, slot, pcpu)
		}
		t.Logf("%s: policy %s: thread_info.scs_sp %#x, slot above call_on_irq_stack's record %#x, irq_shadow_call_stack_saved_ptr %#x", c.dir, rep.SCSPolicy, tsp, slot, pcpu)
	}
}

// overlay is memory with some ranges replaced.
type overlay struct {
	base    kernel.Memory
	patches []patch
}

type patch struct {
	at uint64
	b  []byte
}

func (o *overlay) set(at uint64, b []byte) { o.patches = append(o.patches, patch{at, b}) }

func (o *overlay) set64(at, v uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	o.set(at, b[:])
}

func (o *overlay) setCode(at uint64, code []uint32) {
	b := make([]byte, 4*len(code))
	for i, w := range code {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	o.set(at, b)
}

func (o *overlay) ReadVirt(b []byte, va uint64) error {
	err := o.base.ReadVirt(b, va)
	covered := 0
	for _, p := range o.patches {
		lo, hi := max(va, p.at), min(va+uint64(len(b)), p.at+uint64(len(p.b)))
		if lo < hi {
			copy(b[lo-va:hi-va], p.b[lo-p.at:hi-p.at])
			covered += int(hi - lo)
		}
	}
	if covered == len(b) {
		return nil
	}
	return err
}

// lIPI returns the kernel of dir's l-ipi stop (CPU 0 on its IRQ stack),
// reading through an overlay, and CPU 0's FP walk.
func lIPI(t *testing.T, dir string) (*kernel.Kernel, *overlay, []unwind.Frame) {
	t.Helper()
	cp, err := kcapture.OpenCapture(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := &cp.Expected.Stops[1]
	k, err := cp.Kernel(s)
	if err != nil || s.Name != "l-ipi" || s.StoppedCPU != 0 {
		t.Fatalf("%s: %v", s.Name, err)
	}
	o := &overlay{}
	o.base = kernel.SetMem(k, o)
	w, err := k.CPUWalk(0)
	if err != nil {
		t.Fatal(err)
	}
	fs, _, err := w.Run()
	if err != nil {
		t.Fatal(err)
	}
	return k, o, fs
}

// TestPerCPUPolicyOnRealKernel runs the SCS copy of a real on-stack
// kernel's IPI stop (scs-6.12-onstack, where thread_info.scs_sp is stale)
// with call_on_irq_stack's save rewritten to the seed's per-CPU policy
// and the interrupted x18 moved to the per-CPU variable: the copy must
// read it there and give the same frames. With a stale value there (the
// task's thread_info.scs_sp, below pt_regs.regs[18]) or 0, the copy is
// ErrCorrupt naming the field; with code of no known policy, an error.
// The old code took thread_info.scs_sp for all three, without an error.
func TestPerCPUPolicyOnRealKernel(t *testing.T) {
	k, o, fs := lIPI(t, "../../testdata/kernel/scs-6.12-onstack")
	want, _, err := k.SCSCopyCPU(0, fs)
	if err != nil || len(want) == 0 {
		t.Fatalf("on-stack copy: %d frames, %v", len(want), err)
	}
	var slot, slotAt uint64
	for i := 1; i < len(fs); i++ {
		if fs[i-1].Stack == fp.IRQ && fs[i].Stack == fp.Task {
			slotAt = fs[i-1].FP + 16
			slot, _ = kernel.Read64(k, slotAt)
		}
	}
	task, _, _ := k.Current(0)
	_, stale, err := kernel.ThreadSCS(k, task)
	if err != nil || slot == 0 || stale >= slot {
		t.Fatalf("slot %#x, thread_info.scs_sp %#x (%v)", slot, stale, err)
	}
	a := kernel.SymAddr(k, "call_on_irq_stack")
	v := kernel.SymAddr(k, "irq_shadow_call_stack_ptr") + 0x40 // the seed's variable, at an address of its own
	o.setCode(a, kernel.PerCPUCode(t, a, v))
	o.set64(slotAt, 0) // what the on-stack slot held is gone
	for _, c := range []struct {
		name  string
		saved uint64
		field string // the ErrCorrupt names it
	}{
		{"saved", slot, ""},
		{"stale", stale, "pt_regs.regs[18]"},
		{"zero", 0, "irq_shadow_call_stack_saved_ptr is 0"},
	} {
		o.set64(v+k.PerCPU[0], c.saved)
		x, perr := k.X18Policy()
		pol := x.Policy
		got, notes, err := k.SCSCopyCPU(0, fs)
		if perr != nil || pol != scs.PerCPU {
			t.Errorf("%s: policy %q, %v", c.name, pol, perr)
		}
		if c.field == "" {
			if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: %d frames (%v), want the on-stack copy's %d\n%v", c.name, len(got), err, len(want), notes)
			}
			continue
		}
		if !errors.Is(err, kernel.ErrCorrupt) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %d frames, %v; want ErrCorrupt naming %s", c.name, len(got), err, c.field)
		}
	}
	o.setCode(a, []uint32{arm64.BTIC, arm64.MrsSPEL0(arm64.X16), arm64.NOP, arm64.BLR(1)})
	if got, _, err := k.SCSCopyCPU(0, fs); err == nil || !strings.Contains(err.Error(), "x18 policy unknown") {
		t.Errorf("code of no policy: %d frames, %v", len(got), err)
	}
	if x, err := k.X18Policy(); err == nil {
		t.Errorf("code of no policy: %q", x.Policy)
	}
}

// TestPerCPUSavedPointerIsResetOnExit checks the per-CPU kernel's entry
// code as it ran (scs-6.12-percpu, scs-percpu.patch): at every stop, on
// every CPU, irq_shadow_call_stack_saved_ptr is non-zero exactly when the
// CPU's x18 is on its IRQ shadow stack (call_on_irq_stack stores it on
// entry and writes 0 on exit), and when non-zero it points into the
// shadow stack of the task current on that CPU.
func TestPerCPUSavedPointerIsResetOnExit(t *testing.T) {
	cp, err := kcapture.OpenCapture("../../testdata/kernel/scs-6.12-percpu")
	if err != nil {
		t.Fatal(err)
	}
	in, out := 0, 0
	for i := range cp.Expected.Stops {
		s := &cp.Expected.Stops[i]
		k, err := cp.Kernel(s)
		if err != nil {
			t.Fatal(err)
		}
		pv, iv := kernel.SymAddr(k, "irq_shadow_call_stack_saved_ptr"), kernel.SymAddr(k, "irq_shadow_call_stack_ptr")
		if pv == 0 || iv == 0 {
			t.Fatalf("%s: irq_shadow_call_stack_saved_ptr %#x, irq_shadow_call_stack_ptr %#x", s.Name, pv, iv)
		}
		for cpu := range k.V.CPUs {
			saved, err1 := kernel.Read64(k, pv+k.PerCPU[cpu])
			base, err2 := kernel.Read64(k, iv+k.PerCPU[cpu])
			if err1 != nil || err2 != nil {
				t.Logf("%s: cpu %d: per-CPU page not in the trimmed dump: %v %v", s.Name, cpu, err1, err2)
				continue
			}
			x18 := k.V.CPUs[cpu].Regs.X[18]
			onIRQ := x18 >= base && x18 <= base+k.V.Info.PageSize
			if onIRQ != (saved != 0) {
				t.Errorf("%s: cpu %d: x18 %#x on the IRQ shadow stack %v (base %#x), saved pointer %#x", s.Name, cpu, x18, onIRQ, base, saved)
			}
			if !onIRQ {
				out++
				continue
			}
			in++
			task, _, err := k.Current(cpu)
			if err != nil {
				t.Fatal(err)
			}
			tbase, _, err := kernel.ThreadSCS(k, task)
			if err != nil || saved < tbase || saved > tbase+k.V.Info.PageSize {
				t.Errorf("%s: cpu %d: saved pointer %#x outside the task's shadow stack at %#x (%v)", s.Name, cpu, saved, tbase, err)
			}
			t.Logf("%s: cpu %d: in an IRQ, saved x18 %#x = task's SCS base %#x + %d entries", s.Name, cpu, saved, tbase, (saved-tbase)/8)
		}
	}
	if in == 0 || out == 0 {
		t.Errorf("CPUs checked: %d inside an IRQ, %d outside; want both", in, out)
	}
}
