package prologue

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/arm64"
)

func words(ws ...uint32) []byte {
	b := make([]byte, 4*len(ws))
	for i, w := range ws {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}

// TestProgressOfEachStep checks ProgressOf at each step of the prologues
// the kernels use (GCC with ftrace's patchable entry: nop; nop; paciasp;
// stp; mov x29, sp; clang with SCS: bti c; paciasp; str x30, [x18], #8;
// sub sp; stp x29, x30, [sp, #n]; add x29, sp, #n) and for code after
// which x30 cannot be told from straight-line code.
func TestProgressOfEachStep(t *testing.T) {
	bl, _ := arm64.BL(0x1004, 0x2000)
	stp := arm64.StpPre(arm64.X29, arm64.X30, arm64.SP, -32)
	for _, c := range []struct {
		name                 string
		code                 []byte
		x30                  X30
		sign, push, pair, ln int
		why                  string
	}{
		{"first instruction", nil, X30Live, -1, -1, -1, -1, "no instruction ran"},
		{"after ftrace NOPs", words(arm64.NOP, arm64.NOP), X30Live, -1, -1, -1, -1, "+0x0..+0x4 2 nops"},
		{"after paciasp", words(arm64.NOP, arm64.NOP, arm64.PACIASP), X30Live, 8, -1, -1, -1, "+0x8 paciasp"},
		{"after stp", words(arm64.NOP, arm64.NOP, arm64.PACIASP, stp), X30Live, 8, -1, 12, -1, "+0xc stp x29, x30, [sp,#-32]!"},
		{"after mov x29, sp", words(arm64.NOP, arm64.NOP, arm64.PACIASP, stp, arm64.AddImm(arm64.X29, arm64.SP, 0)), X30Linked, 8, -1, 12, 16, "+0x10 mov x29, sp: frame record linked"},
		{"before the SCS push", words(arm64.BTIC, arm64.PACIASP), X30Live, 4, -1, -1, -1, "+0x0 bti; +0x4 paciasp"},
		{"after the SCS push", words(arm64.BTIC, arm64.PACIASP, arm64.SCSPush()), X30Live, 4, 8, -1, -1, "+0x8 str x30, [x18], #8"},
		{"clang: after sub sp and stp at an offset", words(arm64.PACIASP, arm64.SCSPush(), arm64.SubImm(arm64.SP, arm64.SP, 64), 0xa9037bfd), X30Live, 0, 4, 12, -1, "+0x8 sub sp, sp, #0x40"},
		{"clang: after add x29, sp, #48", words(arm64.PACIASP, arm64.SCSPush(), arm64.SubImm(arm64.SP, arm64.SP, 64), 0xa9037bfd, arm64.AddImm(arm64.X29, arm64.SP, 48)), X30Linked, 0, 4, 12, 16, "frame record linked"},
		{"ftrace entry patched in", words(arm64.MovReg(arm64.X9, arm64.X30), bl), X30Live, -1, -1, -1, -1, "ftrace_caller: returns with x30 restored"},
		{"a call", words(arm64.PACIASP, bl), X30Unknown, 0, -1, -1, -1, "a call wrote x30"},
		{"a branch", words(arm64.PACIASP, 0x54000061), X30Unknown, 0, -1, -1, -1, "a branch"},
		{"x30 loaded", words(0xf94003fe), X30Unknown, -1, -1, -1, -1, "writes x29 or x30"},
		{"x29 moved", words(arm64.MovReg(arm64.X29, 0)), X30Unknown, -1, -1, -1, -1, "writes x29 or x30"},
		{"x30 authenticated", words(arm64.AUTIASP), X30Unknown, -1, -1, -1, -1, "authenticated"},
		{"undecodable", words(0), X30Unknown, -1, -1, -1, -1, "undecodable"},
		{"past a prologue", make([]byte, MaxProgress+4), X30Unknown, -1, -1, -1, -1, "past the first 256 bytes"},
		{"not aligned", []byte{0x1f, 0x20}, X30Unknown, -1, -1, -1, -1, "instruction boundary"},
	} {
		p := ProgressOf(c.code)
		if p.X30 != c.x30 || p.SignAt != c.sign || p.PushAt != c.push || p.PairAt != c.pair || p.LinkAt != c.ln || !strings.Contains(p.Why, c.why) {
			t.Errorf("%s: %+v (%v); want %v, sign %d push %d pair %d link %d, why %q", c.name, p, p.X30, c.x30, c.sign, c.push, c.pair, c.ln, c.why)
		}
	}
}

// FuzzProgressOf checks ProgressOf on arbitrary code: no panic, the
// offsets of the steps that ran lie in the code, a link decides
// X30Linked and a decision is always explained.
func FuzzProgressOf(f *testing.F) {
	f.Add(words(arm64.NOP, arm64.NOP, arm64.PACIASP, arm64.StpPre(arm64.X29, arm64.X30, arm64.SP, -32), arm64.AddImm(arm64.X29, arm64.SP, 0)))
	f.Add(words(arm64.BTIC, arm64.PACIASP, arm64.SCSPush(), arm64.SubImm(arm64.SP, arm64.SP, 64)))
	f.Fuzz(func(t *testing.T, code []byte) {
		p := ProgressOf(code)
		for _, at := range []int{p.SignAt, p.PushAt, p.PairAt, p.LinkAt} {
			if at < -1 || at >= len(code) || at >= MaxProgress {
				t.Fatalf("step at %d in %d bytes: %+v", at, len(code), p)
			}
		}
		if (p.X30 == X30Linked) != (p.LinkAt >= 0) || p.Why == "" {
			t.Fatalf("%+v", p)
		}
	})
}
