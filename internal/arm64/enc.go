// Package arm64 encodes the few AArch64 instructions the machine model
// places in its text region: function prologues and epilogues with shadow
// call stack pushes and pops, pointer-authentication hints, frame records,
// and call sites. Every encoding is checked in tests by decoding it with
// golang.org/x/arch/arm64/arm64asm.
//
// Encodings follow the Arm Architecture Reference Manual (A64 base
// instructions: load/store register (immediate post/pre-indexed), load/store
// pair, add/sub (immediate), unconditional branch (immediate and register),
// hints).
package arm64

import "fmt"

// Register numbers used by the model.
const (
	X9  = 9
	X16 = 16
	X18 = 18 // shadow call stack pointer (scs_sp)
	X29 = 29 // frame pointer
	X30 = 30 // link register
	SP  = 31 // stack pointer when used as a base register
)

// Hint-space instructions. arm64asm prints the PAC and BTI hints as
// "HINT #n" (the number is CRm:op2).
const (
	NOP     uint32 = 0xd503201f // HINT #0
	XPACLRI uint32 = 0xd50320ff // HINT #7
	PACIASP uint32 = 0xd503233f // HINT #25
	PACIBSP uint32 = 0xd503237f // HINT #27
	AUTIASP uint32 = 0xd50323bf // HINT #29
	AUTIBSP uint32 = 0xd50323ff // HINT #31
	BTIC    uint32 = 0xd503245f // HINT #34
	RET     uint32 = 0xd65f03c0 // ret (x30)
	RETAA   uint32 = 0xd65f0bff
	RETAB   uint32 = 0xd65f0fff
	BRK0    uint32 = 0xd4200000 // brk #0
)

// Hint returns HINT #imm (imm < 128).
func Hint(imm uint32) uint32 { return 0xd503201f | (imm&0x7f)<<5 }

// SCSPush is "str x30, [x18], #8": the shadow call stack push that
// -fsanitize=shadow-call-stack emits in a non-leaf prologue.
func SCSPush() uint32 { return StrPost(X30, X18, 8) }

// SCSPop is "ldr x30, [x18, #-8]!": the matching epilogue pop.
func SCSPop() uint32 { return LdrPre(X30, X18, -8) }

// StrPost encodes "str xt, [xn], #imm" (64-bit, post-index, imm in
// [-256, 255]).
func StrPost(rt, rn int, imm int) uint32 {
	return 0xf8000400 | uint32(imm&0x1ff)<<12 | uint32(rn&31)<<5 | uint32(rt&31)
}

// LdrPre encodes "ldr xt, [xn, #imm]!" (64-bit, pre-index).
func LdrPre(rt, rn int, imm int) uint32 {
	return 0xf8400c00 | uint32(imm&0x1ff)<<12 | uint32(rn&31)<<5 | uint32(rt&31)
}

// StpPre encodes "stp xt1, xt2, [xn, #imm]!" (64-bit, imm a multiple of 8
// in [-512, 504]).
func StpPre(rt1, rt2, rn int, imm int) uint32 {
	return 0xa9800000 | uint32((imm/8)&0x7f)<<15 | uint32(rt2&31)<<10 | uint32(rn&31)<<5 | uint32(rt1&31)
}

// LdpPost encodes "ldp xt1, xt2, [xn], #imm" (64-bit).
func LdpPost(rt1, rt2, rn int, imm int) uint32 {
	return 0xa8c00000 | uint32((imm/8)&0x7f)<<15 | uint32(rt2&31)<<10 | uint32(rn&31)<<5 | uint32(rt1&31)
}

// AddImm encodes "add xd, xn, #imm" (imm in [0, 4095]); with rd or rn = 31
// this is sp, so AddImm(X29, SP, 0) is "mov x29, sp".
func AddImm(rd, rn int, imm uint32) uint32 {
	return 0x91000000 | (imm&0xfff)<<10 | uint32(rn&31)<<5 | uint32(rd&31)
}

// SubImm encodes "sub xd, xn, #imm" (imm in [0, 4095]).
func SubImm(rd, rn int, imm uint32) uint32 {
	return 0xd1000000 | (imm&0xfff)<<10 | uint32(rn&31)<<5 | uint32(rd&31)
}

// MovReg encodes "mov xd, xm" (orr xd, xzr, xm); MovReg(X9, X30) is the
// ftrace "mov x9, x30".
func MovReg(rd, rm int) uint32 {
	return 0xaa0003e0 | uint32(rm&31)<<16 | uint32(rd&31)
}

// BL encodes "bl target" placed at pc. It fails if target is not 4-byte
// aligned relative to pc or out of the ±128 MiB range.
func BL(pc, target uint64) (uint32, error) {
	d := int64(target - pc)
	if d%4 != 0 || d < -(1<<27) || d >= 1<<27 {
		return 0, fmt.Errorf("arm64: bl from %#x to %#x out of range", pc, target)
	}
	return 0x94000000 | uint32(d/4)&0x3ffffff, nil
}

// BLR encodes "blr xn".
func BLR(rn int) uint32 { return 0xd63f0000 | uint32(rn&31)<<5 }

// IsCall reports whether insn is a bl or blr (including the PAC forms
// blraa/blrab and their zero-modifier variants).
func IsCall(insn uint32) bool {
	switch {
	case insn&0xfc000000 == 0x94000000: // bl
		return true
	case insn&0xfffffc1f == 0xd63f0000: // blr
		return true
	case insn&0xfefff800 == 0xd63f0800: // blraa, blrab, blraaz, blrabz
		return true
	}
	return false
}

// BLTarget returns the target of the bl at pc, or ok=false if insn is not a bl.
func BLTarget(pc uint64, insn uint32) (uint64, bool) {
	if insn&0xfc000000 != 0x94000000 {
		return 0, false
	}
	off := int64(int32(insn<<6)>>6) * 4
	return pc + uint64(off), true
}

// StrImm encodes "str xt, [xn, #imm]" (64-bit, unsigned offset: imm a
// multiple of 8 in [0, 32760]).
func StrImm(rt, rn int, imm int) uint32 {
	return 0xf9000000 | uint32((imm/8)&0xfff)<<10 | uint32(rn&31)<<5 | uint32(rt&31)
}

// StrReg encodes "str xt, [xn, xm]" (64-bit, register offset, no shift):
// the kernel's str_this_cpu.
func StrReg(rt, rn, rm int) uint32 {
	return 0xf8206800 | uint32(rm&31)<<16 | uint32(rn&31)<<5 | uint32(rt&31)
}

// MrsSPEL0 encodes "mrs xt, sp_el0" (the kernel's get_current_task).
func MrsSPEL0(rt int) uint32 { return 0xd5384100 | uint32(rt&31) }

// MrsTPIDREL1 encodes "mrs xt, tpidr_el1" (the kernel's this_cpu_offset).
func MrsTPIDREL1(rt int) uint32 { return 0xd538d080 | uint32(rt&31) }

// Adrp encodes "adrp xd, target" placed at pc: xd = the 4 KiB page of
// target. It fails if the page is out of the ±4 GiB range.
func Adrp(rd int, pc, target uint64) (uint32, error) {
	d := int64(target&^0xfff-pc&^0xfff) >> 12
	if d < -(1<<20) || d >= 1<<20 {
		return 0, fmt.Errorf("arm64: adrp from %#x to %#x out of range", pc, target)
	}
	u := uint32(d) & 0x1fffff
	return 0x90000000 | (u&3)<<29 | (u>>2)<<5 | uint32(rd&31), nil
}
