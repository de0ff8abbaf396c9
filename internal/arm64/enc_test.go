package arm64

import (
	"encoding/binary"
	"testing"

	"golang.org/x/arch/arm64/arm64asm"
)

func decode(t *testing.T, insn uint32) string {
	t.Helper()
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], insn)
	inst, err := arm64asm.Decode(b[:])
	if err != nil {
		t.Fatalf("decode %#08x: %v", insn, err)
	}
	return inst.String()
}

func TestEncodingsDecode(t *testing.T) {
	bl, err := BL(0x1000, 0x2000)
	if err != nil {
		t.Fatal(err)
	}
	blBack, err := BL(0x2000, 0x1000)
	if err != nil {
		t.Fatal(err)
	}
	adrp, err := Adrp(X16, 0x10ff0, 0x15008)
	if err != nil {
		t.Fatal(err)
	}
	adrpBack, err := Adrp(X16, 0x10000, 0xf008)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Adrp(X16, 0, 1<<33); err == nil {
		t.Error("adrp 8 GiB away encoded")
	}
	for _, tc := range []struct {
		insn uint32
		want string
	}{
		{SCSPush(), "STR X30, [X18],#8"},
		{SCSPop(), "LDR X30, [X18,#-8]!"},
		{StpPre(X29, X30, SP, -16), "STP X29, X30, [SP,#-16]!"},
		{StpPre(X29, X30, SP, -64), "STP X29, X30, [SP,#-64]!"},
		{LdpPost(X29, X30, SP, 16), "LDP X29, X30, [SP],#16"},
		{LdpPost(X29, X30, SP, 64), "LDP X29, X30, [SP],#64"},
		{AddImm(X29, SP, 0), "MOV X29, SP"},
		{SubImm(SP, SP, 32), "SUB SP, SP, #0x20"},
		{AddImm(SP, SP, 32), "ADD SP, SP, #0x20"},
		{MovReg(X9, X30), "MOV X9, X30"},
		{bl, "BL .+0x1000"},
		{blBack, "BL .+0xfffffffffffff000"},
		{BLR(X16), "BLR X16"},
		{PACIASP, "HINT #0x19"},
		{AUTIASP, "HINT #0x1d"},
		{PACIBSP, "HINT #0x1b"},
		{AUTIBSP, "HINT #0x1f"},
		{XPACLRI, "HINT #0x7"},
		{Hint(25), "HINT #0x19"},
		{NOP, "NOP "},
		{RET, "RET X30"},
		{StrImm(18, X16, 24), "STR X18, [X16,#24]"},
		{StrReg(18, X16, 17), "STR X18, [X16,X17]"},
		{MrsSPEL0(X16), "MRS X16, S3_0_C4_C1_0"}, // arm64asm names no system register,
		{MrsTPIDREL1(17), "MRS X17, S3_0_C13_C0_4"},
		{adrp, "ADRP X16, .+0x5000"},
		{adrpBack, "ADRP X16, .+0xfffffffffffff000"},
		{StpPre(18, 31, SP, -16), "STP X18, XZR, [SP,#-16]!"},
	} {
		if got := decode(t, tc.insn); got != tc.want {
			t.Errorf("%#08x decodes as %q, want %q", tc.insn, got, tc.want)
		}
	}
}

func TestBL(t *testing.T) {
	for _, tc := range [][2]uint64{{0x1000, 0x1004}, {0x1000, 0x1000}, {0x8000000, 0x4}, {0x4, 0x7fffffc}} {
		insn, err := BL(tc[0], tc[1])
		if err != nil {
			t.Fatalf("BL(%#x,%#x): %v", tc[0], tc[1], err)
		}
		if !IsCall(insn) {
			t.Fatalf("IsCall(bl) false")
		}
		if got, ok := BLTarget(tc[0], insn); !ok || got != tc[1] {
			t.Fatalf("BLTarget = %#x,%v want %#x", got, ok, tc[1])
		}
	}
	for _, tc := range [][2]uint64{{0x1000, 0x1002}, {0, 1 << 28}, {1 << 28, 0}} {
		if _, err := BL(tc[0], tc[1]); err == nil {
			t.Errorf("BL(%#x,%#x) accepted", tc[0], tc[1])
		}
	}
	for _, insn := range []uint32{RET, NOP, PACIASP, SCSPush(), StpPre(X29, X30, SP, -16)} {
		if IsCall(insn) {
			t.Errorf("IsCall(%#08x) true", insn)
		}
		if _, ok := BLTarget(0, insn); ok {
			t.Errorf("BLTarget(%#08x) ok", insn)
		}
	}
	if !IsCall(0xd63f081f) { // blraaz x0
		t.Error("blraaz not a call")
	}
}
