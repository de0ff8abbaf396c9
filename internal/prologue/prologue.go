// Package prologue scans the functions of an arm64 ELF file for the code
// patterns the unwinders rely on: the shadow-call-stack push and pop that
// clang and GCC emit for -fsanitize=shadow-call-stack
// (str x30, [x18], #8 / ldr x30, [x18, #-8]!), return-address signing and
// authentication for -mbranch-protection=pac-ret (paciasp/pacibsp and
// autiasp/autibsp, which golang.org/x/arch/arm64/arm64asm shows as HINT #25,
// #27, #29 and #31, and the v8.3 retaa/retab), the frame record
// (stp x29, x30, [sp, ...] then x29 = sp), patchable-function-entry NOPs and
// the ftrace entry "mov x9, x30", and whether the function is a leaf.
//
// It also answers the question a reliable unwinder asks of every return
// address: is the instruction before it a call (bl, blr, blraa, ...)?
//
// Functions come from the STT_FUNC and STT_GNU_IFUNC symbols of .symtab and
// .dynsym, each (name, address) once: system libraries are stripped to
// .dynsym. A file that is not a 64-bit little-endian arm64 ELF file, is
// truncated or corrupt, or has no function symbol fails with a [FileError]
// that names the file, says what is wrong and, where it applies, at which
// offset. TestObjdump checks the scanner against aarch64-linux-gnu-objdump
// on Debian's arm64 libc, ld.so, libm, libstdc++ and libgcc_s.
//
// Instructions are decoded with arm64asm; the pointer-authentication
// instructions arm64asm does not know (retaa, retab, blraa and relatives)
// are matched by their encodings from the Arm ARM.
package prologue

import (
	"encoding/binary"
	"fmt"
	"sort"

	"golang.org/x/arch/arm64/arm64asm"
)

// Encodings matched exactly (Arm ARM, C6.2).
const (
	insnSCSPush = 0xf800865e // str x30, [x18], #8
	insnSCSPop  = 0xf85f8e5e // ldr x30, [x18, #-8]!
	insnRETAA   = 0xd65f0bff
	insnRETAB   = 0xd65f0fff
	insnMovX9LR = 0xaa1e03e9 // mov x9, x30 (orr x9, xzr, x30)
)

// Hint numbers (HINT #n) of the PAC and BTI instructions in the hint space.
const (
	hintXPACLRI = 7
	hintPACIAZ  = 24
	hintPACIASP = 25
	hintPACIBZ  = 26
	hintPACIBSP = 27
	hintAUTIAZ  = 28
	hintAUTIASP = 29
	hintAUTIBZ  = 30
	hintAUTIBSP = 31
	hintBTI     = 32 // 32, 34, 36, 38: bti, bti c, bti j, bti jc
)

// Key is a pointer-authentication instruction key.
type Key uint8

// The keys a function signs or authenticates its return address with.
const (
	KeyNone Key = iota // no signing / authentication
	KeyA               // IA key: paciasp, autiasp, retaa
	KeyB               // IB key: pacibsp, autibsp, retab
)

// String returns "-", "A" or "B".
func (k Key) String() string {
	switch k {
	case KeyA:
		return "A"
	case KeyB:
		return "B"
	}
	return "-"
}

// Func describes one function.
type Func struct {
	Name string
	Addr uint64
	Size uint64 // st_size (or to the next symbol), cut at the next function symbol and the section's end

	SCSPush bool // has str x30, [x18], #8
	SCSPop  bool // has ldr x30, [x18, #-8]!
	// Sign is the key of the first instruction that signs x30
	// (paciasp/pacibsp with SP as modifier, paciaz/pacibz with zero).
	Sign Key
	// Auth is the key of the first instruction that authenticates x30
	// (autiasp/autibsp, autiaz/autibz, retaa/retab).
	Auth Key
	// SignBeforePush: x30 is signed before it is pushed on the shadow
	// call stack, so the SCS entries carry the PAC and must be stripped.
	SignBeforePush bool
	// FrameRecord: stores x29 and x30 as a pair at sp (stp x29, x30,
	// [sp, #off] or [sp, #-n]!) and sets x29 to sp or sp+off.
	FrameRecord bool
	// BTI: the function starts with a BTI landing pad.
	BTI bool
	// EntryNOPs is the number of NOPs at the entry (after a BTI), as
	// -fpatchable-function-entry leaves them.
	EntryNOPs int
	// FtraceMovX9: "mov x9, x30" among the first instructions, the
	// patched-in ftrace entry sequence (mov x9, x30; bl ftrace_caller).
	FtraceMovX9 bool
	// Calls counts bl, blr and the authenticated blraa/blrab(z); a
	// function without calls is a leaf.
	Calls int
	// Unknown counts words neither arm64asm nor the PAC matcher decode.
	Unknown int
}

// Leaf reports whether f makes no calls.
func (f Func) Leaf() bool { return f.Calls == 0 }

// pacCall matches the v8.3 authenticated calls arm64asm does not decode.
func pacCall(w uint32) (string, bool) {
	switch {
	case w&0xfffffc00 == 0xd73f0800:
		return fmt.Sprintf("blraa x%d, x%d", w>>5&31, w&31), true
	case w&0xfffffc00 == 0xd73f0c00:
		return fmt.Sprintf("blrab x%d, x%d", w>>5&31, w&31), true
	case w&0xfffffc1f == 0xd63f081f:
		return fmt.Sprintf("blraaz x%d", w>>5&31), true
	case w&0xfffffc1f == 0xd63f0c1f:
		return fmt.Sprintf("blrabz x%d", w>>5&31), true
	}
	return "", false
}

// decoded is one instruction word, decoded once.
type decoded struct {
	in  arm64asm.Inst
	err error
}

func decode(w uint32) decoded {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], w)
	in, err := arm64asm.Decode(b[:])
	return decoded{in, err}
}

// decoder decodes instruction words, each distinct word once: decoding
// depends only on the word (a bl's target is computed from the pc
// separately), and arm64asm costs about 2 µs a word, so a binary whose
// function symbols overlap, or whose code repeats, is not decoded again.
type decoder map[uint32]decoded

func (c decoder) decode(w uint32) decoded {
	d, ok := c[w]
	if !ok {
		d = decode(w)
		c[w] = d
	}
	return d
}

// callKind reports whether w (decoded as d) is a call: bl, blr, or one of
// the authenticated calls arm64asm does not decode.
func callKind(w uint32, d decoded) bool {
	if _, ok := pacCall(w); ok {
		return true
	}
	return d.err == nil && (d.in.Op == arm64asm.BL || d.in.Op == arm64asm.BLR)
}

// isCall reports whether w (at pc, decoded as d) is a call, its target
// for bl, and its text.
func isCall(w uint32, d decoded, pc uint64) (call bool, target uint64, text string) {
	if text, ok := pacCall(w); ok {
		return true, 0, text
	}
	if d.err != nil {
		return false, 0, ""
	}
	switch d.in.Op {
	case arm64asm.BL:
		rel, _ := d.in.Args[0].(arm64asm.PCRel)
		target := pc + uint64(rel)
		return true, target, fmt.Sprintf("bl %#x", target)
	case arm64asm.BLR:
		return true, 0, arm64asm.GNUSyntax(d.in)
	}
	return false, 0, arm64asm.GNUSyntax(d.in)
}

// ScanCode scans the code of one function at addr. code's length should be
// a multiple of 4; a trailing partial word is ignored.
func ScanCode(name string, addr uint64, code []byte) Func {
	return scanCode(name, addr, code, decoder{})
}

// scanCode is ScanCode with a decoder shared across one binary's functions.
func scanCode(name string, addr uint64, code []byte, dec decoder) Func {
	f := scanSpans(addr, code, []uint64{uint64(len(code))}, dec)[0]
	f.Name = name
	return f
}

// scanSpans scans the code at addr once for functions that all start at
// addr, of the given sizes (at most len(code)): the scan is a pass over
// the words, and each function is its state after its size.
func scanSpans(addr uint64, code []byte, sizes []uint64, dec decoder) []Func {
	order := make([]int, len(sizes))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return sizes[order[a]] < sizes[order[b]] })
	out := make([]Func, len(sizes))
	sc := scanner{f: Func{Addr: addr}, pushAt: -1, signAt: -1, entry: true}
	i := 0
	for _, k := range order {
		for ; uint64(4*i+4) <= sizes[k]; i++ {
			sc.step(i, binary.LittleEndian.Uint32(code[4*i:]), dec)
		}
		out[k] = sc.result(sizes[k])
	}
	return out
}

// scanner is the state of a scan after some words of a function.
type scanner struct {
	f              Func
	pushAt, signAt int
	entry          bool // still in the entry sequence of BTI and NOPs
	spX29Pair      bool
}

// result returns the function of size bytes scanned so far.
func (sc *scanner) result(size uint64) Func {
	f := sc.f
	f.Size = size
	f.SignBeforePush = sc.signAt >= 0 && sc.pushAt >= 0 && sc.signAt < sc.pushAt
	return f
}

// step scans word w, the i-th of the function.
func (sc *scanner) step(i int, w uint32, dec decoder) {
	f := &sc.f
	if i < 4 && w == insnMovX9LR {
		f.FtraceMovX9 = true
	}
	switch w {
	case insnSCSPush:
		f.SCSPush = true
		if sc.pushAt < 0 {
			sc.pushAt = i
		}
		sc.entry = false
		return
	case insnSCSPop:
		f.SCSPop = true
		sc.entry = false
		return
	case insnRETAA:
		f.setAuth(KeyA)
		sc.entry = false
		return
	case insnRETAB:
		f.setAuth(KeyB)
		sc.entry = false
		return
	}
	// The non-hint forms (pacia/pacib/autia/autib x30, Xn|SP and the
	// zero-modifier paciza/autiza ...), which arm64asm does not decode:
	// with SP as the modifier pacia x30, sp signs exactly as paciasp.
	if pacDataProc(w) {
		if sign, k, ok := pacX30(w); ok {
			if sign {
				f.setSign(k, i, &sc.signAt)
			} else {
				f.setAuth(k)
			}
		}
		sc.entry = false
		return
	}
	d := dec.decode(w)
	if callKind(w, d) {
		f.Calls++
		sc.entry = false
		return
	}
	in, err := d.in, d.err
	if err != nil {
		f.Unknown++
		sc.entry = false
		return
	}
	switch in.Op {
	case arm64asm.HINT:
		h, _ := in.Args[0].(arm64asm.Imm_hint)
		switch {
		case h == hintPACIASP || h == hintPACIAZ:
			f.setSign(KeyA, i, &sc.signAt)
		case h == hintPACIBSP || h == hintPACIBZ:
			f.setSign(KeyB, i, &sc.signAt)
		case h == hintAUTIASP || h == hintAUTIAZ:
			f.setAuth(KeyA)
		case h == hintAUTIBSP || h == hintAUTIBZ:
			f.setAuth(KeyB)
		case h >= hintBTI && h <= hintBTI+6 && h%2 == 0:
			// A landing pad anywhere in the entry run of BTI and NOPs:
			// with -fpatchable-function-entry the NOPs may come first.
			if sc.entry {
				f.BTI = true
			}
			return // a landing pad keeps the entry sequence going
		}
		sc.entry = false
	case arm64asm.NOP:
		if sc.entry {
			f.EntryNOPs++
		}
	case arm64asm.STP:
		if isReg(in.Args[0], arm64asm.X29) && isReg(in.Args[1], arm64asm.X30) {
			if m, ok := in.Args[2].(arm64asm.MemImmediate); ok && m.Base == arm64asm.RegSP(arm64asm.SP) &&
				(m.Mode == arm64asm.AddrPreIndex || m.Mode == arm64asm.AddrOffset) {
				sc.spX29Pair = true
			}
		}
		sc.entry = false
	case arm64asm.MOV, arm64asm.ADD:
		// mov x29, sp or add x29, sp, #off after the pair store. Register
		// 31 is sp only where the instruction reads it as sp (arm64asm
		// types it RegSP); "mov x29, xzr" (orr) zeroes x29 instead.
		if sc.spX29Pair && isReg(in.Args[0], arm64asm.X29) && isSP(in.Args[1]) {
			f.FrameRecord = true
		}
		sc.entry = false
	default:
		sc.entry = false
	}
}

// isReg reports whether a is register r, whether arm64asm typed it as a
// Reg or as a RegSP (SP shares XZR's encoding: the instruction decides).
func isReg(a arm64asm.Arg, r arm64asm.Reg) bool {
	switch a := a.(type) {
	case arm64asm.Reg:
		return a == r
	case arm64asm.RegSP:
		return arm64asm.Reg(a) == r
	}
	return false
}

// isSP reports whether a is register 31 read as the stack pointer.
func isSP(a arm64asm.Arg) bool {
	r, ok := a.(arm64asm.RegSP)
	return ok && r == arm64asm.RegSP(arm64asm.SP)
}

// pacDataProc matches every allocated non-hint PAC instruction of the
// data-processing (1 source) group (Arm ARM C4.1.94: PACIA ... AUTDZB,
// opcode 0b000000 to 0b010001 in bits 15:10), which arm64asm does not
// decode, so they count as known words.
func pacDataProc(w uint32) bool {
	return w&0xffff0000 == 0xdac10000 && w>>10&0x3f <= 0x11 &&
		(w>>13&1 == 0 || w>>5&31 == 31)
}

// pacX30 matches the non-hint v8.3 instructions that sign or authenticate
// x30 with an instruction key (Arm ARM C6.2: PACIA, PACIB, AUTIA, AUTIB
// with a register or SP modifier, and PACIZA ... AUTIZB with zero): bits
// 31:14 and 12:10 give the operation, bit 13 is Z, Rd (bits 4:0) is 30.
func pacX30(w uint32) (sign bool, k Key, ok bool) {
	if w&0x1f != 30 || (w&(1<<13) != 0 && w>>5&31 != 31) { // Z=1 needs Rn=31
		return false, KeyNone, false
	}
	switch w & 0xffffdc1f {
	case 0xdac1001e:
		return true, KeyA, true
	case 0xdac1041e:
		return true, KeyB, true
	case 0xdac1101e:
		return false, KeyA, true
	case 0xdac1141e:
		return false, KeyB, true
	}
	return false, KeyNone, false
}

func (f *Func) setSign(k Key, i int, at *int) {
	if f.Sign == KeyNone {
		f.Sign, *at = k, i
	}
}

func (f *Func) setAuth(k Key) {
	if f.Auth == KeyNone {
		f.Auth = k
	}
}

// Funcs returns the functions in address order. The slice must not be
// modified.
func (b *Binary) Funcs() []Func { return b.funcs }

// Func returns the first function named name.
func (b *Binary) Func(name string) (Func, bool) {
	for _, f := range b.funcs {
		if f.Name == name {
			return f, true
		}
	}
	return Func{}, false
}

// FuncAt returns the function containing pc.
func (b *Binary) FuncAt(pc uint64) (Func, bool) {
	i := sort.Search(len(b.funcs), func(i int) bool { return b.funcs[i].Addr > pc })
	for j := i - 1; j >= 0; j-- {
		if f := b.funcs[j]; pc-f.Addr < f.Size {
			return f, true
		}
		if i-j > 8 { // symbols do not nest deeply in code
			break
		}
	}
	return Func{}, false
}

// Word returns the instruction word at pc (4-byte aligned, in an
// executable section).
func (b *Binary) Word(pc uint64) (uint32, bool) {
	s := b.section(pc)
	if s == nil || pc%4 != 0 || pc-s.addr+4 > uint64(len(s.data)) {
		return 0, false
	}
	return binary.LittleEndian.Uint32(s.data[pc-s.addr:]), true
}

// CallSite describes the instruction before a return address.
type CallSite struct {
	Ret    uint64 // the return address (PAC already stripped)
	Call   bool   // the instruction at Ret-4 is bl, blr, blraa, blrab, blraaz or blrabz
	Insn   string // that instruction in GNU syntax, "" if undecodable
	Target uint64 // bl's target; 0 for an indirect call or no call
	Func   string // the function containing Ret-4, "" if none
}

// CallBefore decodes the instruction before the return address ret. It
// fails if ret is misaligned or ret-4 is not in an executable section.
func (b *Binary) CallBefore(ret uint64) (CallSite, error) {
	cs := CallSite{Ret: ret}
	if ret%4 != 0 || ret < 4 {
		return cs, fmt.Errorf("prologue: return address %#x misaligned or too low", ret)
	}
	w, ok := b.Word(ret - 4)
	if !ok {
		return cs, fmt.Errorf("prologue: %#x is outside the executable sections", ret-4)
	}
	cs.Call, cs.Target, cs.Insn = isCall(w, decode(w), ret-4)
	if f, ok := b.FuncAt(ret - 4); ok {
		cs.Func = f.Name
	}
	return cs, nil
}
