package kernel_test

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/unwindkit/unwindkit/internal/kcapture"
	"github.com/unwindkit/unwindkit/unwind/kernel"
)

// TestDynamicSCS checks the capture of a kernel built with a dynamic
// shadow call stack (scs-7.2: CONFIG_UNWIND_PATCH_PAC_INTO_SCS, booted on
// a CPU without PAC, -cpu max,pauth=off): the boot turned the static key
// on and rewrote each paciasp into an SCS push, which the dump's text
// shows where the vmlinux has paciasp; and the same dump with the key
// rewritten to 0 (what a boot on a CPU with PAC leaves: x18 never
// written, thread_info.scs_sp still in the BTF) gets ErrNotSupported from
// every SCS copy instead of a copy of stale memory.
func TestDynamicSCS(t *testing.T) {
	cp, err := kcapture.OpenCapture("../../testdata/kernel/scs-7.2")
	if err != nil {
		t.Fatal(err)
	}
	// The sysrq-t stop: its dump holds every task.
	var k *kernel.Kernel
	for i := range cp.Expected.Stops {
		if s := &cp.Expected.Stops[i]; s.Name == "t" {
			if k, err = cp.Kernel(s); err != nil {
				t.Fatal(err)
			}
		}
	}
	if k == nil {
		t.Fatal("no t stop")
	}
	key := kernel.SymAddr(k, "dynamic_scs_enabled")
	if key == 0 {
		t.Fatal("no dynamic_scs_enabled symbol in the capture")
	}
	on, err := kernel.Read64(k, key)
	if err != nil || int32(on) <= 0 {
		t.Fatalf("dynamic_scs_enabled = %#x (%v), want a positive count", on, err)
	}
	if err := k.SCSState(); err != nil || !k.HasSCS() {
		t.Fatalf("SCSState: %v", err)
	}
	// nmi_trigger_cpumask_backtrace starts with paciasp in the vmlinux
	// (objdump of testdata's build: d503233f); the running kernel's text
	// has the SCS push in its place.
	// The x30 stop's dump holds that function's text (the trimmed dumps
	// keep the code the walks read).
	var kx *kernel.Kernel
	for i := range cp.Expected.Stops {
		if x := &cp.Expected.Stops[i]; x.Name == "x30" {
			if kx, err = cp.Kernel(x); err != nil {
				t.Fatal(err)
			}
		}
	}
	if kx == nil {
		t.Fatal("no x30 stop")
	}
	fn := kernel.SymAddr(kx, "nmi_trigger_cpumask_backtrace")
	var insn [4]byte
	if err := kx.V.ReadVirt(insn[:], fn); err != nil {
		t.Fatal(err)
	}
	const strX30X18 uint32 = 0xf800865e // str x30, [x18], #8
	if w := binary.LittleEndian.Uint32(insn[:]); w != strX30X18 {
		t.Errorf("nmi_trigger_cpumask_backtrace+0 is %#08x in the dump, want the patched SCS push %#08x", w, strX30X18)
	}
	rep := k.Unwind(true)
	copies := 0
	for _, c := range rep.CPUs {
		if c.SCSErr == nil && len(c.SCS) > 0 {
			copies++
		}
	}
	for _, tr := range rep.Tasks {
		if tr.SCSErr == nil && len(tr.SCS) > 0 {
			copies++
		}
	}
	if copies < 10 {
		t.Fatalf("%d SCS copies with the key on", copies)
	}

	o := &overlay{}
	o.base = kernel.SetMem(k, o)
	o.set(key, []byte{0, 0, 0, 0})
	err = k.SCSState()
	if !errors.Is(err, kernel.ErrNotSupported) || !errors.Is(err, unix.ENOSYS) || !strings.Contains(err.Error(), "off on this boot") || k.HasSCS() {
		t.Fatalf("SCSState with dynamic_scs_enabled 0: %v", err)
	}
	rep = k.Unwind(true)
	for _, c := range rep.CPUs {
		if !errors.Is(c.SCSErr, kernel.ErrNotSupported) || len(c.SCS) != 0 {
			t.Errorf("cpu %d: SCS copy with the dynamic SCS off: %d frames, %v", c.CPU, len(c.SCS), c.SCSErr)
		}
	}
	for _, tr := range rep.Tasks {
		if !errors.Is(tr.SCSErr, kernel.ErrNotSupported) || len(tr.SCS) != 0 {
			t.Errorf("task %d: SCS copy with the dynamic SCS off: %d frames, %v", tr.Task.PID, len(tr.SCS), tr.SCSErr)
		}
	}
	if len(rep.Tasks) < 10 {
		t.Errorf("%d tasks walked", len(rep.Tasks))
	}
}
