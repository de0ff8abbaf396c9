package fp

import (
	"strings"
	"testing"
)

// struct pt_regs field by field (arch/arm64/include/asm/ptrace.h): each
// offset is the previous field's end, and the last field ends at
// PtRegsSize, so one wrong constant breaks the chain.
func TestKernelABILayout(t *testing.T) {
	fields := []struct {
		name      string
		off, size uint64
	}{
		{"regs[0..30]", 0, 31 * 8},
		{"sp", PtRegsSPOff, 8},
		{"pc", PtRegsPCOff, 8},
		{"pstate", PtRegsPstateOff, 8},
		{"orig_x0", PtRegsOrigX0Off, 8},
		{"syscallno+unused2", PtRegsSyscallnoOff, 8},
		{"sdei_ttbr1", PtRegsSDEITTBR1Off, 8},
		{"stackframe", PtRegsStackFrameOff, MetaRecordSize},
	}
	end := uint64(0)
	for _, f := range fields {
		if f.off != end {
			t.Errorf("%s at %d, want %d (end of the previous field)", f.name, f.off, end)
		}
		end = f.off + f.size
	}
	if end != PtRegsSize || PtRegsSize%16 != 0 {
		t.Errorf("pt_regs end at %d, PtRegsSize %d (must match and keep sp 16-byte aligned)", end, PtRegsSize)
	}
	for n, off := range map[uint64]uint64{18: PtRegsX18Off, 29: PtRegsX29Off, 30: PtRegsLROff} {
		if off != 8*n {
			t.Errorf("regs[%d] at %d, want %d", n, off, 8*n)
		}
	}
	if MetaTypeOff != FrameRecordSize || MetaRecordSize != MetaTypeOff+8 {
		t.Errorf("meta record {0, 0, type}: type at %d, size %d", MetaTypeOff, MetaRecordSize)
	}
	if TaskPtRegsAddr(0x10000, PtRegsLayout{}) != 0x10000-PtRegsSize {
		t.Error("TaskPtRegsAddr")
	}
	// A kernel's own layout (from its BTF) decides: not 7.2's size.
	if a := TaskPtRegsAddr(0x10000, PtRegsLayout{Size: 352, X29: 232, PC: 256, StackFrame: 312}); a != 0x10000-352 {
		t.Errorf("TaskPtRegsAddr with a 352-byte pt_regs: %#x", a)
	}
}

// The one origin enum: no name means two things, and only the zero
// value is unknown.
func TestOriginNames(t *testing.T) {
	seen := map[string]Origin{}
	for o := OriginUnknown; o <= OriginGCS; o++ {
		s := o.String()
		if strings.HasPrefix(s, "Origin(") || (s == "unknown") != (o == OriginUnknown) {
			t.Errorf("origin %d: %q", o, s)
		}
		if p, ok := seen[s]; ok {
			t.Errorf("origins %d and %d are both %q", p, o, s)
		}
		seen[s] = o
	}
	if End(0).String() != "none" || ABI(0) != ABIUnknown || ABIUnknown.String() != "unknown" {
		t.Errorf("zero values: End %v, ABI %v", End(0), ABI(0))
	}
}
