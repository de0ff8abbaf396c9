package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/unwindkit/unwindkit/unwind"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/arm64"
	"github.com/unwindkit/unwindkit/scs"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
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
	} {
		cp, err := OpenCapture(c.dir)
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
		_, tsp, err := k.threadSCS(task)
		if err != nil {
			t.Fatal(err)
		}
		var slot uint64
		for i := 1; i < len(r.Frames); i++ {
			if r.Frames[i-1].Stack == fp.IRQ && r.Frames[i].Stack == fp.Task {
				slot, _ = k.read64(r.Frames[i-1].FP + 16)
			}
		}
		saved := tsp
		if c.policy == scs.OnStack {
			saved = slot
		}
		if rep.SCSPolicy != c.policy || tsp == slot || saved == 0 {
			t.Errorf("%s: policy %q, thread_info.scs_sp %#x, on-stack slot %#x", c.dir, rep.SCSPolicy, tsp, slot)
		}
		t.Logf("%s: policy %s: thread_info.scs_sp %#x, slot above call_on_irq_stack's record %#x", c.dir, rep.SCSPolicy, tsp, slot)
	}
}

// overlay is memory with some ranges replaced.
type overlay struct {
	base    Memory
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

// perCPUCode is call_on_irq_stack's start with the seed's per-CPU policy
// at a: str_this_cpu of x18 into the variable at v.
func perCPUCode(t testing.TB, a, v uint64) []uint32 {
	t.Helper()
	adrp, err := arm64.Adrp(arm64.X16, a+4, v)
	if err != nil {
		t.Fatal(err)
	}
	return []uint32{arm64.BTIC, adrp, arm64.AddImm(arm64.X16, arm64.X16, uint32(v&0xfff)), arm64.MrsTPIDREL1(17),
		arm64.StrReg(arm64.X18, arm64.X16, 17), arm64.NOP, arm64.NOP, arm64.NOP}
}

// TestX18PolicyFromCode checks that each of the three policies is
// recognised from synthetic call_on_irq_stack code, and that code that
// stores x18 in none of their ways, or contradicts the BTF or the
// symbols, is an error (it was thread_info).
func TestX18PolicyFromCode(t *testing.T) {
	const a, v = 0xffff800008016000, 0xffff800009a31068
	k := &Kernel{V: &vmcore.Vmcore{Path: "synthetic"}, sym: map[string]uint64{"call_on_irq_stack": a},
		off: map[string]uint64{"thread_info.scs_sp": 24, "task_struct.thread_info": 0}}
	enc := func(ws ...uint32) []byte {
		b := make([]byte, 4*len(ws))
		for i, w := range ws {
			binary.LittleEndian.PutUint32(b[4*i:], w)
		}
		return b
	}
	per := perCPUCode(t, a, v)
	for _, c := range []struct {
		name string
		code []byte
		sym  uint64 // irq_shadow_call_stack_saved_ptr, if set
		want scs.Policy
		bad  string // the error says this
	}{
		{"thread_info", enc(arm64.BTIC, arm64.MrsSPEL0(arm64.X16), arm64.StrImm(arm64.X18, arm64.X16, 24), arm64.BLR(1)), 0, scs.ThreadInfo, ""},
		{"on-stack", enc(arm64.BTIC, arm64.StpPre(arm64.X18, 31, arm64.SP, -16), arm64.BLR(1)), 0, scs.OnStack, ""},
		{"per-cpu", enc(per...), 0, scs.PerCPU, ""},
		{"per-cpu with its symbol", enc(per...), v, scs.PerCPU, ""},
		{"per-cpu, other symbol", enc(per...), v + 8, 0, "irq_shadow_call_stack_saved_ptr is at"},
		{"thread_info at another offset", enc(arm64.MrsSPEL0(arm64.X16), arm64.StrImm(arm64.X18, arm64.X16, 32)), 0, 0, "thread_info.scs_sp is at 24"},
		{"x18 into an unknown base", enc(arm64.StrImm(arm64.X18, arm64.X16, 24)), 0, 0, "into no known place"},
		{"x18 into an unknown register pair", enc(arm64.StrReg(arm64.X18, arm64.X16, 17)), 0, 0, "into no known place"},
		{"call before any save", enc(arm64.BTIC, arm64.MrsSPEL0(arm64.X16), arm64.BLR(1), arm64.StrImm(arm64.X18, arm64.X16, 24)), 0, 0, "blr before any recognised store"},
		{"no save", enc(arm64.NOP, arm64.NOP), 0, 0, "no recognised store of x18"},
	} {
		delete(k.sym, "irq_shadow_call_stack_saved_ptr")
		if c.sym != 0 {
			k.sym["irq_shadow_call_stack_saved_ptr"] = c.sym
		}
		got, err := k.x18Policy(a, c.code)
		switch {
		case c.bad != "":
			if err == nil || !strings.Contains(err.Error(), c.bad) {
				t.Errorf("%s: %+v, %v; want an error saying %q", c.name, got, err, c.bad)
			}
		case err != nil || got.Policy != c.want || got.Why == "" || (c.want == scs.PerCPU) != (got.Var == v):
			t.Errorf("%s: %+v, %v; want %v", c.name, got, err, c.want)
		}
	}
}

// lIPI returns the kernel of dir's l-ipi stop (CPU 0 on its IRQ stack),
// reading through an overlay, and CPU 0's FP walk.
func lIPI(t *testing.T, dir string) (*Kernel, *overlay, []unwind.Frame) {
	t.Helper()
	cp, err := OpenCapture(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := &cp.Expected.Stops[1]
	k, err := cp.Kernel(s)
	if err != nil || s.Name != "l-ipi" || s.StoppedCPU != 0 {
		t.Fatalf("%s: %v", s.Name, err)
	}
	o := &overlay{base: k.mem}
	k.mem = o
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
			slot, _ = k.read64(slotAt)
		}
	}
	task, _, _ := k.Current(0)
	_, stale, err := k.threadSCS(task)
	if err != nil || slot == 0 || stale >= slot {
		t.Fatalf("slot %#x, thread_info.scs_sp %#x (%v)", slot, stale, err)
	}
	a := k.sym["call_on_irq_stack"]
	v := k.sym["irq_shadow_call_stack_ptr"] + 0x40 // the seed's variable, at an address of its own
	o.setCode(a, perCPUCode(t, a, v))
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
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.field) {
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

// FuzzX18Policy checks the policy recognition on arbitrary code: no
// panic, and a recognised policy says which instructions decided it.
func FuzzX18Policy(f *testing.F) {
	const a = 0xffff800008016000
	var seed []byte
	for _, w := range perCPUCode(f, a, 0xffff800009a31068) {
		seed = binary.LittleEndian.AppendUint32(seed, w)
	}
	f.Add(seed)
	f.Add([]byte{0xf2, 0x7f, 0xbf, 0xa9})
	k := &Kernel{V: &vmcore.Vmcore{Path: "fuzz"}, sym: map[string]uint64{"call_on_irq_stack": a},
		off: map[string]uint64{"thread_info.scs_sp": 24, "task_struct.thread_info": 0}}
	f.Fuzz(func(t *testing.T, code []byte) {
		if len(code) > policyScan {
			code = code[:policyScan]
		}
		p, err := k.x18Policy(a, code)
		if err == nil && (p.Why == "" || p.Policy >= 3 || (p.Policy == scs.PerCPU) != (p.Var != 0)) {
			t.Fatalf("%+v", p)
		}
	})
}
