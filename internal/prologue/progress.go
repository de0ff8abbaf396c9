package prologue

import (
	"encoding/binary"
	"fmt"
	"strings"

	"golang.org/x/arch/arm64/arm64asm"
)

// X30 says where a stopped function's caller's return address is.
type X30 uint8

const (
	// X30Unknown: the code before the stop does not tell (a branch, a
	// call, a write of x30 or x29, an undecodable word, or more code
	// than a prologue).
	X30Unknown X30 = iota
	// X30Live: only in x30 (signed if a signing instruction ran, and on
	// the shadow call stack if its push ran): no frame record is linked.
	X30Live
	// X30Linked: in the frame record the function linked (x29 = sp or
	// sp + n after its stp x29, x30).
	X30Linked
)

// String returns "unknown", "live in x30" or "in the linked frame record".
func (x X30) String() string {
	switch x {
	case X30Live:
		return "live in x30"
	case X30Linked:
		return "in the linked frame record"
	}
	return "unknown"
}

// Progress is how far a function stopped before some instruction got
// through its prologue: the steps that ran (byte offsets from the
// function's start, -1 for a step that did not run) and where the
// caller's return address is.
type Progress struct {
	// SignAt is the signing of x30 (paciasp, pacibsp, paciaz, pacibz,
	// pacia/pacib x30, sp).
	SignAt int
	// PushAt is the shadow call stack push (str x30, [x18], #8).
	PushAt int
	// PairAt is the frame record store (stp x29, x30, [sp, ...]).
	PairAt int
	// LinkAt is the link of the record (mov x29, sp or add x29, sp, #n).
	LinkAt int
	// X30 is where the caller's return address is.
	X30 X30
	// Why lists the instructions that decided, "+0x8 paciasp" etc.,
	// and for X30Unknown the one that made it undecidable.
	Why string
}

// MaxProgress bounds the code Progress examines: a prologue links its
// frame record within its first 64 instructions.
const MaxProgress = 256

// ProgressOf decodes code, the instructions of a function from its start
// up to (not including) the one it stopped at, as straight-line code:
// the entry's BTI landing pads and NOPs (-fpatchable-function-entry), the
// ftrace entry (mov x9, x30; bl: ftrace_caller returns with x30 restored),
// the signing of x30, the SCS push, the frame record store and its link,
// and other instructions that write neither x29 nor x30. The first link
// decides X30Linked; code that ends before one decides X30Live; a branch,
// another call, a write of x29 or x30, an undecodable word, or code longer
// than MaxProgress decides X30Unknown.
func ProgressOf(code []byte) Progress {
	p := Progress{SignAt: -1, PushAt: -1, PairAt: -1, LinkAt: -1}
	var why []string
	step := func(off int, text string) { why = append(why, fmt.Sprintf("+%#x %s", off, text)) }
	done := func(x X30, off int, text string) Progress {
		step(off, text)
		p.X30, p.Why = x, strings.Join(why, "; ")
		return p
	}
	if len(code) > MaxProgress {
		return done(X30Unknown, len(code), fmt.Sprintf("stop past the first %d bytes: not in a prologue", MaxProgress))
	}
	if len(code)%4 != 0 {
		return done(X30Unknown, len(code), "stop not at an instruction boundary")
	}
	ftrace := -1 // offset of an entry mov x9, x30
	entry := true
	nops, nopAt := 0, 0
	flushNops := func() {
		switch {
		case nops == 1:
			step(nopAt, "nop")
		case nops > 1:
			why = append(why, fmt.Sprintf("+%#x..+%#x %d nops", nopAt, nopAt+4*(nops-1), nops))
		}
		nops = 0
	}
	for i := 0; i < len(code); i += 4 {
		w := binary.LittleEndian.Uint32(code[i:])
		if w != 0xd503201f {
			flushNops()
		}
		switch w {
		case insnSCSPush:
			p.PushAt = i
			step(i, "str x30, [x18], #8")
			entry = false
			continue
		case insnMovX9LR:
			if entry {
				ftrace = i
				step(i, "mov x9, x30 (ftrace entry)")
				continue
			}
		}
		if pacDataProc(w) {
			sign, _, ok := pacX30(w)
			if !ok || !sign {
				return done(X30Unknown, i, fmt.Sprintf("%#08x: pointer authentication of x30 or another register", w))
			}
			p.SignAt = i
			step(i, "pacia/pacib x30")
			entry = false
			continue
		}
		d := decode(w)
		if callKind(w, d) {
			if ftrace >= 0 && i == ftrace+4 && d.err == nil && d.in.Op == arm64asm.BL {
				step(i, "bl (ftrace_caller: returns with x30 restored)")
				continue
			}
			return done(X30Unknown, i, textOf(w, d)+": a call wrote x30")
		}
		if d.err != nil {
			return done(X30Unknown, i, fmt.Sprintf("%#08x: undecodable", w))
		}
		in := d.in
		switch in.Op {
		case arm64asm.NOP:
			if nops == 0 {
				nopAt = i
			}
			nops++
			continue
		case arm64asm.HINT:
			h, _ := in.Args[0].(arm64asm.Imm_hint)
			switch {
			case h == hintPACIASP || h == hintPACIAZ || h == hintPACIBSP || h == hintPACIBZ:
				p.SignAt = i
				step(i, map[arm64asm.Imm_hint]string{hintPACIASP: "paciasp", hintPACIAZ: "paciaz", hintPACIBSP: "pacibsp", hintPACIBZ: "pacibz"}[h])
				entry = false
				continue
			case h >= hintBTI && h <= hintBTI+6 && h%2 == 0:
				step(i, "bti")
				continue
			case h == hintAUTIASP || h == hintAUTIAZ || h == hintAUTIBSP || h == hintAUTIBZ || h == hintXPACLRI:
				return done(X30Unknown, i, arm64asm.GNUSyntax(in)+": x30 authenticated or stripped (an epilogue)")
			}
			step(i, arm64asm.GNUSyntax(in))
			entry = false
			continue
		case arm64asm.B, arm64asm.BR, arm64asm.CBZ, arm64asm.CBNZ, arm64asm.TBZ, arm64asm.TBNZ, arm64asm.RET, arm64asm.ERET:
			return done(X30Unknown, i, arm64asm.GNUSyntax(in)+": a branch: which instructions ran is not straight-line")
		case arm64asm.STP:
			if isReg(in.Args[0], arm64asm.X29) && isReg(in.Args[1], arm64asm.X30) {
				if m, ok := in.Args[2].(arm64asm.MemImmediate); ok && m.Base == arm64asm.RegSP(arm64asm.SP) {
					p.PairAt = i
					step(i, arm64asm.GNUSyntax(in))
					entry = false
					continue
				}
			}
		case arm64asm.MOV, arm64asm.ADD:
			if isReg(in.Args[0], arm64asm.X29) && isSP(in.Args[1]) {
				p.LinkAt = i
				return done(X30Linked, i, arm64asm.GNUSyntax(in)+": frame record linked")
			}
		}
		entry = false
		if writesX29X30(in) {
			return done(X30Unknown, i, arm64asm.GNUSyntax(in)+": writes x29 or x30")
		}
		step(i, arm64asm.GNUSyntax(in))
	}
	flushNops()
	p.X30 = X30Live
	if len(why) == 0 {
		why = append(why, "no instruction ran")
	}
	why = append(why, "no frame record linked")
	p.Why = strings.Join(why, "; ")
	return p
}

// textOf is the instruction's text for a note.
func textOf(w uint32, d decoded) string {
	if t, ok := pacCall(w); ok {
		return t
	}
	if d.err != nil {
		return fmt.Sprintf("%#08x", w)
	}
	return arm64asm.GNUSyntax(d.in)
}

// writesX29X30 reports whether in may write x29 or x30: its first
// operand (the destination of every instruction but a store) or, for a
// load pair, its second.
func writesX29X30(in arm64asm.Inst) bool {
	op := in.Op.String()
	if strings.HasPrefix(op, "ST") || op == "PRFM" || op == "MSR" || strings.HasPrefix(op, "CMP") ||
		strings.HasPrefix(op, "CMN") || strings.HasPrefix(op, "TST") || op == "DMB" || op == "DSB" || op == "ISB" {
		return false
	}
	hit := func(a arm64asm.Arg) bool {
		return isReg(a, arm64asm.X29) || isReg(a, arm64asm.X30) || isReg(a, arm64asm.W29) || isReg(a, arm64asm.W30)
	}
	if hit(in.Args[0]) {
		return true
	}
	return strings.HasPrefix(op, "LDP") && hit(in.Args[1])
}
