package kernel_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/arm64"
	"github.com/unwindkit/unwindkit/internal/kcapture"
	"github.com/unwindkit/unwindkit/unwind/kernel"
)

// stopAt returns the kernel of dir's stop, reading through an overlay.
func stopAt(t *testing.T, dir, stop string) (*kernel.Kernel, *overlay, *kcapture.Stop) {
	t.Helper()
	cp, err := kcapture.OpenCapture(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cp.Expected.Stops {
		if s := &cp.Expected.Stops[i]; s.Name == stop {
			k, err := cp.Kernel(s)
			if err != nil {
				t.Fatal(err)
			}
			o := &overlay{}
			o.base = kernel.SetMem(k, o)
			return k, o, s
		}
	}
	t.Fatalf("%s: no stop %s", dir, stop)
	return nil, nil, nil
}

// TestDebianStopAfterFtraceNOPs moves Debian 6.1's IPI stop from showacpu+0
// to showacpu+0x8, after the two NOPs of ftrace's patchable entry, before
// paciasp (the code, not in the trimmed dump, is Debian's prologue shape:
// nop; nop; paciasp; stp x29, x30, [sp, #-N]!; mov x29, sp). x30 is then
// still the caller's return address, __flush_smp_call_function_queue+0xd8,
// which the kernel printed: the walk must report it second and say which
// instructions decided. The old walk reported x30 only at +0.
func TestDebianStopAfterFtraceNOPs(t *testing.T) {
	k, o, s := stopAt(t, "../../testdata/kernel/deb-6.1", "l-ipi")
	a := kernel.SymAddr(k, "showacpu")
	o.setCode(a, []uint32{arm64.NOP, arm64.NOP, arm64.PACIASP, arm64.StpPre(arm64.X29, arm64.X30, arm64.SP, -32), arm64.AddImm(arm64.X29, arm64.SP, 0)})
	r := &k.V.CPUs[s.StoppedCPU].Regs
	for _, c := range []struct {
		off    uint64
		signed bool
		lr     bool
		why    string
	}{
		{0x0, false, true, "no instruction ran"},
		{0x8, false, true, "+0x0..+0x4 2 nops"},
		{0xc, true, true, "+0x8 paciasp"},
		{0x10, true, true, "+0xc stp x29, x30"},
	} {
		r.PC = a + c.off
		x30 := uint64(0xffff80000817dc2c) // __flush_smp_call_function_queue+0xd8
		if c.signed {
			x30 |= 0x5a21 << 48 // PAC bits above VA_BITS 48
		}
		r.X[30] = x30
		w, err := k.CPUWalk(s.StoppedCPU)
		if err != nil {
			t.Fatal(err)
		}
		fs, _, err := w.Run()
		ws := kcapture.Strings(k, fs)
		notes := strings.Join(w.Notes, "; ")
		if err != nil || len(fs) < 3 || fs[1].Origin != fp.OriginLR || ws[1] != "__flush_smp_call_function_queue+0xd8/0x25c" || fs[1].Raw != x30 ||
			!strings.Contains(notes, "reported second") || !strings.Contains(notes, c.why) {
			t.Errorf("showacpu+%#x: %v (%v)\nnotes: %s", c.off, ws, err, notes)
		}
	}
	// After mov x29, sp the record is linked: x30 is not reported again.
	r.PC = a + 0x14
	w, err := k.CPUWalk(s.StoppedCPU)
	if err != nil || w.LR != 0 || !strings.Contains(strings.Join(w.Notes, "; "), "+0x10 mov x29, sp: frame record linked") {
		t.Errorf("showacpu+0x14: LR %#x, %v, notes %q", w.LR, err, w.Notes)
	}
	// Code the dump does not hold: not decided, said so, x30 not reported.
	r.PC = kernel.SymAddr(k, "showacpu") + 0x40
	o.patches = nil
	if w, err := k.CPUWalk(s.StoppedCPU); err != nil || w.LR != 0 || !strings.Contains(strings.Join(w.Notes, "; "), "unknown: code of showacpu") {
		t.Errorf("unreadable code: LR %#x, %v, notes %q", w.LR, err, w.Notes)
	}
}

// TestPrologueStepsOnRealSCSCode moves scs-6.1's x30 stop through each
// step of sysrq_handle_showallcpus's real prologue in the dump (paciasp;
// str x30, [x18], #8; stp x29, x30, [sp, #-32]!; str x19, [sp, #16];
// mov x29, sp), with x18 before the push and x29 after the link set as
// the code would have them, and checks both techniques at each: the FP
// walk reports x30 (PAC-signed in the dump, stripped) second until the
// record is linked, then reads it from the record; the SCS copy puts x30
// first until the push ran, then has it as its newest entry. Every
// position gives the same chain.
func TestPrologueStepsOnRealSCSCode(t *testing.T) {
	k, _, s := stopAt(t, "../../testdata/kernel/scs-6.1", "x30")
	r := &k.V.CPUs[s.StoppedCPU].Regs
	orig := *r
	a := kernel.SymAddr(k, s.Func)
	if r.PC != a+0x10 {
		t.Fatalf("x30 stop at %s", k.Format(r.PC))
	}
	caller := k.V.Layout.Strip(orig.X[30])
	if orig.X[30] == caller {
		t.Fatalf("x30 %#x is not signed", orig.X[30])
	}
	var wantFP, wantSCS string
	for _, c := range []struct {
		off            uint64
		pushed, linked bool
		why            string
	}{
		{0x0, false, false, "no instruction ran"},
		{0x4, false, false, "+0x0 paciasp"},
		{0x8, true, false, "+0x4 str x30, [x18], #8"},
		{0xc, true, false, "+0x8 stp x29, x30, [sp,#-32]!"},
		{0x10, true, false, "+0xc str x19, [sp,#16]"},
		{0x14, true, true, "+0x10 mov x29, sp: frame record linked"},
	} {
		*r = orig
		r.PC = a + c.off
		if !c.pushed {
			r.X[18] -= 8
		}
		if c.linked {
			r.X[29] = r.SP
		}
		w, err := k.CPUWalk(s.StoppedCPU)
		if err != nil {
			t.Fatal(err)
		}
		fs, end, err := w.Run()
		if err != nil || end != fp.EndFinal || len(fs) < 3 {
			t.Fatalf("+%#x: %v %v %v", c.off, kcapture.Strings(k, fs), end, err)
		}
		notes := strings.Join(w.Notes, "; ")
		wantOrigin := fp.OriginLR
		if c.linked {
			wantOrigin = fp.OriginFrame
		}
		if fs[1].PC != caller || fs[1].Raw != orig.X[30] || fs[1].Origin != wantOrigin || !strings.Contains(notes, c.why) {
			t.Errorf("+%#x: FP frame 1 %s (raw %#x, %v)\nnotes: %s", c.off, k.Format(fs[1].PC), fs[1].Raw, fs[1].Origin, notes)
		}
		scsF, scsNotes, err := k.SCSCopyCPU(s.StoppedCPU, fs)
		wantSCS0 := fp.OriginSCS
		if !c.pushed {
			wantSCS0 = fp.OriginLR
		}
		if err != nil || len(scsF) == 0 || scsF[0].PC != caller || scsF[0].Raw != orig.X[30] || scsF[0].Origin != wantSCS0 {
			t.Errorf("+%#x: SCS copy %v (%v), want x30 first as %v\nnotes: %s", c.off, kcapture.Strings(k, scsF), err, wantSCS0, strings.Join(scsNotes, "; "))
		}
		gotFP, gotSCS := fmt.Sprint(kcapture.Strings(k, fs[1:])), fmt.Sprint(kcapture.Strings(k, scsF))
		if wantFP == "" {
			wantFP, wantSCS = gotFP, gotSCS
		}
		if gotFP != wantFP || gotSCS != wantSCS || gotFP != gotSCS {
			t.Errorf("+%#x: FP chain %s, SCS %s; at +0 %s, %s", c.off, gotFP, gotSCS, wantFP, wantSCS)
		}
	}
}
